"""threeaxes.launch: N ranks from one call, with output, errors, timeouts and cleanup.

Rank functions here are pickled by value (as notebook functions are), so the
workers never import this test module.
"""

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from threeaxes.launch import MAX_WORLD_SIZE, LaunchTimeout, RankError, launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]


# ---- helpers: which processes are still alive ----------------------------------------


def _alive(pid):
    """True while `pid` runs; a zombie (exited, not yet reaped by init) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _assert_gone(pids, within=0.0):
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)], f"worker processes still running: {pids}"


def _assert_no_rank_processes():
    left = [p for p in multiprocessing.active_children() if p.name.startswith("threeaxes-rank-")]
    assert not left, left


def _pids_in(directory, n, within=30.0):
    deadline = time.monotonic() + within
    while True:
        files = list(Path(directory).glob("pid?"))
        if len(files) == n:
            return sorted(int(f.read_text()) for f in files)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"ranks did not write {n} pid files into {directory}")


def _write_pid(directory, rank):
    path = Path(directory) / f"pid{rank}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)


# ---- rank functions --------------------------------------------------------------------


def sum_of_ranks(rank, world_size, scale, offset=0):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)  # communication: sum over ranks
    return {"rank": rank, "world_size": world_size, "value": t.item() * scale + offset,
            "backend": dist.get_backend(), "pid": os.getpid()}


def fail_fast_on_rank_1(rank, world_size, directory):
    print(f"rank {rank} is up")
    _write_pid(directory, rank)
    if rank == 1:
        _pids_in(directory, world_size)  # every rank is up and running: now fail
        (Path(directory) / "raised_at").write_text(repr(time.time()))
        raise ValueError("rank 1 fails on purpose")
    time.sleep(30)


def rank_0_skips_all_reduce(rank, world_size, directory):
    _write_pid(directory, rank)
    t = torch.ones(1)
    if rank != 0:
        dist.all_reduce(t)  # communication: rank 0 never joins, so this waits forever
    return rank


# ---- the contract ------------------------------------------------------------------------


def test_results_come_back_in_rank_order():
    results = launch(sum_of_ranks, 3, 10.0, offset=1)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["value"] for r in results] == [(0 + 1 + 2) * 10.0 + 1] * 3
    assert {r["world_size"] for r in results} == {3}
    assert {r["backend"] for r in results} == {"nccl" if torch.cuda.device_count() >= 3 else "gloo"}
    assert len({r["pid"] for r in results}) == 3 and os.getpid() not in {r["pid"] for r in results}
    _assert_gone([r["pid"] for r in results])
    _assert_no_rank_processes()


def test_lambdas_and_closures_travel_by_value():
    base = torch.arange(3.0)

    def add_base(rank, world_size):
        return base + rank

    assert [t.tolist() for t in launch(add_base, 2)] == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    assert launch(lambda rank, world_size: rank * world_size, 4) == [0, 4, 8, 12]


def test_one_rank_is_a_valid_group():
    assert launch(lambda rank, world_size: (dist.get_rank(), dist.get_world_size()), 1) == [(0, 1)]


def test_ranks_see_the_callers_environment_as_it_is_now(monkeypatch):
    launch(lambda rank, world_size: None, 1)  # the forkserver is running from here on
    monkeypatch.setenv("THREEAXES_LAUNCH_TEST", "set after the forkserver started")
    seen = launch(lambda rank, world_size: (os.environ.get("THREEAXES_LAUNCH_TEST"),
                                            os.environ["RANK"], os.environ["WORLD_SIZE"]), 2)
    assert seen == [("set after the forkserver started", "0", "2"),
                    ("set after the forkserver started", "1", "2")]
    assert "RANK" not in os.environ  # the caller's own environment is untouched


@pytest.mark.parametrize(
    "kwargs, fix",
    [
        ({"world_size": 0}, "from 1 to 64"),
        ({"world_size": MAX_WORLD_SIZE + 1}, "from 1 to 64"),
        ({"world_size": 2.0}, "whole number"),
        ({"world_size": True}, "whole number"),
        ({"world_size": 2, "timeout": 0}, "positive"),
        ({"world_size": 2, "timeout": -1.0}, "positive"),
        ({"world_size": 2, "timeout": float("nan")}, "positive"),
        ({"world_size": 2, "backend": "mpi"}, "'gloo' (CPU), 'nccl'"),
    ],
)
def test_bad_arguments_say_what_to_change(kwargs, fix):
    with pytest.raises(ValueError, match=re.escape(fix)):
        launch(sum_of_ranks, **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match=r"fn must be a function fn\(rank, world_size, ...\)"):
        launch("not a function", 2)


def test_nccl_without_a_gpu_per_rank_names_the_gpu_count():
    gpus = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"has {gpus} GPU\(s\); use backend='gloo'"):
        launch(sum_of_ranks, gpus + 1, 1.0, backend="nccl")


def test_unpicklable_arguments_fail_before_any_rank_starts():
    with pytest.raises(TypeError, match="could not pickle fn or its arguments"):
        launch(sum_of_ranks, 2, threading.Lock())
    _assert_no_rank_processes()


def test_unpicklable_result_is_a_rank_error_that_says_why():
    with pytest.raises(RankError, match=r"rank \d of 2 raised(.|\n)*cannot be pickled"):
        launch(lambda rank, world_size: threading.Lock(), 2)
    _assert_no_rank_processes()


def test_tensors_come_back_on_cpu_even_from_an_autograd_graph():
    def loss(rank, world_size):
        w = torch.ones(2, requires_grad=True)
        return (w * (rank + 1)).sum(), w

    (loss0, w0), (loss1, _) = launch(loss, 2)
    assert (loss0.item(), loss1.item()) == (2.0, 4.0)
    assert loss0.device.type == "cpu" and not loss0.requires_grad  # detached: graphs stay behind
    assert w0.requires_grad  # a leaf keeps its flag


def test_output_is_prefixed_with_its_rank(capsys):
    def chatty(rank, world_size):
        print(f"hello from {rank}\nsecond line {rank}")
        sys.stderr.write(f"warning from {rank}\n")
        print("no newline at the end", end="")
        return rank

    assert launch(chatty, 2) == [0, 1]
    out, err = capsys.readouterr()
    for rank in (0, 1):
        assert f"[rank {rank}] hello from {rank}\n" in out
        assert f"[rank {rank}] second line {rank}\n" in out
        assert f"[rank {rank}] no newline at the end\n" in out
        assert f"[rank {rank}] warning from {rank}\n" in err
        assert f"warning from {rank}" not in out


class _Recorder:
    """A stand-in for sys.stdout that, on seeing `trigger`, creates `flag`."""

    def __init__(self, trigger, flag):
        self.trigger, self.flag, self.text = trigger, flag, ""

    def write(self, text):
        self.text += text
        if self.trigger in text:
            self.flag.write_text("seen")
        return len(text)

    def flush(self):
        pass


def test_output_arrives_while_the_rank_is_still_running(tmp_path, monkeypatch):
    # Rank 0 can only finish once the caller has printed its first line: if output
    # were held back until the end, it would wait forever and the launch would time out.
    flag = tmp_path / "seen"

    def waits_for_its_own_output(rank, world_size):
        print("early")
        deadline = time.monotonic() + 20
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("late")
        return flag.exists()

    recorder = _Recorder("[rank 0] early", flag)
    monkeypatch.setattr(sys, "stdout", recorder)
    assert launch(waits_for_its_own_output, 1, timeout=30) == [True]
    assert recorder.text == "[rank 0] early\n[rank 0] late\n"


def test_exception_raises_here_within_2_seconds_and_stops_the_others(tmp_path, capsys):
    with pytest.raises(RankError) as info:
        launch(fail_fast_on_rank_1, 3, tmp_path, timeout=60)
    raised_here = time.time()
    raised_on_rank = float((tmp_path / "raised_at").read_text())
    assert raised_here - raised_on_rank < 2.0
    message = str(info.value)
    assert info.value.ranks == [1] and isinstance(info.value, RuntimeError)
    assert "rank 1 of 3 raised" in message
    assert 'raise ValueError("rank 1 fails on purpose")' in message  # the rank's traceback
    assert "in fail_fast_on_rank_1" in message
    out = capsys.readouterr().out  # what the ranks printed before the error is not lost
    assert all(f"[rank {r}] rank {r} is up\n" in out for r in range(3))
    _assert_gone(_pids_in(tmp_path, 3, within=0))  # ranks 0 and 2 were sleeping for 30 s
    _assert_no_rank_processes()


def test_a_rank_that_dies_is_named_with_its_exit_code():
    def dies(rank, world_size):
        if rank == 1:
            os._exit(3)
        time.sleep(30)

    with pytest.raises(RankError, match="rank 1 of 2 exited with code 3 before returning a result"):
        launch(dies, 2)
    _assert_no_rank_processes()


def test_a_skipped_collective_times_out_naming_the_stuck_ranks(tmp_path):
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(rank_0_skips_all_reduce, 2, tmp_path, timeout=2)
    assert time.monotonic() - start >= 2.0   # it waited out the timeout before giving up
    message = str(info.value)
    assert info.value.ranks == [1] and isinstance(info.value, RankError)
    assert "rank(s) [1] of 2 were still running after timeout=2 s" in message
    assert "rank(s) [0] had finished" in message
    assert "skipped or added" in message and "timeout=" in message  # the likely fixes
    assert "rank 1 was here:" in message and "dist.all_reduce(t)" in message  # where it waits
    _assert_gone(_pids_in(tmp_path, 2, within=0))
    _assert_no_rank_processes()


def test_tracebacks_show_source_only_the_caller_knows():
    # Notebook cells live only in the kernel's linecache; the ranks cannot show their source.
    filename = "<cell-only-in-this-process>"
    source = "def from_a_cell(rank, world_size):\n    raise KeyError('from a cell')\n"
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        with pytest.raises(RankError) as info:
            launch(namespace["from_a_cell"], 1)
    finally:
        del linecache.cache[filename]
    assert f'File "{filename}", line 2, in from_a_cell\n    raise KeyError(\'from a cell\')' in str(info.value)


def test_concurrent_launches_never_collide():
    results, errors = {}, []

    def run(i):
        try:
            results[i] = launch(sum_of_ranks, 2, float(i))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert {i: [r["value"] for r in results[i]] for i in range(4)} == {i: [1.0 * i] * 2 for i in range(4)}
    _assert_no_rank_processes()


def test_destroy_process_group_runs_on_every_rank(tmp_path):
    def records_destroy(rank, world_size):
        original = dist.destroy_process_group

        def destroy(*args, **kwargs):
            (tmp_path / f"destroyed{rank}").write_text("yes")
            return original(*args, **kwargs)

        dist.destroy_process_group = destroy  # the worker looks it up after fn returns
        return rank

    assert launch(records_destroy, 2) == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["destroyed0", "destroyed1"]


# ---- the caller going away: run in a separate Python, to keep signals out of pytest ------


# _INTERRUPTIBLE: pytest-xdist workers ignore SIGINT, and an ignored signal stays ignored
# in every child they start, so the scripts that test interrupts put Python's
# KeyboardInterrupt handler back first, as a Jupyter kernel has it.
def _python(script, *args, **popen):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                            env=env, cwd=ROOT, **popen)


_SLEEPER = """
    import os, sys, time
    from pathlib import Path
    from threeaxes.launch import launch

    def sleeper(rank, world_size, directory):
        path = Path(directory) / f"pid{rank}"
        path.with_suffix(".tmp").write_text(str(os.getpid()))
        path.with_suffix(".tmp").rename(path)
        time.sleep(60)
