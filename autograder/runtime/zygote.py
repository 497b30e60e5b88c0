"""The grader's sandboxed processes forked from a Python that has already imported torch,
instead of started afresh: each drop a grading worker opens then skips, in its kernel host,
the 2 s of `import torch` and, where the drop launches ranks, the 2 s of what its ranks import
besides (threeaxes.launch.prestart's DEFERRED), and, in its oracle's worker source, torch again.
One zygote per grading process, started on first use (CONTRIBUTING.md, "How a submission's
cells run").

    proc = zygote.fork("host", env, [stdin, stdout, stderr])   # pid, poll(), wait(timeout); or None

What a process inherits from the zygote is what a fresh Python would import anyway, from the
same files: the zygote imports no module of the course (threeaxes, whose kernels get the
withheld copy) and never reads a course, a submission or a grade. Each process is forked
before it reads its settings and confines itself (kernel_host.py, oracle_worker.py) exactly as
a started one does; `die_with_parent` there ties it to the zygote, which ends when its
grader's end of the request socket closes, however the grader ends.

    python -m autograder.runtime.zygote FD   # FD: the grader's socket; one request per process:
                                             # {"role", "env", "argv", "cwd"} with its stdin, stdout,
                                             # stderr and the descriptors it is passed, answered
                                             # {"pid": N} with the process's pidfd
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from autograder.course import ROOT

# What a host's kernels and their ranks import that is not the course's: threeaxes.launch.prestart's
# PRELOAD and DEFERRED less threeaxes' own modules (tests/autograder/test_zygote.py keeps them in
# step), then the host's own code (kernel_host imports IPython's shell before it isolates itself).
IMPORTS = ["torch", "torch.distributed", "cloudpickle", "sympy", "torch.fx.experimental.symbolic_shapes",
           "torch.distributed.tensor", "torch._dynamo", "torch.distributed.tensor.parallel",
           "torch.distributed.pipelining", "autograder.runtime.kernel_host"]
# what torch reads as it is imported: a zygote serves only processes that agree with it in these
IMPORT_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_CPP_LOG_LEVEL")
# what the zygote forks, and the function each runs: a drop's kernel host, an opening's oracle
# worker source (autograder/runtime/oracle_worker.py; it imports threeaxes itself, after the fork)
ROLES = {"host": ("autograder.runtime.kernel_host", "main"),
         "oracle source": ("autograder.runtime.oracle_worker", "_source_main")}
OFF = "THREEAXES_GRADE_ZYGOTE"   # =0: every process started afresh (as before zygotes; to compare)
MAX_REQUEST = 1 << 20
MAX_FDS = 4


# --- the zygote's side -------------------------------------------------------------------------

def main() -> None:
    """Import IMPORTS, then fork a process for each request until the grader's socket closes."""
    channel = socket.socket(fileno=int(sys.argv[1]))
    for name in IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a process that needs it meets the error itself, as before
            continue
    # its children are reaped by the system (their pidfd still says when one ends): no zombie
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_REQUEST, MAX_FDS)
        except OSError:
            return
        if not data:        # the grader is gone: so is every process it started (their parent death signal)
            return
        try:
            request = json.loads(data)
            run = ROLES[request["role"]]
            if len(fds) < 3:
                raise ValueError("stdin, stdout and stderr first")
        except (ValueError, KeyError, TypeError):
            for fd in fds:
                os.close(fd)
            socket.send_fds(channel, [b"{}"], [])
            continue
        pid = os.fork()
        if pid == 0:
            _become(run, channel, fds, request)
        pidfd = os.pidfd_open(pid)
        for fd in fds:
            os.close(fd)
        socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)


def _become(run: tuple[str, str], channel: socket.socket, fds: list[int], request: dict) -> None:
    """In the forked child: what `subprocess.Popen(start_new_session=True, env=..., cwd=...,
    pass_fds=...)` would have made of a fresh process, then the role's own function, its
    argv the numbers of the descriptors passed on, then the request's."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # it waits for what it starts
        channel.close()
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request.get("cwd") or ROOT)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv[1:] = [str(fd) for fd in fds[3:]] + [str(a) for a in request.get("argv", [])]
        module, function = run
        getattr(importlib.import_module(module), function)()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on its stderr (the grader's log), as a started process would
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# --- the grader's side -------------------------------------------------------------------------

class Forked:
    """A process the zygote forked: what its callers use of a subprocess.Popen (pid, stdin,
    stdout, poll, wait). The zygote reaps it: poll() and wait() say only that it ended, from
    its pidfd, not how (0)."""

    def __init__(self, pid: int, pidfd: int, stdin: IO[str] | None = None, stdout: IO[str] | None = None):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self._pidfd: int | None = pidfd

    def poll(self) -> int | None:
        try:
            self.wait(0)
        except subprocess.TimeoutExpired:
            return None
        return 0

    def wait(self, timeout: float | None = None) -> int:
        if self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0)
            os.close(self._pidfd)
            self._pidfd = None
        return 0


class Zygote:
    def __init__(self, env: Mapping[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._channel, self._lock, self.owner = ours, threading.Lock(), os.getpid()
        # stdout to nowhere: the zygote says nothing, and what it printed would reach each child's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.runtime.zygote", str(theirs.fileno())], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, cwd=ROOT, env=dict(env), start_new_session=True, pass_fds=(theirs.fileno(),))
        theirs.close()

    @property
    def usable(self) -> bool:
        """Running, and this process's own (a process forked from its grader starts its own)."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def fork(self, request: Mapping[str, object], fds: list[int]) -> tuple[int, int]:
        """(pid, pidfd) of a process forked for `request`; raises OSError if the zygote cannot."""
        with self._lock:
            socket.send_fds(self._channel, [json.dumps(request).encode()], fds)
            data, got, _, _ = socket.recv_fds(self._channel, MAX_REQUEST, 1)
        if not data or len(got) != 1:
            for fd in got:
                os.close(fd)
            raise OSError("the grading zygote did not fork it")
        return json.loads(data)["pid"], got[0]

    def close(self) -> None:
        """End the zygote (what it forked ends with it): its socket closed, it returns."""
        self._channel.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygotes: dict[tuple[str | None, ...], Zygote] = {}
_zygotes_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    for made in _zygotes.values():
        if made.owner == os.getpid():
            made.close()


def fork(role: str, env: Mapping[str, str], fds: list[int], argv: list[str] | None = None,
         cwd: str | None = None) -> Forked | None:
    """`role` (ROLES) forked by this process's zygote: `env` its environment, fds[:3] its stdin,
    stdout and stderr, fds[3:] passed on (their numbers first in its argv, then `argv`). None
    where no zygote can fork it: the caller starts it afresh."""
    if os.environ.get(OFF, "1") == "0" or not hasattr(os, "pidfd_open"):
        return None
    key = tuple(env.get(name) for name in IMPORT_VARS)
    base = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin", "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1", "PYTHONPATH": str(ROOT)}
    try:
        with _zygotes_lock:
            zygote = _zygotes.get(key)
            if zygote is None or not zygote.usable:
                if zygote is not None and zygote.owner == os.getpid():
                    zygote.close()     # it died: its socket goes with it
                zygote = _zygotes[key] = Zygote({**base, **{k: env[k] for k in IMPORT_VARS if k in env}})
        pid, pidfd = zygote.fork({"role": role, "env": dict(env), "argv": argv or [], "cwd": cwd}, fds)
    except OSError:
        return None
    return Forked(pid, pidfd)


if __name__ == "__main__":
    main()
