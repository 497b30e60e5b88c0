"""threeaxes.launch.prestart: the forkserver starts in the background when threeaxes is imported.

What is checked is structure, not timing: the server is running before the first
launch is called, the ranks of that launch fork from exactly that server, no second
server appears (not even when a launch races the prestart), and nothing starts when
opted out, outside a kernel, or inside the forkserver and its ranks. The server forks
a light function's ranks before it has imported DEFERRED (threeaxes.launch.forkserver_idle),
any other function's only after (threeaxes.launch.payload_modules decides which is which).

Each scenario runs in a fresh Python (or a real Jupyter kernel): the decision is
taken once, when threeaxes is first imported in a process.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle
import pytest

from threeaxes.launch import forkserver_idle, payload_modules, prestart

ROOT = Path(__file__).resolve().parents[2]

# Shared by the child programs: which processes in this one's subtree are forkservers.
CHILD_HELPERS = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})

    def forkservers_under(pid):
        '''pids of forkserver processes among pid's descendants.'''
        found, todo = [], [pid]
        while todo:
            parent = todo.pop()
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                    cmdline = (stat.parent / "cmdline").read_bytes()
                except OSError:
                    continue
                if int(fields[1]) == parent:
                    child = int(stat.parent.name)
                    todo.append(child)
                    if b"multiprocessing.forkserver import main" in cmdline:
                        found.append(child)
        return sorted(found)

    def ppid_of_rank(rank, world_size):
        import threeaxes.launch.prestart as p
        return {{"ppid": os.getppid(), "decision": p.decision,
                 "reason_if_forced": p.skip_reason({{"THREEAXES_PRESTART": "1"}})}}
""").format(root=str(ROOT))

FAKE_KERNEL = textwrap.dedent("""
    # kernel-like: IPython's shell exists and has a kernel, as in ipykernel
    from IPython.core.interactiveshell import InteractiveShell
    InteractiveShell.instance().kernel = object()
""")


