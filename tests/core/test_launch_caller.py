"""threeaxes.launch when the caller goes away: an interrupt (on the main thread or another)
stops the ranks and propagates, and the ranks exit when the caller dies. Each runs in a
separate Python, to keep signals out of pytest."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from launch_helpers import ROOT, alive, assert_gone, pids_in


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
        pids = pids_in(tmp_path, 2, within=60)
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
    assert_gone(pids)


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
    pids = pids_in(tmp_path, 2)
    assert_gone(pids, within=5)
    seconds = float(out.split("interrupted after ")[1].split()[0])
    assert seconds < 30, f"the interrupt took {seconds} s to stop launch; the ranks sleep 60 s"


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_ranks_exit_when_the_caller_dies(tmp_path):
    proc = _python(_SLEEPER + "\n    launch(sleeper, 2, sys.argv[1])\n", tmp_path)
    try:
        pids = pids_in(tmp_path, 2, within=60)
        assert all(alive(p) for p in pids)
    finally:
        proc.kill()  # like a kernel crash: no cleanup code runs in the caller
        proc.communicate(timeout=30)
    assert_gone(pids, within=10)
