"""The grader's answers to one kernel's withheld calls (`autograder.withheld`): one oracle per
kernel, ending with it, bounded in what one kernel can make it do (CONTRIBUTING.md, "A
submission is its notebook, and each kernel has its own oracle")."""
from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from autograder.runtime.oracle_worker import MAX_REPLY_BYTES, Worker, WorkerSource, raised  # noqa: F401 (its limit, named here)

MAX_REQUEST_BYTES = 16 << 20     # one request's line (a toy model's gradients take about 1.2 MB)
CALL_TIMEOUT_S = 60.0            # one call's work, in the oracle's worker process
MAX_CONNECTIONS = 16             # connections open at once; the next is answered "busy" and closed
REQUEST_WAIT_S = 120             # a request that does not arrive whole in two minutes is dropped


class Refuser(Protocol):
    """What an oracle asks before it answers (autograder.judging.borrowed.Guard)."""

    def refuses(self, path: str) -> str | None: ...


class _Listener:
    """A Unix socket that serves each connection in a thread of its own, at most `cap` at
    once: a connection past the cap is answered `busy` and closed by the accepting thread,
    so no thread, buffer or queue grows with the number a kernel opens."""

    def __init__(self, path: str, handle: Callable[[bytes], str], cap: int, busy: bytes):
        self.path, self._handle, self._cap, self._busy = path, handle, cap, busy
        self._open: set[socket.socket] = set()
        self._lock, self._closed = threading.Lock(), False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o666)    # a kernel run as nobody connects (connecting writes to the socket)
        self._sock.listen(64)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:      # closed
                return
            with self._lock:
                full = self._closed or len(self._open) >= self._cap
                if not full:
                    self._open.add(conn)
            if full:
                try:
                    conn.setblocking(False)
                    conn.send(self._busy)
                except OSError:
                    pass
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(REQUEST_WAIT_S)
            line = conn.makefile("rb").readline(MAX_REQUEST_BYTES + 1)
            reply = self._handle(line)
            conn.settimeout(30)
            conn.sendall(reply.encode() + b"\n")
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            conn.close()

    def connections(self) -> int:
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            left = list(self._open)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread
        except OSError:
            pass
        self._sock.close()
        self._thread.join(10)
        for conn in left:      # whatever this kernel left waiting ends here, unread
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Oracle:
    """Answers one kernel's stubs on a Unix socket in `folder`, with the grader's package;
    `calls` lists every "module:qualname" asked, in order, answered or not.

    `source`: the worker source (oracle_worker.WorkerSource) to fork this oracle's worker
    from, shared by the oracles of one opening host; one of its own when not given. A
    request's line is read up to `MAX_REQUEST_BYTES` (a longer one is refused unread), an
    answer whose JSON passes `MAX_REPLY_BYTES` is refused, and each call runs in the worker,
    killed after `timeout` seconds (the kernel gets a TimeoutError). While a `guard` is set
    (run_notebook sets the submission's), a call it refuses is not computed at all. `close()`
    ends the socket, every connection left open and the worker: the kernel's oracle ends with it."""

    def __init__(self, paths: Iterable[str], folder: Path, timeout: float = CALL_TIMEOUT_S, *,
                 source: WorkerSource | None = None, name: str = "oracle.sock"):
        self.paths, self._lock = set(paths), threading.Lock()
        self.calls: list[str] = []
        self.timeout = timeout
        self.guard: Refuser | None = None
        self.socket_path = str(Path(folder) / name)
        self._own_source = source is None
        self._source = source if source is not None else WorkerSource({p.split(":")[0] for p in self.paths})
        self._worker: Worker | None = None
        self._worker_lock, self._closed = threading.Lock(), False
        busy = raised(ConnectionRefusedError, f"the grader answers at most {MAX_CONNECTIONS} calls of a "
                                              "notebook at once: this one was refused").encode() + b"\n"
        self._listener = _Listener(self.socket_path, self.answer, MAX_CONNECTIONS, busy)

    def answer(self, line: bytes) -> str:
        """The reply to one request line, as JSON text."""
        if len(line) > MAX_REQUEST_BYTES:
            return raised(ValueError, f"a request to the grader is over {MAX_REQUEST_BYTES >> 20} MiB: refused")
        try:
            request = json.loads(line)
            path = request["path"]
            if type(path) is not str or path not in self.paths:
                raise PermissionError(f"{str(path)[:200]} is not withheld here")
        except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
            return raised(type(exc), str(exc))
        with self._lock:
            self.calls.append(path)
        guard = self.guard
        refused = guard.refuses(path) if guard is not None else None
        if refused:
            return raised(PermissionError, refused)
        return self._compute(line, path)

    def _compute(self, line: bytes, path: str) -> str:
        if not self._worker_lock.acquire(timeout=self.timeout):
            return raised(TimeoutError, f"{path}: the grader's earlier calls took too long")
        try:
            if self._closed:
                return raised(RuntimeError, f"{path}: this kernel's grading is over")
            try:
                if self._worker is None:
                    self._worker = self._source.spawn()
                return self._worker.ask(line, self.timeout)
            except (TimeoutError, EOFError, OSError, ValueError, RuntimeError) as exc:
                if self._worker is not None:
                    self._worker.kill()
                self._worker = None
                if isinstance(exc, TimeoutError):
                    return raised(TimeoutError, f"{path} ran over {self.timeout:g} s in the grader: stopped")
                return raised(RuntimeError, f"{path} stopped the grader's worker (out of memory?)")
        finally:
            self._worker_lock.release()

    def connections(self) -> int:
        """Connections open now (each holds one thread)."""
        return self._listener.connections()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        worker = self._worker
        if worker is not None:    # a call still running ends here: its thread reads the end and returns
            worker.stop()
        with self._worker_lock:
            if self._worker is not None:
                self._worker.kill()
            self._worker = None
        if self._own_source:
            self._source.close()
