"""One submission's kernel: a child the kernel host forked, talked to over two pipes
(CONTRIBUTING.md, "How a submission's cells run").

    kernel = Kernel.fork(host)     # a world of its own (sandbox.enter_kernel_world)
    reply = kernel.run({"source": "x = 1", "timeout": 90})
    kernel.stop()                  # with every process it started"""
from __future__ import annotations

import base64
import json
import os
import select
import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

from autograder.runtime import sandbox
from autograder.runtime.host_forkserver import forget_the_hosts_helpers, fork_a_forkserver
from autograder.runtime.messages import CellReply, CellRequest, HostSettings, Output

if TYPE_CHECKING:
    from autograder.runtime.cell_runner import CellRunner

TIMEOUT: Output = {"output_type": "error", "ename": "TimeoutError",
                   "evalue": "the cell ran past the grading time limit",
                   "traceback": ["TimeoutError: the cell ran past the grading time limit"]}
GRACE_S = 10   # after an interrupt, for the cell to stop before its kernel is stopped
IGNORED_S = 0.2   # instead of GRACE_S, where the kernel ignores the interrupt (Kernel._ignores)
ERRORS_KEPT = 1 << 20   # bytes of a kernel's stderr passed on to the grader's log
MAX_LINE_BYTES = 48 << 20   # one reply of a kernel: a cell's outputs (the host's own cap is above it)
OVERLONG: Output = {"output_type": "error", "ename": "KernelStopped", "traceback": [],
                    "evalue": f"the kernel sent a reply of over {MAX_LINE_BYTES >> 20} MiB: it was stopped"}


class ForkingHost(Protocol):
    """What `Kernel.fork` reads of its host (autograder.runtime.kernel_host.Host)."""
    runner: CellRunner
    replies: TextIO
    namespaces: bool
    settings: HostSettings


