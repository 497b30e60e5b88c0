"""The oracle (autograder/judging/oracle.py) belongs to one kernel, runs what it answers without root, and
holds no more than its caps; the lines between grading processes are capped (issue 43, part 2
and the caps of part 1). Each test is an attack of the second red team, tried against the parts
it went through."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autograder.judging import oracle as oracle_module

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the grader's sandbox is Linux only")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="what a grader run by root gives away: run as root")


@pytest.fixture
def short_dir():
    """A folder with a short path: a Unix socket's path may not pass 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="oracle-") as folder:
        yield Path(folder)


def _request(path: str, *args) -> bytes:
    return json.dumps({"path": path, "args": {"__tuple__": list(args)}, "kwargs": {"__dict__": []}}).encode()


def _value(reply: str):
    from threeaxes.grading import wire

    return wire.Answers(None).decode(json.loads(reply))


def test_connections_past_the_cap_are_refused_before_a_thread_exists(short_dir):
    """1,500 idle connections once made 1,504 threads in the grading worker."""
    oracle = oracle_module.Oracle({"operator:add"}, short_dir)
    held = []
    try:
        before = threading.active_count()
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX)
            s.connect(oracle.socket_path)
            held.append(s)
        time.sleep(0.5)
        assert threading.active_count() - before <= oracle_module.MAX_CONNECTIONS, threading.active_count()
        assert oracle.connections() == oracle_module.MAX_CONNECTIONS
        # the one past the cap has its answer already: refused, not queued
        held[-1].settimeout(5)
        refused = json.loads(held[-1].makefile("rb").readline())
        assert refused["__raised__"][0][0] == "ConnectionRefusedError", refused
    finally:
        for s in held:
            s.close()
    for _ in range(50):          # the idle ones end as their sockets close
        if oracle.connections() == 0:
            break
        time.sleep(0.1)
    try:
        assert _value(oracle.answer(_request("operator:add", 2, 3))) == 5
    finally:
        oracle.close()
    assert not os.path.exists(oracle.socket_path)


@as_root
def test_the_worker_runs_as_nobody_in_a_root_that_holds_no_course(short_dir):
    """The oracle once ran what it answered as root, with the whole machine in view."""
    from autograder.runtime.sandbox import KERNEL_UID

    oracle = oracle_module.Oracle({"os:getuid", "os.path:exists", "os.path:getsize"}, short_dir)
    try:
        assert _value(oracle.answer(_request("os:getuid"))) == KERNEL_UID
        exists = {str(p): _value(oracle.answer(_request("os.path:exists", str(p))))
                  for p in (ROOT / "threeaxes" / "__init__.py", ROOT / "nbgrader_config.py", ROOT / "source",
                            Path.home() / ".bashrc", short_dir)}
        if os.path.getsize("/etc/shadow"):     # the machine's secrets: blanked, as for the kernels
            assert _value(oracle.answer(_request("os.path:getsize", "/etc/shadow"))) == 0
    finally:
        oracle.close()
    assert exists[str(ROOT / "threeaxes" / "__init__.py")] is True   # the package it computes with
    assert not any(v for k, v in exists.items() if "threeaxes" not in k), exists


def test_visible_load_reads_a_drops_cases_and_no_other_file(short_dir, tmp_path):
    """Withheld in drop 1 and answered by the grader, `load` once read any *.json of the machine."""
    from threeaxes.grading import visible

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"token": "do-not-show-7d1f"}))
    secret.chmod(0o600)
    escape = os.path.relpath(secret.with_suffix(""), visible.CASES)
    assert "axis_roles_answer" in visible.load("drop01")
    for name in (escape, str(secret.with_suffix("")), "drop01/../drop02", "drop1", ["drop01"]):
        with pytest.raises(ValueError, match="not a drop's name"):
            visible.load(name)
    oracle = oracle_module.Oracle({"threeaxes.grading.visible:load"}, short_dir)
    try:
        reply = oracle.answer(_request("threeaxes.grading.visible:load", escape))
    finally:
        oracle.close()
    assert "do-not-show-7d1f" not in reply and "ValueError" in reply, reply


# -- through the sandbox: a kernel host and the kernels forked from it ---------------------------
LEAVES_CALLS_QUEUED = """
import json, os, socket, threading, time
where = os.environ["THREEAXES_ORACLE"]
request = json.dumps({"path": PATH, "args": {"__tuple__": ["mixed"]}, "kwargs": {"__dict__": []}}).encode()
held = []
for _ in range(12):                 # requests half sent, left waiting
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(where); s.sendall(request[:20]); held.append(s)
    except OSError:
        pass
answered = []
def keep_asking():
    from threeaxes.grading.wire.oracle import call
    while True:
        try:
            answered.append(call(PATH, ("mixed",), {}))
        except Exception:
            time.sleep(0.01)
for _ in range(4):
    threading.Thread(target=keep_asking, daemon=True).start()
deadline = time.monotonic() + 30     # a loaded machine: wait for one answer, then leave the rest queued
while not answered and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)
print(where)
"""


@pytest.fixture(scope="module")
def opening_host():
    from autograder import withheld
    from autograder.judging.warm_start import OpeningHost

    path = withheld.definition("threeaxes.cost.bytes_per_param")
    host = OpeningHost(["import threeaxes"], isolate=True, files={}, withheld={path}, timeout=60)
    if not host.sandbox.get("namespaces"):
        host.close()
        pytest.skip(f"this machine refuses namespaces: {host.sandbox.get('refused')}")
    yield host, path
    host.close()


