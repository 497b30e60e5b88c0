"""Kernel hosts forked from a Python that has already imported torch, instead of started
afresh: each drop a grading worker opens then skips the 2 s of `import torch` and, where the
drop launches ranks, the 2 s of what its ranks import besides (threeaxes.launch.prestart's
DEFERRED). One zygote per grading process, started on its first host (CONTRIBUTING.md,
"How a submission's cells run").

    proc = zygote.start_host(env, stderr)    # in the grader: a kernel host, as subprocess.Popen starts one
    proc.stdin, proc.stdout, proc.pid, proc.wait(timeout)

What a host inherits from the zygote is what a fresh Python with the host's environment would
import anyway, from the same files: the zygote imports no module of the course (threeaxes, whose
kernels get the withheld copy) and never reads a course, a submission or a grade. Each host is
forked before it reads its settings and isolates itself (autograder/runtime/kernel_host.py)
exactly as a started one does; `die_with_parent` there ties it to the zygote, which ends when
its grader's end of the request socket closes, however the grader ends.

    python -m autograder.runtime.zygote FD   # FD: the grader's socket; one request per host:
                                             # {"env": {...}} with 3 descriptors (stdin, stdout,
                                             # stderr), answered {"pid": N} with the host's pidfd
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
from typing import IO

from autograder.course import ROOT

# What a host's kernels and their ranks import that is not the course's: threeaxes.launch.prestart's
# PRELOAD and DEFERRED less threeaxes' own modules (tests/autograder/test_zygote.py keeps them in
# step), then the host's own code (kernel_host imports IPython's shell before it isolates itself).
IMPORTS = ["torch", "torch.distributed", "cloudpickle", "sympy", "torch.fx.experimental.symbolic_shapes",
           "torch.distributed.tensor", "torch._dynamo", "torch.distributed.tensor.parallel",
           "torch.distributed.pipelining", "autograder.runtime.kernel_host"]
# the host's folders: read only once it runs, so one zygote serves hosts that differ in them
PER_HOST = ("HOME", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR")
OFF = "THREEAXES_GRADE_ZYGOTE"   # =0: every host started afresh (as before zygotes; to compare)
MAX_REQUEST = 1 << 20


# --- the zygote's side -------------------------------------------------------------------------

def main() -> None:
    """Import IMPORTS, then fork a kernel host for each request until the grader's socket closes."""
    channel = socket.socket(fileno=int(sys.argv[1]))
    for name in IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a host that needs it meets the error itself, as before
            continue
    # hosts are reaped by the system (their pidfd still says when one ends): no zombie, no waiting
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_REQUEST, 3)
        except OSError:
            return
        if not data:        # the grader is gone: so is every host it started (their parent death signal)
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            _become_host(channel, fds, json.loads(data)["env"])
        pidfd = os.pidfd_open(pid)
        for fd in fds:
            os.close(fd)
        socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)


def _become_host(channel: socket.socket, fds: list[int], env: Mapping[str, str]) -> None:
    """In the forked child: what `subprocess.Popen(start_new_session=True, env=env)` would have
    made of a fresh process, then the kernel host's own main."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # the host waits for what it starts
        channel.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        from autograder.runtime import kernel_host

        kernel_host.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on the host's stderr (the grader's log), as a started host would
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# --- the grader's side -------------------------------------------------------------------------

class ForkedHost:
    """A kernel host forked by the zygote: what KernelHost and sandbox.kill_tree use of a
    subprocess.Popen (pid, stdin, stdout, wait). The zygote reaps it: wait() says only that
    it ended, from its pidfd, not how."""

    def __init__(self, pid: int, pidfd: int, stdin: IO[str], stdout: IO[str]):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self._pidfd: int | None = pidfd

    def wait(self, timeout: float | None = None) -> None:
        if self._pidfd is None:
            return
        if not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("kernel host", timeout or 0)
        os.close(self._pidfd)
        self._pidfd = None


class Zygote:
    def __init__(self, env: Mapping[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._channel, self._lock, self.owner = ours, threading.Lock(), os.getpid()
        # stdout to nowhere: the zygote says nothing, and what it printed would reach each host's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.runtime.zygote", str(theirs.fileno())], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, cwd=ROOT, env=dict(env), start_new_session=True, pass_fds=(theirs.fileno(),))
        theirs.close()

    @property
    def usable(self) -> bool:
        """Running, and this process's own (a process forked from its grader starts its own)."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def fork(self, env: Mapping[str, str], stderr: int) -> ForkedHost:
        """A new kernel host; raises OSError if the zygote cannot make one."""
        host_in_r, host_in_w = os.pipe()
        host_out_r, host_out_w = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._channel, [json.dumps({"env": dict(env)}).encode()],
                                [host_in_r, host_out_w, stderr])
                data, fds, _, _ = socket.recv_fds(self._channel, MAX_REQUEST, 1)
            if not data or len(fds) != 1:
                raise OSError("the grading zygote ended")
        except OSError:
            os.close(host_in_w)
            os.close(host_out_r)
            raise
        finally:
            os.close(host_in_r)
            os.close(host_out_w)
        return ForkedHost(json.loads(data)["pid"], fds[0], open(host_in_w, "w"), open(host_out_r))

    def close(self) -> None:
        """End the zygote (its hosts end with it): its socket closed, it returns."""
        self._channel.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygotes: dict[frozenset[tuple[str, str]], Zygote] = {}
_zygotes_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    for made in _zygotes.values():
        if made.owner == os.getpid():
            made.close()


def start_host(env: Mapping[str, str], stderr: IO[bytes]) -> ForkedHost | subprocess.Popen[str]:
    """A kernel host with `env`, its stderr `stderr`: forked by this process's zygote for hosts
    of that environment (started on first use), or, where none can fork one, started afresh."""
    if os.environ.get(OFF, "1") != "0" and hasattr(os, "pidfd_open"):
        key = frozenset((k, v) for k, v in env.items() if k not in PER_HOST)
        try:
            with _zygotes_lock:
                zygote = _zygotes.get(key)
                if zygote is None or not zygote.usable:
                    if zygote is not None and zygote.owner == os.getpid():
                        zygote.close()     # it died: its socket goes with it
                    zygote = _zygotes[key] = Zygote(env)
            return zygote.fork(env, stderr.fileno())
        except OSError:
            pass
    return subprocess.Popen([sys.executable, "-m", "autograder.runtime.kernel_host"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            cwd=ROOT, env=dict(env), start_new_session=True)


if __name__ == "__main__":
    main()
