"""Kernel hosts forked from the grading process's zygote (autograder/runtime/zygote.py): what a
host inherits is torch and nothing of the course's, it is a process of its own as a started one
was, and no zygote or host outlives its grader."""
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.runtime import zygote
from autograder.runtime.kernel_session import KernelHost
from autograder.runtime.oracle_worker import WorkerSource
from threeaxes.launch import prestart

ROOT = Path(__file__).resolve().parents[2]
WHAT_IT_HOLDS = """
import json, os, sys
print(json.dumps({"course": sorted(m for m in sys.modules if m.split(".")[0] in ("threeaxes", "autograder")),
                  "torch": "torch._dynamo" in sys.modules, "pid": os.getpid(), "session": os.getsid(0),
                  "prestart": os.environ.get("THREEAXES_PRESTART"), "channels": len(os.listdir("/proc/self/fd"))}))
"""


def printed(outputs):
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_the_zygote_imports_what_ranks_import_and_nothing_of_the_course():
    ahead = [m for m in prestart.PRELOAD + prestart.DEFERRED if not m.startswith("threeaxes")]
    assert zygote.IMPORTS == ahead + ["autograder.runtime.kernel_host"]


@pytest.mark.parametrize("isolate", [True, False])
def test_a_forked_host_holds_torch_and_nothing_of_the_course_in_a_session_of_its_own(isolate):
    host = KernelHost(isolate=isolate)
    try:
        assert isinstance(host._proc, zygote.Forked)
        held = json.loads(printed(host.run_cell(WHAT_IT_HOLDS, 60)))
    finally:
        host.close()
    # torch came from the zygote; the grader's own modules were left behind (kernel_host.py)
    assert (held["course"], held["torch"], held["prestart"]) == ([], True, "0"), held
    if isolate:        # the first process of a PID namespace of its own (sandbox._become_pid_one)
        assert held["pid"] == 1, held
    else:              # the leader of a session of its own, as Popen(start_new_session=True) made it
        assert held["session"] == held["pid"], held
    assert held["channels"] <= 8, held      # its pipes and logs, not the zygote's socket or other hosts'


def test_an_oracle_worker_source_is_forked_too_and_its_workers_answer():
    source = WorkerSource({"threeaxes.cost.memory"})
    try:
        assert isinstance(source.proc, zygote.Forked)
        worker = source.spawn()
        try:
            asked = {"path": "threeaxes.cost.memory:bytes_per_param", "args": {"__tuple__": ["mixed"]},
                     "kwargs": {"__dict__": []}}
            reply = worker.ask(json.dumps(asked).encode(), timeout=60)
        finally:
            worker.kill()
    finally:
        source.close()
    from threeaxes.cost.memory import bytes_per_param

    assert json.loads(reply) == {"__tuple__": list(bytes_per_param("mixed"))}   # as the wire carries a tuple


def test_a_host_is_made_when_the_zygote_has_died():
    first = KernelHost(isolate=False)
    first.close()
    for made in list(zygote._zygotes.values()):
        made.proc.kill()
        made.proc.wait()
    host = KernelHost(isolate=False)
    try:
        assert printed(host.run_cell("print(6 * 7)", 60)) == "42\n"
    finally:
        host.close()


GRADER = """
import sys, time
sys.path.insert(0, {root!r})
from autograder.runtime import zygote
from autograder.runtime.kernel_session import KernelHost
from autograder.runtime.oracle_worker import WorkerSource
host = KernelHost(isolate=False)
print(host._proc.pid, next(iter(zygote._zygotes.values())).proc.pid, flush=True)
time.sleep(600)
"""


def test_no_zygote_or_host_outlives_its_grader():
    grader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(GRADER.format(root=str(ROOT)))],
                              stdout=subprocess.PIPE, text=True)
    try:
        host, made = (int(pid) for pid in grader.stdout.readline().split())
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in (host, made)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(host) and not _alive(made)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
