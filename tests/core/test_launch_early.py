"""Which launches may go before the forkserver has imported everything: the server forks a
light function's ranks before it has imported DEFERRED (threeaxes.launch.forkserver_idle),
any other function's only after (threeaxes.launch.payload_modules decides which is which);
it says when it is warm, and its quiet preload handler never reaches the ranks."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle
import pytest
from launch_helpers import run_child

from threeaxes.launch import forkserver_idle, payload_modules, prestart


def _notebook_function(source, name, **globals_):
    """A function defined as in a notebook cell (module __main__), pickled by value."""
    namespace = {"__name__": "__main__", **globals_}
    exec(textwrap.dedent(source), namespace)
    return namespace[name]


def test_a_function_naming_only_torch_and_distributed_is_light():
    import torch
    import torch.distributed as dist

    all_reduce = _notebook_function("""
        def all_reduce(rank, world_size, t):
            dist.all_reduce(t)
            return torch.ones(1) * t
    """, "all_reduce", torch=torch, dist=dist)
    payload = cloudpickle.dumps((all_reduce, (torch.ones(3),), {}))
    assert {"torch", "torch.distributed"} <= payload_modules.modules_named(payload)
    assert payload_modules.is_light(payload)
    rank_only = _notebook_function("rank_only = lambda rank, world_size: rank", "rank_only")
    assert payload_modules.is_light(cloudpickle.dumps((rank_only, (), {})))
    # The same lambda from a module (this one) names that module: it waits, to be safe.
    assert not payload_modules.is_light(cloudpickle.dumps((lambda rank, world_size: rank, (), {})))


def test_torch_optim_through_the_torch_global_is_seen_and_waits():
    import torch

    step = _notebook_function("""
        def step(rank, world_size):
            layer = torch.nn.Linear(2, 2)
            torch.optim.SGD(layer.parameters(), lr=0.1).step()
    """, "step", torch=torch)
    payload = cloudpickle.dumps((step, (), {}))
    assert {"torch.optim", "torch.nn"} <= payload_modules.modules_named(payload)
    assert not payload_modules.is_light(payload)


def test_anything_from_threeaxes_waits():
    from threeaxes import toy

    assert not payload_modules.is_light(cloudpickle.dumps((toy.make_batch, (toy.ToyConfig(), 2), {})))


def test_an_unreadable_payload_waits_as_before():
    assert not payload_modules.is_light(b"not a pickle")


def test_the_warm_marker_sits_beside_a_socket_file_and_nowhere_else():
    assert prestart.warm_marker("/tmp/pymp-x/listener-y") == "/tmp/pymp-x/listener-y.warm"
    assert prestart.warm_marker("\0listener-abstract") is None  # no file to put beside it
    assert prestart.warm_marker(None) is None


def test_a_server_that_never_says_it_is_warm_is_waited_for_once(monkeypatch, tmp_path):
    import multiprocessing.forkserver as fs

    address = str(tmp_path / "listener-x")
    monkeypatch.setattr(fs, "ensure_running", lambda: None)
    monkeypatch.setattr(fs._forkserver, "_forkserver_address", address)
    monkeypatch.setattr(fs._forkserver, "_forkserver_pid", -12345)
    monkeypatch.setattr(prestart, "_silent_server", None)
    assert prestart.wait_until_warm(timeout=0) is False  # only a look: it does not give up on it
    assert prestart._silent_server is None
    start = time.monotonic()
    assert prestart.wait_until_warm(timeout=0.2) is False
    assert time.monotonic() - start >= 0.2 and prestart._silent_server == -12345
    # not again for this server: it returns without a single poll (no clock to be late)
    def no_polling(seconds):
        raise AssertionError("wait_until_warm polled again for a server that once stayed silent")
    with monkeypatch.context() as patched:
        patched.setattr(prestart.time, "sleep", no_polling)
        assert prestart.wait_until_warm(timeout=30) is False
    monkeypatch.setattr(fs._forkserver, "_forkserver_pid", -54321)  # a new server, which says so
    Path(address + ".warm").touch()
    assert prestart.wait_until_warm(timeout=30) is True


def test_outside_the_forkserver_importing_it_changes_nothing():
    import selectors

    assert selectors.DefaultSelector is forkserver_idle._ORIGINAL_SELECTOR
    assert forkserver_idle._server_pid is None


@pytest.fixture
def server_selector(monkeypatch):
    """The server's selector, built here as if this process were the forkserver, with
    DEFERRED = a stdlib module not yet imported, then one that does not exist."""
    monkeypatch.setattr(forkserver_idle, "_server_pid", os.getpid())
    monkeypatch.setattr(prestart, "DEFERRED", ["colorsys", "threeaxes._no_such_module"])
    monkeypatch.setattr(forkserver_idle, "imported", [])
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    marks = []
    monkeypatch.setattr(forkserver_idle, "_mark_warm", lambda: marks.append(len(forkserver_idle.imported)))
    read_end, write_end = os.pipe()
    selector = forkserver_idle._ImportWhileIdleSelector()
    selector.register(read_end, 1)  # EVENT_READ
    yield selector, read_end, write_end, marks
    selector.close()
    os.close(read_end)
    os.close(write_end)


def test_the_server_serves_a_waiting_request_before_any_deferred_import(server_selector):
    selector, read_end, write_end, marks = server_selector
    os.write(write_end, b"x")  # a fork request is already waiting
    assert [key.fd for key, _ in selector.select()] == [read_end]
    assert forkserver_idle.imported == [] and marks == [] and "colorsys" not in sys.modules


def test_after_a_request_the_server_waits_a_moment_for_the_next_rank(server_selector, monkeypatch):
    import threading

    selector, read_end, write_end, marks = server_selector
    monkeypatch.setattr(forkserver_idle, "IDLE_AFTER_S", 5.0)  # generous, for a loaded machine
    os.write(write_end, b"x")
    selector.select()
    os.read(read_end, 1)
    threading.Timer(0.2, os.write, (write_end, b"y")).start()  # the next rank's request
    assert [key.fd for key, _ in selector.select()] == [read_end]
    assert forkserver_idle.imported == []  # it did not start an import in between


def test_an_idle_server_imports_the_rest_then_says_it_is_warm_once(server_selector):
    import threading

    selector, read_end, write_end, marks = server_selector
    threading.Timer(1.0, os.write, (write_end, b"x")).start()  # a request after the imports
    assert [key.fd for key, _ in selector.select()] == [read_end]
    (first, seconds), (missing, error) = forkserver_idle.imported
    assert (first, missing) == ("colorsys", "threeaxes._no_such_module") and "colorsys" in sys.modules
    assert seconds >= 0 and "ModuleNotFoundError" in error  # a failed import is skipped, not fatal
    assert marks == [2]  # warm once everything was tried
    os.read(read_end, 1)
    os.write(write_end, b"y")
    selector.select()
    assert marks == [2]


@pytest.mark.slow
def test_an_early_light_launch_goes_first_and_a_heavy_one_gets_everything():
    # torch first, so this caller reaches its launch long before the server has torch;
    # the light launch must not wait for DEFERRED, the heavy one (torch.optim) must.
    run = run_child("""
        import torch, torch.distributed as dist, cloudpickle
        import multiprocessing.forkserver as fs
        import threeaxes
        from threeaxes.launch import launch, prestart

        def what_the_rank_has(rank, world_size):
            import threeaxes.launch.forkserver_idle as idle
            return {"ppid": os.getppid(), "dynamo": "torch._dynamo" in sys.modules,
                    "imported": [name for name, _ in idle.imported]}

        def light(rank, world_size):
            t = torch.ones(1)
            dist.all_reduce(t)  # communication: sum over ranks
            return what_the_rank_has(rank, world_size)

        def heavy(rank, world_size):
            torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1).step()
            return what_the_rank_has(rank, world_size)

        light_ranks = launch(light, 2)
        heavy_ranks = launch(heavy, 2)
        marker = prestart.warm_marker(fs._forkserver._forkserver_address)
        print(json.dumps({"light": light_ranks, "heavy": heavy_ranks,
                          "server": fs._forkserver._forkserver_pid,
                          "servers": forkservers_under(os.getpid()), "warm": os.path.exists(marker),
                          "deferred": prestart.DEFERRED}))
    """, setting="1")
    assert run["servers"] == [run["server"]] and run["warm"]
    assert {r["ppid"] for r in run["light"] + run["heavy"]} == {run["server"]}
    first = run["light"][0]
    assert first["imported"] == [] and not first["dynamo"]  # forked before any deferred import
    for rank in run["heavy"]:
        assert rank["imported"] == run["deferred"] and rank["dynamo"]  # forked once all was in


def _ctrl_c_handler(rank, world_size):
    import signal

    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_the_quiet_preload_handler_never_reaches_the_ranks():
    """forkserver_quiet makes a SIGINT during the server's preload end it without a
    traceback; a rank still handles SIGINT as the worker sets it (ignored: the launcher
    stops ranks itself)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from threeaxes.launch import launch

    assert launch(_ctrl_c_handler, 2) == [True, True]


def test_a_server_interrupted_while_it_preloads_exits_without_a_traceback(tmp_path):
    """The forkserver's preload starts with forkserver_quiet: a SIGINT then ends it
    silently (Jupyter signals the kernel's whole group on shutdown)."""
    code = textwrap.dedent("""
        import os, signal, sys
        from multiprocessing import forkserver
        def main():
            import threeaxes.launch.forkserver_quiet
            os.kill(os.getpid(), signal.SIGINT)
            import time; time.sleep(5)
            print("still here")
        main.__code__ = main.__code__.replace(co_filename=os.path.join("multiprocessing", "forkserver.py"))
        main()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