class Kernel:
    """One submission's kernel: a forked child, talked to over two pipes."""

    def __init__(self, pid: int | None, requests: TextIO, replies: _Lines, namespaced: bool):
        self.pid, self.requests, self.replies, self.namespaced = pid, requests, replies, namespaced
        self.kernel_pid: int | None = None   # as this process sees it (with a PID namespace, the child's child)

    @classmethod
    def fork(cls, host: ForkingHost, oracle: str | None = None) -> Kernel:
        """A child of `host` (autograder.runtime.kernel_host.Host: its shell, reply pipe and settings);
        `oracle`: the name of this kernel's own socket in the host's oracle folder (none: the
        kernel is told of no oracle)."""
        to_kernel, from_host = os.pipe()
        to_host, from_kernel = os.pipe()
        errors_in, errors_out = os.pipe()   # its stderr: its own, not the host's log of every kernel
        pid = os.fork()
        if pid == 0:   # the child: never returns
            try:
                for fd in (from_host, to_host, host.replies.fileno(), errors_in):
                    os.close(fd)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(errors_out, 2)
                os.close(errors_out)
                with open("/proc/self/oom_score_adj", "w") as f:   # out of memory: the kernel goes first
                    f.write("1000")
                sandbox.enter_kernel_world(host.namespaces, host.settings,
                                           announce=lambda p: os.write(from_kernel, b"%d\n" % p))
                if not host.namespaces:
                    os.write(from_kernel, b"%d\n" % os.getpid())
                forget_the_hosts_helpers()
                folder = host.settings.get("oracle_folder")
                if folder:
                    os.environ.pop("THREEAXES_ORACLE", None)
                    if oracle and "/" not in oracle:
                        os.environ["THREEAXES_ORACLE"] = f"{folder['here']}/{oracle}"
                if getattr(host, "warm", False):   # the drop may launch ranks: its forkserver, warm at once
                    fork_a_forkserver(keep=(0, 1, 2))
                serve_cells(host.runner, os.fdopen(to_kernel, "r"), os.fdopen(from_kernel, "w", buffering=1))
            finally:
                os._exit(0)
        for fd in (to_kernel, from_kernel, errors_out):
            os.close(fd)
        kernel = cls(pid, os.fdopen(from_host, "w", buffering=1), _Lines(to_host, errors_in), host.namespaces)
        line = kernel.replies.readline(30)
        kernel.kernel_pid = int(line) if line and line.strip().isdigit() else None
        if kernel.kernel_pid is None:
            kernel.stop()
            kernel.pid = None
        return kernel

    def run(self, request: CellRequest) -> CellReply:
        """One cell, relayed; interrupted at its timeout, the kernel stopped if that fails."""
        try:
            self.requests.write(json.dumps(request) + "\n")
        except (BrokenPipeError, OSError):
            return self._dead([])
        line = self.replies.readline(request["timeout"])
        late = line is None and self.replies.open and not self.replies.overlong
        if late:
            self._signal(signal.SIGINT)
            # a kernel that ignores the interrupt cannot be stopped by it: no grace, only a moment
            # for a reply already on its way
            line = self.replies.readline(IGNORED_S if self._ignores(signal.SIGINT) else GRACE_S)
        outputs = _outputs(line)
        if outputs is None and self.replies.overlong:
            return self._dead([OVERLONG])
        if outputs is None:   # it exited, crashed, ignored the interrupt or said nonsense
            return self._dead([TIMEOUT] if late else [])
        return {"outputs": outputs + ([TIMEOUT] if late else []), "status": "ok"}

    def _dead(self, outputs: list[Output]) -> CellReply:
        self.stop()
        return {"outputs": outputs, "status": "dead"}

    def _ignores(self, sig: int) -> bool:
        """Whether the kernel has set `sig` to be ignored (SIG_IGN: the system then drops it), from
        /proc; False where that cannot be read."""
        try:
            with open(f"/proc/{self.kernel_pid}/status") as status:
                mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
        except (OSError, StopIteration, ValueError, IndexError):
            return False
        return bool(mask & (1 << (sig - 1)))

    def _signal(self, sig: int) -> None:
        try:
            if self.kernel_pid is not None:
                os.kill(self.kernel_pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """With a PID namespace the kernel is its init: every process it started ends with it.
        Without one, its process group goes."""
        if self.pid is None:
            return
        try:
            if self.kernel_pid is not None:
                (os.kill if self.namespaced else os.killpg)(self.kernel_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.requests.close()
        except OSError:
            pass
        self.replies.close()
        os.waitpid(self.pid, 0)
        self.pid = None


def serve_cells(runner: CellRunner, requests: TextIO, replies: TextIO) -> None:
    """The kernel's side: run each cell it is sent, reply with its outputs."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    while True:
        try:
            line = requests.readline()
            if not line:
                return
            outputs = runner.run(json.loads(line)["source"])
        except KeyboardInterrupt:   # an interrupt that came between two cells
            continue
        replies.write(dumps({"outputs": outputs}) + "\n")


def _outputs(line: str | None) -> list[Output] | None:
    """A kernel's reply, read as data: its list of outputs, or None."""
    try:
        outputs = json.loads(line)["outputs"] if line else None
    except (ValueError, TypeError, KeyError):
        return None
    return outputs if isinstance(outputs, list) else None


def dumps(reply: Mapping[str, object]) -> str:
    """Outputs as JSON; an image's bytes as base64, as Jupyter stores them."""
    return json.dumps(reply, default=lambda o: base64.b64encode(o).decode() if isinstance(o, bytes) else repr(o))


class _Lines:
    """Reads lines from a pipe, each waited for at most a given time; meanwhile passes what
    comes on `errors` (the kernel's stderr) to this process's own, up to ERRORS_KEPT bytes."""

    def __init__(self, fd: int, errors: int | None = None):
        self.fd: int | None = fd   # None once closed
        self.errors = errors
        self.buffer, self.open, self.overlong = bytearray(), True, False
        self.errors_left = ERRORS_KEPT

    def readline(self, timeout: float) -> str | None:
        """A line within `timeout`; None if none came, or if the kernel sent more than
        MAX_LINE_BYTES without ending its line (`overlong` then says so)."""
        deadline = time.monotonic() + timeout
        searched = 0     # the buffer before this holds no newline
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            left = deadline - time.monotonic()
            if len(self.buffer) > MAX_LINE_BYTES:
                self.overlong, self.buffer = True, bytearray()
                return None
            fd = self.fd
            if not self.open or left <= 0 or fd is None:   # (closed: fd is None and open False)
                return None
            ready = select.select([fd] + ([self.errors] if self.errors is not None else []), [], [], left)[0]
            if self.errors in ready:
                self._pass_errors_on()
            if fd not in ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.open = False
                return None
            self.buffer += chunk
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return line.decode()

    def _pass_errors_on(self) -> None:
        errors = self.errors
        if errors is None:   # (called only when it is ready to read)
            return
        chunk = os.read(errors, 1 << 16)
        if not chunk:   # the kernel and all it started are gone
            os.close(errors)
            self.errors = None
        elif self.errors_left > 0:
            os.write(2, chunk[:self.errors_left])
            self.errors_left -= len(chunk)

    def close(self) -> None:
        for fd in (self.fd, self.errors):
            if fd is not None:
                os.close(fd)
        self.fd, self.errors, self.open = None, None, False
