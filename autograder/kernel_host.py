"""The process that holds a drop's kernels, inside the sandbox.

    python -m autograder.kernel_host '<settings JSON>'

It isolates itself first (`autograder.sandbox.isolate`), then answers the grader
one JSON line at a time on stdin:

    {"source": "...", "timeout": 90}  ->  {"outputs": [...], "status": "ok" | "dead"}
    {"fork": true}                    ->  {"forked": true | false}
    {"end": true}                     ->  {"ended": true}

Before its first fork it runs cells itself: a drop's opening cells, the same
for every submission (autograder/warm_start.py). Each fork then starts one
submission's kernel from that state: a child with its own copy of /tmp, its own
PID namespace and no privilege over the mounts (`sandbox.enter_kernel_world`),
so nothing it does reaches this process or the next submission. Cells go to
that child until "end" stops it with every process it started. A cell past its
timeout is interrupted; a kernel that then still does not answer, or that
exits or crashes, is stopped and the reply says "dead".

Replies go to the grader on a private copy of stdout; the kernels (and every
rank they start) get /dev/null instead, so what they print never reaches the
grader except as a cell's outputs. Everything here is as untrusted as the
kernels: the grader reads replies as data and decides nothing from them but
the outputs of the student's own cells.
"""
from __future__ import annotations

import _thread
import base64
import json
import os
import select
import signal
import sys
import threading
import time

from autograder import sandbox
from autograder.cell_runner import CellRunner   # before isolating: the grader's code is not in there

TIMEOUT = {"output_type": "error", "ename": "TimeoutError", "evalue": "the cell ran past the grading time limit",
           "traceback": ["TimeoutError: the cell ran past the grading time limit"]}
GRACE_S = 10   # after an interrupt, for the cell to stop before its kernel is


def main(argv=None) -> None:
    settings = json.loads((argv or sys.argv[1:])[0])
    sandbox.die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    report = sandbox.isolate(settings)            # forks: what follows runs inside
    oracle = settings.get("oracle")               # the grader's socket, as this side sees it
    if oracle:
        settings["env"]["THREEAXES_ORACLE"] = oracle["inside" if report["namespaces"] else "outside"]
    if settings.get("package_parent") and not report["namespaces"]:
        # no mounts here: the withheld copy goes first on the path (autograder/borrowed.py)
        settings["env"]["PYTHONPATH"] = settings["package_parent"]
        sys.path.insert(0, settings["package_parent"])
    os.environ.clear()
    os.environ.update(settings["env"])
    requests = sys.stdin
    runner = CellRunner()   # (it gives the kernels an empty sys.stdin)
    _leave_the_grader_behind(settings)
    replies.write(json.dumps({"sandbox": report}) + "\n")
    Host(runner, replies, report["namespaces"], settings).serve(requests)


def _leave_the_grader_behind(settings: dict) -> None:
    """The kernels run in this process: they import from the work folder and the Python
    environment, as a Jupyter kernel would, and not the grader (`autograder`) this
    process was started from."""
    grader = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [""] + [p for p in sys.path if p and os.path.abspath(p) != grader]
    for name in [n for n in sys.modules if n == "autograder" or n.startswith("autograder.")]:
        del sys.modules[name]


class Host:
    def __init__(self, runner, replies, namespaces: bool, settings: dict):
        self.runner, self.replies, self.namespaces, self.settings = runner, replies, namespaces, settings
        self.kernel: Kernel | None = None
        self.forked = False

    def serve(self, requests) -> None:
        for line in requests:
            request = json.loads(line)
            if "fork" in request:
                self._end()
                self.kernel, self.forked = Kernel.fork(self), True
                reply = {"forked": self.kernel.pid is not None}
            elif "end" in request:
                self._end()
                reply = {"ended": True}
            elif self.kernel is not None:
                reply = self.kernel.run(request)
            elif not self.forked:
                reply = {"outputs": run_here(self.runner, request["source"], request["timeout"]), "status": "ok"}
            else:   # the opening cells' state is every submission's: no cell runs here once one forked
                reply = {"outputs": [], "status": "dead"}
            self.replies.write(_dumps(reply) + "\n")
        self._end()

    def _end(self) -> None:
        if self.kernel is not None:
            self.kernel.stop()
            self.kernel = None