def _run_child(body, setting, kernel_like=False, timeout=180):
    """Run `body` in a fresh Python with THREEAXES_PRESTART=`setting` (unset if None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", prestart.ENV_VAR)}
    if setting is not None:
        env[prestart.ENV_VAR] = setting
    code = CHILD_HELPERS + (FAKE_KERNEL if kernel_like else "") + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- the decision, in this process ------------------------------------------------------


def test_outside_a_kernel_it_waits_for_the_first_launch():
    assert prestart.skip_reason({}) == "not in a Jupyter kernel (THREEAXES_PRESTART=1 starts it anyway)"
    assert prestart.skip_reason({"THREEAXES_PRESTART": "auto"}).startswith("not in a Jupyter kernel")


def test_forced_on_it_starts_in_a_plain_process():
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1"}) is None


@pytest.mark.parametrize("value", ["0", "off", "false", " No "])
def test_opting_out_wins_even_in_a_kernel(monkeypatch, value):
    _pretend_kernel(monkeypatch)
    assert prestart.skip_reason({}) is None  # the kernel alone would start it
    assert prestart.skip_reason({"THREEAXES_PRESTART": value}).startswith("opted out")


def test_in_a_kernel_like_condition_it_starts(monkeypatch):
    _pretend_kernel(monkeypatch)
    assert prestart.skip_reason({}) is None


def test_a_terminal_ipython_is_not_a_kernel(monkeypatch):
    _pretend_kernel(monkeypatch, kernel=None)
    assert prestart.skip_reason({}).startswith("not in a Jupyter kernel")


def test_under_torchrun_nothing_is_started():
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1", "RANK": "0", "WORLD_SIZE": "2"}) == (
        "under torchrun: launch spawns no processes")


def test_an_unknown_setting_warns_with_the_valid_ones_and_means_auto():
    with pytest.warns(UserWarning, match=r"use 0 \(never\), 1 \(always\) or auto"):
        reason = prestart.skip_reason({"THREEAXES_PRESTART": "sometimes"})
    assert reason.startswith("not in a Jupyter kernel")


def test_without_a_forkserver_nothing_is_started(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1"}) == "this platform has no forkserver"
    assert prestart.forkserver_context().get_start_method() == "spawn"


_A_KERNEL = object()


def _pretend_kernel(monkeypatch, kernel=_A_KERNEL):
    class Shell:
        pass

    shell = Shell()
    shell.kernel = kernel
    fake = type(sys)("IPython")
    fake.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", fake)


# ---- fresh processes ----------------------------------------------------------------------


@pytest.mark.slow  # a fresh Python and torch import
def test_kernel_like_import_starts_one_server_and_the_first_launch_uses_it():
    run = _run_child("""
        import multiprocessing.forkserver as fs
        import threeaxes
        from threeaxes.launch import prestart
        assert prestart.wait(30)
        server_before = fs._forkserver._forkserver_pid      # running before launch is called
        from threeaxes.launch import launch
        ranks = launch(ppid_of_rank, 2)
        print(json.dumps({"decision": prestart.decision, "error": repr(prestart.error),
                          "server_before": server_before, "server_after": fs._forkserver._forkserver_pid,
                          "servers": forkservers_under(os.getpid()), "ranks": ranks}))
    """, setting=None, kernel_like=True)
    assert run["decision"] == "started" and run["error"] == "None"
    assert run["server_before"] is not None
    assert run["server_after"] == run["server_before"]
    assert run["servers"] == [run["server_before"]]  # one server, and it started no server of its own
    assert [r["ppid"] for r in run["ranks"]] == [run["server_before"]] * 2  # forked from it
    for rank in run["ranks"]:
        # The forkserver imported threeaxes (PRELOAD) and declined (it is no kernel);
        # ranks fork with that module, and would decline on their own even when forced.
        assert rank["decision"].startswith("not in a Jupyter kernel")
        assert rank["reason_if_forced"] == "inside a multiprocessing child (a rank)"


@pytest.mark.slow
def test_opted_out_kernel_starts_nothing_until_launch():
    run = _run_child("""
        import multiprocessing.forkserver as fs
        import threeaxes
        from threeaxes.launch import prestart
        time.sleep(0.5)
        before = {"decision": prestart.decision, "thread": prestart._thread is None,
                  "server": fs._forkserver._forkserver_pid, "servers": forkservers_under(os.getpid())}
        from threeaxes.launch import launch
        ranks = launch(ppid_of_rank, 2)
        print(json.dumps({**before, "servers_after": forkservers_under(os.getpid()), "ranks": ranks}))
    """, setting="0", kernel_like=True)
    assert run["decision"] == "opted out (THREEAXES_PRESTART=0)"
    assert run["thread"] and run["server"] is None and run["servers"] == []
    assert len(run["servers_after"]) == 1  # launch starts it, as before
    assert {r["ppid"] for r in run["ranks"]} == set(run["servers_after"])


@pytest.mark.slow
def test_a_launch_racing_the_prestart_shares_its_server():
    # Forced on (THREEAXES_PRESTART=1), which the forkserver inherits: only its own
    # guard keeps it from starting a server of its own while it imports threeaxes.
    # Hold the forkserver's lock until both the prestart thread and a launch are waiting
    # for it, then let them race: whichever wins starts the server, the other must use it.
    run = _run_child("""
        import threading
        import multiprocessing.forkserver as fs
        import torch, cloudpickle  # so the launch below reaches the lock quickly
        fs._forkserver._lock.acquire()
        import threeaxes
        from threeaxes.launch import launch, prestart
        result = {}
        racer = threading.Thread(target=lambda: result.update(ranks=launch(ppid_of_rank, 2)))
        racer.start()
        time.sleep(1.0)
        prestart_waiting = prestart._thread.is_alive()
        fs._forkserver._lock.release()
        racer.join(120)
        assert prestart.wait(30)
        print(json.dumps({"prestart_waiting": prestart_waiting, "racer_done": not racer.is_alive(),
                          "error": repr(prestart.error), "server": fs._forkserver._forkserver_pid,
                          "servers": forkservers_under(os.getpid()), **result}))
    """, setting="1")
    assert run["prestart_waiting"] and run["racer_done"] and run["error"] == "None"
    assert run["servers"] == [run["server"]]
    assert [r["ppid"] for r in run["ranks"]] == [run["server"]] * 2
    assert [r["decision"] for r in run["ranks"]] == ["inside the forkserver"] * 2


@pytest.mark.slow
def test_a_plain_python_starts_nothing_by_default():
    run = _run_child("""
        import threeaxes
        from threeaxes.launch import prestart
        time.sleep(0.5)
        print(json.dumps({"decision": prestart.decision, "servers": forkservers_under(os.getpid()),
                          "heavy": [m for m in ("IPython", "multiprocessing", "torch") if m in sys.modules]}))
    """, setting=None, timeout=60)
    assert run["decision"].startswith("not in a Jupyter kernel")
    assert run["servers"] == []
    assert run["heavy"] == []  # importing threeaxes stays light where it does nothing


@pytest.mark.slow  # a real Jupyter kernel
def test_in_a_real_kernel_the_server_runs_before_the_first_launch(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.delenv(prestart.ENV_VAR, raising=False)
    cells = [
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import threeaxes\nfrom threeaxes.launch import prestart",
        "import os, json, multiprocessing.forkserver as fs\n"
        "assert prestart.wait(30)\n"
        "server = fs._forkserver._forkserver_pid\n"
        "from threeaxes.launch import launch\n"
        "ppids = launch(lambda rank, world_size: os.getppid(), 2)\n"
        "print(json.dumps({'decision': prestart.decision, 'server': server, 'ppids': ppids}))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("name") == "stdout")
    run = json.loads(text.strip().splitlines()[-1])
    assert run["decision"] == "started"
    assert run["server"] is not None and run["ppids"] == [run["server"]] * 2


# ---- which launches may go before the server has imported everything ---------------------


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
    run = _run_child("""
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