"""


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_keyboard_interrupt_stops_the_ranks_and_propagates(tmp_path):
    script = _SLEEPER + """
    import faulthandler, json, multiprocessing, signal
    faulthandler.register(signal.SIGUSR1)  # the test asks for a stack dump if this hangs
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a kernel: see _INTERRUPTIBLE

    start = time.monotonic()
    try:
        launch(sleeper, 2, sys.argv[1])
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    report = {"outcome": outcome, "seconds": time.monotonic() - start,
              "children": [p.name for p in multiprocessing.active_children()]}
    report["next_launch"] = launch(lambda rank, world_size: rank, 2)  # the forkserver survived
    print(json.dumps(report), flush=True)
    """
    # Output goes to files, not pipes: the forkserver inherits them, and a pipe would
    # keep the test waiting for its exit rather than the script's.
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = _python(script, tmp_path, start_new_session=True,  # its own process group, like a kernel
                       stdout=out, stderr=err)
    try:
        pids = _pids_in(tmp_path, 2, within=60)
        # "Interrupt kernel": Jupyter sends SIGINT to the kernel's whole process group,
        # so the ranks and the forkserver get it too.
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError("the interrupted script hung; its stack:\n" + err_path.read_text()) from None
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err_path.read_text()
    report = json.loads(out_path.read_text().strip().splitlines()[-1])
    assert report["outcome"] == "KeyboardInterrupt"
    assert report["seconds"] < 55  # not by waiting out the ranks' 60 s sleep
    assert report["children"] == []
    assert report["next_launch"] == [0, 1]
    _assert_gone(pids)


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_an_interrupt_caught_by_another_thread_still_stops_the_launch_at_once(tmp_path):
    # The kernel may take SIGINT on any thread (torch's store threads included); then
    # only the main thread's next return to Python raises KeyboardInterrupt.
    script = _SLEEPER + """
    import signal, threading
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a kernel: see _INTERRUPTIBLE

    def interrupt_from_another_thread():
        while len(list(Path(sys.argv[1]).glob("pid?"))) < 2:
            time.sleep(0.05)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # this thread, not the main one

    threading.Thread(target=interrupt_from_another_thread, daemon=True).start()
    start = time.monotonic()
    try:
        launch(sleeper, 2, sys.argv[1], timeout=120)
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
    """
    proc = _python(script, tmp_path)
    out, err = proc.communicate(timeout=150)
    assert "interrupted after" in out, err
    pids = _pids_in(tmp_path, 2)
    _assert_gone(pids, within=5)
    seconds = float(out.split("interrupted after ")[1].split()[0])
    assert seconds < 30, f"the interrupt took {seconds} s to stop launch; the ranks sleep 60 s"


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_ranks_exit_when_the_caller_dies(tmp_path):
    proc = _python(_SLEEPER + "\n    launch(sleeper, 2, sys.argv[1])\n", tmp_path)
    try:
        pids = _pids_in(tmp_path, 2, within=60)
        assert all(_alive(p) for p in pids)
    finally:
        proc.kill()  # like a kernel crash: no cleanup code runs in the caller
        proc.communicate(timeout=30)
    _assert_gone(pids, within=10)


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_under_torchrun_fn_runs_on_the_real_group(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import json, os
        import torch, torch.distributed as dist
        from threeaxes.launch import launch

        def fn(rank, world_size, scale):
            t = torch.tensor([rank + 1.0])
            dist.all_reduce(t)
            return {"rank": rank, "sum": t.item() * scale, "pid": os.getpid()}

        if __name__ == "__main__":
            results = launch(fn, 2, 10.0)
            try:
                launch(fn, 3, 1.0)
                mismatch = None
            except ValueError as exc:
                mismatch = str(exc)
            # one file per rank: the ranks' stdout lines would interleave in torchrun's pipe
            with open(f"result-{os.environ['RANK']}.json", "w") as out:
                json.dump({"rank": int(os.environ["RANK"]), "pid": os.getpid(),
                           "results": results, "mismatch": mismatch,
                           "backend": dist.get_backend()}, out)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    reports = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1]
    pids = [r["pid"] for r in reports]
    for report in reports:
        # every rank gets every rank's result, computed in the torchrun processes themselves
        assert report["results"] == [{"rank": 0, "sum": 30.0, "pid": pids[0]},
                                     {"rank": 1, "sum": 30.0, "pid": pids[1]}]
        assert "torchrun started WORLD_SIZE=2" in report["mismatch"]
        assert report["backend"] == ("nccl" if torch.cuda.device_count() >= 2 else "gloo")


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_a_notebook_cell_shows_every_ranks_output():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        f"import sys; sys.path.insert(0, {str(ROOT)!r})",
        "import sys\nfrom threeaxes.launch import launch, RankError\n"
        "def hello(rank, world_size):\n"
        "    print(f'hello from {rank}')\n"
        "    print(f'careful from {rank}', file=sys.stderr)\n"
        "    return rank * 10\n"
        "print(launch(hello, 2))",
        "def broken(rank, world_size):\n"
        "    if rank == 1:\n"
        "        raise ValueError('broken on purpose')\n"
        "    return rank\n"
        "try:\n    launch(broken, 2)\nexcept RankError as exc:\n    print('CAUGHT', exc)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()

    def stream(cell, name):
        return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == name)

    hello, broken = nb.cells[1], nb.cells[2]
    assert "[rank 0] hello from 0\n" in stream(hello, "stdout")
    assert "[rank 1] hello from 1\n" in stream(hello, "stdout")
    assert "[0, 10]" in stream(hello, "stdout")
    assert "[rank 1] careful from 1\n" in stream(hello, "stderr")
    caught = stream(broken, "stdout")
    assert "CAUGHT rank 1 of 2 raised" in caught
    assert "raise ValueError('broken on purpose')" in caught  # the cell's source, shown again


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_nccl_with_one_gpu_per_rank_returns_cpu_tensors():
    def on_gpu(rank, world_size):
        t = torch.full((2,), float(rank + 1), device="cuda")
        dist.all_reduce(t)  # communication: NCCL, one GPU per rank
        return dist.get_backend(), torch.cuda.current_device(), t

    results = launch(on_gpu, 2)
    assert [(backend, device) for backend, device, _ in results] == [("nccl", 0), ("nccl", 1)]
    for _, _, t in results:
        assert t.device.type == "cpu" and t.tolist() == [3.0, 3.0]
    # backend= overrides the automatic choice
    assert launch(lambda rank, world_size: dist.get_backend(), 2, backend="gloo") == ["gloo", "gloo"]
