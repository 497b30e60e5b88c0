"""The grader's answers to the kernel's withheld calls (`autograder.withheld`): one worker
process computes them with the grader's own package, bounded in time, memory and size."""
from __future__ import annotations

import importlib
import json
import os
import socketserver
import threading
from pathlib import Path

from autograder.withheld import ROOT
from threeaxes.grading import wire

MAX_REQUEST_BYTES = 16 << 20     # one request's line (a toy model's gradients take about 1.2 MB)
MAX_REPLY_BYTES = 16 << 20       # one answer's JSON (search's whole ranking of a drop: about 5 MB)
CALL_TIMEOUT_S = 60.0            # one call's work, in the oracle's worker process
WORKER_MEMORY_BYTES = 4 << 30    # the worker's data segment (RLIMIT_DATA)
MAX_CONNECTIONS = 16             # requests answered at once; more wait their turn, refused past a minute
_WORKER = ("import sys; sys.path.insert(0, {root!r}); "
           "from autograder.oracle import _serve_calls; _serve_calls()")


def _raised(exc_type: type, text: str) -> str:
    """A reply that raises `exc_type(text)` in the kernel (threeaxes.grading.oracle.call)."""
    return json.dumps({"__raised__": [[c.__name__ for c in exc_type.__mro__], str(text)[:2000]]})


def _capped_json(value, cap: int) -> str | None:
    """`json.dumps(value)`, or None as soon as its text passes `cap` characters."""
    chunks, size = [], 0
    for chunk in json.JSONEncoder().iterencode(value):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return "".join(chunks)


def compute(line: bytes, cap: int = MAX_REPLY_BYTES) -> str:
    """The reply to one request, computed with the grader's package: its JSON text."""
    try:
        request = json.loads(line)
        decode = wire.Answers(None).decode    # the kernel's data, never code
        args, kwargs = decode(request["args"]), decode(request["kwargs"])
        module, qualname = request["path"].split(":")
        fn = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        text = _capped_json(wire.encode(fn(*args, **kwargs)), cap)
        if text is None:
            return _raised(MemoryError, f"{request['path']}'s answer is over {cap >> 20} MiB of data: "
                                        "the grader does not send it")
        return text
    except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
        return _raised(type(exc), str(exc))


def _serve_calls() -> None:
    """The oracle's worker process: length-prefixed requests in on stdin, replies out on stdout."""
    import resource
    import struct
    import sys

    try:
        resource.setrlimit(resource.RLIMIT_DATA, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):
        pass
    for module in sys.argv[1:]:      # imported while the grader goes on
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the call that needs it says why
            pass
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        line = inp.read(struct.unpack(">I", head)[0])
        try:
            reply = compute(line).encode()
        except MemoryError:
            reply = _raised(MemoryError, "the grader ran out of the memory a withheld call may use").encode()
        out.write(struct.pack(">I", len(reply)) + reply)
        out.flush()


class _Worker:
    """A process of the grader's own that computes the oracle's answers one at a time, so that
    a call that runs too long can be stopped (its process group killed) and one that takes
    too much memory fails there, not in the grader."""

    def __init__(self, modules=()):
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k != "THREEAXES_ORACLE"}
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER.format(root=str(ROOT)), *sorted(modules)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=str(ROOT), env=env,
                                     start_new_session=True)

    def ask(self, line: bytes, timeout: float) -> str:
        """The reply's text; TimeoutError past `timeout` seconds (the worker is then gone)."""
        import select
        import struct
        import time

        deadline = time.monotonic() + timeout
        self.proc.stdin.write(struct.pack(">I", len(line)) + line)
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()

        def read(n: int) -> bytes:
            data = bytearray()
            while len(data) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
                chunk = os.read(fd, min(n - len(data), 1 << 20))
                if not chunk:
                    raise EOFError
                data += chunk
            return bytes(data)

        size = struct.unpack(">I", read(4))[0]
        if size > MAX_REPLY_BYTES + 4096:
            raise EOFError
        return read(size).decode()

    def kill(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class Oracle:
    """Answers the kernel's stubs on a Unix socket in `folder`, with the grader's package;
    `calls` lists every "module:qualname" asked, in order, answered or not.

    What one submission can make it do is bounded: a request's line is read up to
    `MAX_REQUEST_BYTES` (a longer one is refused unread), an answer whose JSON passes
    `MAX_REPLY_BYTES` is refused, and each call runs in a worker process of the grader's
    (`_Worker`) that is killed after `timeout` seconds (the kernel gets a TimeoutError)
    and whose memory is limited. While a `guard` is set (run_notebook sets the
    submission's), a call it refuses is not computed at all."""

    def __init__(self, paths: set, folder: Path, timeout: float = CALL_TIMEOUT_S):
        self.paths, self.calls, self._lock = set(paths), [], threading.Lock()
        self.timeout, self.guard = timeout, None
        self.socket_path = str(Path(folder) / "oracle.sock")
        self._modules = {p.split(":")[0] for p in self.paths}
        self._worker, self._worker_lock = _Worker(self._modules), threading.Lock()   # started now: it imports
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        oracle = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 120     # a request that does not arrive whole in two minutes is dropped

            def handle(self):
                if not oracle._slots.acquire(timeout=60):
                    reply = _raised(TimeoutError, "the grader is busy with this notebook's other calls")
                else:
                    try:
                        line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
                        reply = oracle.answer(line)
                    except OSError:
                        return
                    finally:
                        oracle._slots.release()
                self.wfile.write(reply.encode() + b"\n")

        self._server = socketserver.ThreadingUnixStreamServer(self.socket_path, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def answer(self, line: bytes) -> str:
        """The reply to one request line, as JSON text."""
        if len(line) > MAX_REQUEST_BYTES:
            return _raised(ValueError, f"a request to the grader is over {MAX_REQUEST_BYTES >> 20} MiB: refused")
        try:
            request = json.loads(line)
            path = request["path"]
            if type(path) is not str or path not in self.paths:
                raise PermissionError(f"{str(path)[:200]} is not withheld here")
        except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
            return _raised(type(exc), str(exc))
        with self._lock:
            self.calls.append(path)
        guard = self.guard
        refused = guard.refuses(path) if guard is not None else None
        if refused:
            return _raised(PermissionError, refused)
        return self._compute(line, path)

    def _compute(self, line: bytes, path: str) -> str:
        if not self._worker_lock.acquire(timeout=self.timeout):
            return _raised(TimeoutError, f"{path}: the grader's earlier calls took too long")
        try:
            if self._worker is None or self._worker.proc.poll() is not None:
                self._worker = _Worker(self._modules)
            try:
                return self._worker.ask(line, self.timeout)
            except (TimeoutError, EOFError, OSError, ValueError) as exc:
                self._worker.kill()
                self._worker = None
                if isinstance(exc, TimeoutError):
                    return _raised(TimeoutError, f"{path} ran over {self.timeout:g} s in the grader: stopped")
                return _raised(RuntimeError, f"{path} stopped the grader's worker (out of memory?)")
        finally:
            self._worker_lock.release()

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        with self._worker_lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None