def run_here(runner, source: str, timeout: float) -> list[dict]:
    """A cell in this process (the opening cells: the instructor's own), interrupted at `timeout`."""
    fired = threading.Event()

    def interrupt():
        fired.set()
        _thread.interrupt_main()

    timer = threading.Timer(timeout, interrupt)
    timer.start()
    try:
        outputs = runner.run(source)
    except KeyboardInterrupt:   # the timer fired between the cell's end and cancel()
        outputs = list(runner.outputs)
    finally:
        timer.cancel()
        timer.join()   # no thread may be left when this process forks
    return outputs + ([TIMEOUT] if fired.is_set() else [])


class Kernel:
    """One submission's kernel: a forked child, talked to over two pipes."""

    def __init__(self, pid, requests, replies, namespaced: bool):
        self.pid, self.requests, self.replies, self.namespaced = pid, requests, replies, namespaced
        self.kernel_pid = None   # as this process sees it (with a PID namespace, the child's child)

    @classmethod
    def fork(cls, host: Host) -> "Kernel":
        to_kernel, from_host = os.pipe()
        to_host, from_kernel = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: never returns
            try:
                os.close(from_host), os.close(to_host), os.close(host.replies.fileno())
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                sandbox.enter_kernel_world(host.namespaces, host.settings,
                                           announce=lambda p: os.write(from_kernel, b"%d\n" % p))
                if not host.namespaces:
                    os.write(from_kernel, b"%d\n" % os.getpid())
                _forget_the_hosts_helpers()
                serve_cells(host.runner, os.fdopen(to_kernel, "r"), os.fdopen(from_kernel, "w", buffering=1))
            finally:
                os._exit(0)
        os.close(to_kernel), os.close(from_kernel)
        kernel = cls(pid, os.fdopen(from_host, "w", buffering=1), _Lines(to_host), host.namespaces)
        line = kernel.replies.readline(30)
        kernel.kernel_pid = int(line) if line and line.strip().isdigit() else None
        if kernel.kernel_pid is None:
            kernel.stop()
            kernel.pid = None
        return kernel

    def run(self, request: dict) -> dict:
        """One cell, relayed; interrupted at its timeout, the kernel stopped if that fails."""
        try:
            self.requests.write(json.dumps(request) + "\n")
        except (BrokenPipeError, OSError):
            return self._dead([])
        line = self.replies.readline(request["timeout"])
        if line is None and self.replies.open:
            self._signal(signal.SIGINT)
            line = self.replies.readline(GRACE_S)
            if line is None:
                return self._dead([TIMEOUT])
            return {"outputs": json.loads(line)["outputs"] + [TIMEOUT], "status": "ok"}
        if line is None:   # it exited or crashed
            return self._dead([])
        return {"outputs": json.loads(line)["outputs"], "status": "ok"}

    def _dead(self, outputs) -> dict:
        self.stop()
        return {"outputs": outputs, "status": "dead"}

    def _signal(self, sig) -> None:
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


def serve_cells(runner, requests, replies) -> None:
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
        replies.write(_dumps({"outputs": outputs}) + "\n")


def _forget_the_hosts_helpers() -> None:
    """The forkserver and resource tracker the opening cells started belong to the host's
    world; this kernel starts its own when it first launches ranks."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        server = forkserver._forkserver
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
        server._inherited_fds, server._lock = None, threading.Lock()
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        tracker._resource_tracker._fd = tracker._resource_tracker._pid = None
        tracker._resource_tracker._lock = threading.RLock()


def _dumps(reply: dict) -> str:
    """Outputs as JSON; an image's bytes as base64, as Jupyter stores them."""
    return json.dumps(reply, default=lambda o: base64.b64encode(o).decode() if isinstance(o, bytes) else repr(o))


class _Lines:
    """Reads lines from a pipe, each waited for at most a given time."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.open = fd, b"", True

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if not self.open or left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.open = False
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd, self.open = None, False


if __name__ == "__main__":
    main()
