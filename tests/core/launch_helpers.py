"""Shared by the tests of threeaxes.launch: which processes are still alive, the pid files
ranks write, and a fresh Python (with helpers of its own) to run a child program in.

Pickled by value, as the test modules' rank functions are: the ranks never import it."""
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle

from threeaxes.launch import prestart

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]


# ---- which processes are still alive ----------------------------------------------------


def alive(pid):
    """True while `pid` runs; a zombie (exited, not yet reaped by init) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def assert_gone(pids, within=0.0):
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], f"worker processes still running: {pids}"


def assert_no_rank_processes():
    left = [p for p in multiprocessing.active_children() if p.name.startswith("threeaxes-rank-")]
    assert not left, left


def pids_in(directory, n, within=30.0):
    deadline = time.monotonic() + within
    while True:
        files = list(Path(directory).glob("pid?"))
        if len(files) == n:
            return sorted(int(f.read_text()) for f in files)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"ranks did not write {n} pid files into {directory}")


def write_pid(directory, rank):
    path = Path(directory) / f"pid{rank}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)


# ---- a child program in a fresh Python, with a THREEAXES_PRESTART setting --------------

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


def run_child(body, setting, kernel_like=False, timeout=180):
    """Run `body` in a fresh Python with THREEAXES_PRESTART=`setting` (unset if None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", prestart.ENV_VAR)}
    if setting is not None:
        env[prestart.ENV_VAR] = setting
    code = CHILD_HELPERS + (FAKE_KERNEL if kernel_like else "") + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
