"""The processes that compute the oracle's answers (autograder/judging/oracle.py), without root
(how they are confined: CONTRIBUTING.md, "The sandbox a kernel runs in").

    source = WorkerSource({"threeaxes.cost.planner"})   # one per opening host: imports once
    worker = source.spawn()                               # one per kernel: a fork, milliseconds
    text = worker.ask(request_line, timeout=60)
    worker.kill()"""
from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from autograder.runtime import sandbox, zygote
from threeaxes.grading import wire

ROOT = Path(__file__).resolve().parents[2]

MAX_REPLY_BYTES = 16 << 20       # one answer's JSON (search's whole ranking of a drop: about 5 MB)
WORKER_MEMORY_BYTES = 4 << 30    # a worker's data segment (RLIMIT_DATA)
WORKER_FILES = 256               # a worker's open files (RLIMIT_NOFILE)
_SOURCE = ("import sys; sys.path.insert(0, {root!r}); "
           "from autograder.runtime.oracle_worker import _source_main; _source_main()")


def raised(exc_type: type, text: str) -> str:
    """A reply that raises `exc_type(text)` in the kernel (threeaxes.grading.wire.oracle.call)."""
    return json.dumps({"__raised__": [[c.__name__ for c in exc_type.__mro__], str(text)[:2000]]})


def _capped_json(value: object, cap: int) -> str | None:
    """`json.dumps(value)`, or None as soon as its text passes `cap` characters."""
    chunks: list[str] = []
    size = 0
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
        fn: Any = importlib.import_module(module)   # then the function in it, by its qualified name
        for part in qualname.split("."):
            fn = getattr(fn, part)
        text = _capped_json(wire.encode(fn(*args, **kwargs)), cap)
        if text is None:
            return raised(MemoryError, f"{request['path']}'s answer is over {cap >> 20} MiB of data: "
                                       "the grader does not send it")
        return text
    except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
        return raised(type(exc), str(exc))


def _serve_calls(inp: IO[bytes], out: IO[bytes]) -> None:
    """A worker: length-prefixed requests in on `inp`, replies out on `out`."""
    import struct

    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        line = inp.read(struct.unpack(">I", head)[0])
        try:
            reply = compute(line).encode()
        except MemoryError:
            reply = raised(MemoryError, "the grader ran out of the memory a withheld call may use").encode()
        out.write(struct.pack(">I", len(reply)) + reply)
        out.flush()


def _source_main() -> None:
    """The worker source: limits, imports, then one forked worker per request on its control socket."""
    import ctypes
    import resource
    import signal

    control = socket.socket(fileno=int(sys.argv[1]))
    settings = json.loads(sys.argv[2])
    sandbox.die_with_parent()
    sandbox.confine_worker(settings["keep"], settings["stage"])   # before any module it serves is imported
    for limit, value in ((resource.RLIMIT_DATA, WORKER_MEMORY_BYTES), (resource.RLIMIT_NOFILE, WORKER_FILES),
                         (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)   # PR_SET_NO_NEW_PRIVS: no setuid program's gain
    for module in sys.argv[3:]:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the call that needs it says why
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # workers are reaped as they end
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 2)
        except OSError:
            return
        if not message or len(fds) != 2:
            return
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setsid()
                _serve_calls(os.fdopen(fds[0], "rb"), os.fdopen(fds[1], "wb"))
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        control.sendall(b"%d\n" % pid)


class WorkerSource:
    """The unprivileged process that has imported `modules` and forks a `Worker` on request."""

    def __init__(self, modules: Iterable[str] = ()):
        self.modules, self._lock = sorted(modules), threading.Lock()
        self.proc: subprocess.Popen[bytes] | zygote.Forked | None = None
        self._start()

    def _start(self) -> None:
        import tempfile

        from autograder.runtime.kernel_session import python_paths

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent", "OMP_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
        self._stage = tempfile.TemporaryDirectory(prefix="threeaxes-oracle-worker-")
        settings = {"stage": self._stage.name, "keep": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                                str(ROOT / "threeaxes"), *python_paths()})}
        # forked by the grading process's zygote (torch imported) or started afresh, as the grader;
        # a root grader's source confines itself (sandbox.confine_worker)
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            self.proc = zygote.fork("oracle source", env, [devnull, devnull, devnull, theirs.fileno()],
                                    argv=[json.dumps(settings), *self.modules], cwd="/")
        finally:
            os.close(devnull)
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _SOURCE.format(root=str(ROOT)), str(theirs.fileno()),
                 json.dumps(settings), *self.modules],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/", env=env, start_new_session=True)
        theirs.close()
        self._control = ours
        self._control.settimeout(120)   # its first answer waits for the imports

    def spawn(self) -> Worker:
        """A fresh worker, forked from this source (started again if it has died)."""
        with self._lock:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:   # (None: only before _start)
                    self._start()
                to_worker, from_grader = os.pipe()
                to_grader, from_worker = os.pipe()
                try:
                    socket.send_fds(self._control, [b"w"], [to_worker, from_worker])
                    said = b""
                    while not said.endswith(b"\n") and len(said) < 32:
                        chunk = self._control.recv(32)
                        if not chunk:
                            raise EOFError
                        said += chunk
                    return Worker(int(said), from_grader, to_grader)
                except (OSError, EOFError, ValueError):
                    os.close(from_grader)
                    os.close(to_grader)
                    self.close()
                finally:
                    os.close(to_worker)
                    os.close(from_worker)
            raise RuntimeError("the grader's worker for withheld calls could not start")

    def close(self) -> None:
        try:
            self._control.close()
        except OSError:
            pass
        if self.proc is not None and self.proc.poll() is None:
            sandbox.kill_tree(self.proc)   # (a worker ends with its oracle, or when its pipes close)
        self._stage.cleanup()


class Worker:
    """One oracle's worker: computes its answers one at a time, so that a call that runs too
    long can be stopped (its process killed) and one that takes too much memory fails there."""

    def __init__(self, pid: int, requests: int, replies: int):
        self.pid, self.requests, self.replies = pid, requests, replies

    def ask(self, line: bytes, timeout: float) -> str:
        """The reply's text; TimeoutError past `timeout` seconds, EOFError if the worker ended."""
        import select
        import struct
        import time

        deadline = time.monotonic() + timeout
        data = struct.pack(">I", len(line)) + line
        while data:
            data = data[os.write(self.requests, data[:1 << 20]):]

        def read(n: int) -> bytes:
            got = bytearray()
            while len(got) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                    raise TimeoutError
                chunk = os.read(self.replies, min(n - len(got), 1 << 20))
                if not chunk:
                    raise EOFError
                got += chunk
            return bytes(got)

        size = struct.unpack(">I", read(4))[0]
        if size > MAX_REPLY_BYTES + 4096:
            raise EOFError
        return read(size).decode()

    def stop(self) -> None:
        """The process killed; its pipes stay open for the thread that may be reading them."""
        import signal

        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def kill(self) -> None:
        self.stop()
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self.requests = self.replies = -1