def _printed(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs) + "".join(
        f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error")


def test_what_one_kernel_leaves_queued_is_never_read_while_the_next_runs(opening_host):
    """An honest neighbour once fell from 6/6 to 4/6: the calls a submission left queued were
    answered while the next one ran, and charged to its cells."""
    host, path = opening_host
    from threeaxes.cost import bytes_per_param

    with host.session(60) as flooding:
        said = _printed(flooding.run_cell(f"PATH = {path!r}\n" + LEAVES_CALLS_QUEUED, 60))
        first = flooding.oracle
        assert said.startswith("/run/threeaxes-oracle/"), said
        assert first.calls.count(path) > 0           # its own calls reached its own oracle
    answered_before = len(first.calls)
    with host.session(60) as neighbour:
        mine = _printed(neighbour.run_cell(
            "import os, threeaxes.cost as c\nprint(os.environ['THREEAXES_ORACLE'], c.bytes_per_param('mixed'))", 60))
        time.sleep(1)
        where, value = mine.split(" ", 1)
        assert where != said.strip(), "the next kernel was told the same socket"
        assert value.strip() == str(bytes_per_param("mixed")), mine
        assert neighbour.oracle.calls == [path], neighbour.oracle.calls   # its one call, nothing else
    assert len(first.calls) == answered_before, "a call of the first kernel was read after it ended"
    assert sorted(os.listdir(host._scratch.name)) == [], "an oracle's socket outlived its kernel"


def _pipe_writers() -> str:
    return ("import fcntl, os, stat\n"
            "def pipe_writers():\n"
            "    for fd in range(3, 64):\n"
            "        try:\n"
            "            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & 3 == 1:\n"
            "                yield fd\n"
            "        except OSError:\n"
            "            pass\n")


def test_a_kernel_that_sends_an_endless_line_is_stopped_and_named(opening_host):
    host, _ = opening_host
    from autograder.runtime.forked_kernel import MAX_LINE_BYTES

    code = _pipe_writers() + (f"block = b'x' * (1 << 20)\n"
                              f"for fd in pipe_writers():\n"
                              f"    for _ in range({(MAX_LINE_BYTES >> 20) + 8}):\n"
                              f"        os.write(fd, block)\n")
    with host.session(60) as kernel:
        said = _printed(kernel.run_cell(code, 60))
        assert f"a reply of over {MAX_LINE_BYTES >> 20} MiB" in said and not kernel.alive, said
    with host.session(60) as kernel:      # the host goes on with the next submission
        assert _printed(kernel.run_cell("print(6 * 7)", 60)) == "42\n"


HOST_SENDS_A_GIANT_LINE = """
import json, resource, sys
from autograder.runtime.kernel_session import KernelHost, MAX_LINE_CHARS
host = KernelHost(isolate=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = WRITERS + ("block = b'x' * (1 << 20)\\nfor fd in pipe_writers():\\n"
                  "    for _ in range(%d):\\n        os.write(fd, block)\\n")
said = host.run_cell(code % ((4 * MAX_LINE_CHARS) >> 20), 120)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"said": said, "grown_kib": grown, "alive": host.alive}))
host.close()
"""


def test_a_kernel_host_that_sends_an_endless_line_is_stopped_named_and_holds_no_memory():
    """A hashlib.py beside the notebook once ran in the host and wrote a 1 GiB line to the
    grader: the worker grew from 0.4 to 2.9 GB. Here the host's own cell writes four times
    the cap, in a fresh grader process whose peak memory is measured."""
    from autograder.runtime.kernel_session import MAX_LINE_CHARS

    script = f"WRITERS = {_pipe_writers()!r}\n" + HOST_SENDS_A_GIANT_LINE
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert not got["alive"] and "line of over" in _printed(got["said"]), got["said"]
    # the line is read up to the cap, once: not the four times the cap it was
    assert got["grown_kib"] < 2.5 * (MAX_LINE_CHARS >> 10), got["grown_kib"]


def test_a_kernel_can_neither_list_fill_nor_empty_the_folder_of_oracle_sockets(opening_host):
    """Each kernel is told its own socket's name; the folder holding the sockets is the grader's."""
    host, _ = opening_host
    code = ("import os\n"
            "where = os.environ['THREEAXES_ORACLE']\n"
            "folder = os.path.dirname(where)\n"
            "for name, act in [('list', lambda: os.listdir(folder)),\n"
            "                  ('fill', lambda: open(os.path.join(folder, 'filler'), 'w').write('x')),\n"
            "                  ('remove', lambda: os.unlink(where))]:\n"
            "    try:\n"
            "        act(); print(name, 'done')\n"
            "    except OSError as exc:\n"
            "        print(name, 'refused')\n")
    with host.session(60) as kernel:
        said = _printed(kernel.run_cell(code, 60))
        assert os.path.exists(kernel.oracle.socket_path)
    # graded by root, the kernel runs as nobody and cannot list the folder; graded by an ordinary
    # user it runs as that user, who owns the folder and may list it: it then holds this kernel's
    # own socket alone (the opening's oracle ended with the opening, and a host forks one kernel
    # at a time), and the read-only bind still refuses filling and emptying it
    listed = "list refused" if os.geteuid() == 0 else "list done"
    assert said.split("\n")[:3] == [listed, "fill refused", "remove refused"], said
