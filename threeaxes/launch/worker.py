"""The rank side of :func:`threeaxes.launch.launch`: this runs inside each worker process."""

from __future__ import annotations

import datetime
import io
import os
import pickle
import signal
import socket
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, Literal

import cloudpickle
import torch
import torch.distributed as dist

_FINISHED_KEY = "threeaxes/ranks_finished"
_ALL_FINISHED_KEY = "threeaxes/all_finished"


def run_rank(rank: int, world_size: int, backend: str, port: int, timeout_s: float, payload: bytes, conn: Connection,
             environ: dict[str, str]) -> None:
    """Join the group through the caller's TCPStore, run fn, report back, leave the group.

    It lives apart from ``launcher.py`` and ``local.py`` so the forkserver can import it (and torch) once;
    every worker then forks with everything already imported.

    A rank talks to the launching process over one duplex pipe:

    * rank -> caller: ``("out", "stdout" | "stderr", [lines])``, ``("started",)`` just
      before ``fn`` runs, then ``("ok", pickled_result)`` or ``("err", traceback_text)``,
      and ``("stack", text)`` when asked where it is;
    * caller -> rank: ``"stack"`` (where is your main thread?); end of file means the
      caller is gone (it finished, was interrupted, or died), and the rank exits at once.
    """
    # The forkserver holds the environment from when it started; use the caller's as it
    # is now (a notebook may have set NCCL_DEBUG, CUDA_VISIBLE_DEVICES, ... since), plus
    # the variables torchrun would set, which some libraries read.
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size))
    # The caller owns Ctrl-C / "interrupt kernel": it stops the ranks itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send = _Sender(conn)
    watchdog = threading.Thread(
        target=_watch_caller, args=(conn, send, threading.get_ident()), daemon=True
    )
    watchdog.start()

    saved_streams = sys.stdout, sys.stderr
    rank_streams = _RankStream("stdout", send), _RankStream("stderr", send)
    sys.stdout, sys.stderr = rank_streams
    store: dist.TCPStore | None = None
    finished = False
    reply: tuple[str, bytes | str]
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        store = _join_group(rank, world_size, backend, port, timeout_s)
        send("started")
        result = fn(rank, world_size, *args, **kwargs)
        reply = ("ok", dumps_result(result, rank))
        finished = True
    except BaseException as exc:  # noqa: BLE001 -- every failure, even SystemExit, goes to the caller
        reply = ("err", _format_exception(exc))
    finally:
        for stream in rank_streams:
            stream.flush()  # a last line without a newline still reaches the caller
        sys.stdout, sys.stderr = saved_streams
    send(*reply)  # after all output: the caller prints every line before it returns

    # Leave the group. Nobody may tear down its gloo/NCCL connections while another
    # rank is still inside fn (it would see "connection closed by peer" in the middle
    # of a collective), so finished ranks first wait for each other on the store.
    # After an error there is nothing to wait for: the caller is stopping every rank.
    try:
        if finished and store is not None:  # finished implies the group was joined
            if store.add(_FINISHED_KEY, 1) == world_size:
                store.set(_ALL_FINISHED_KEY, "1")
            store.wait([_ALL_FINISHED_KEY])
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 -- the result is already delivered; stay quiet on the way out
        pass


def _join_group(rank: int, world_size: int, backend: str, port: int, timeout_s: float) -> dist.TCPStore:
    """Rendezvous: a client of the caller's TCPStore, then the default process group."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl":
        torch.cuda.set_device(rank)  # one GPU per rank
    else:
        # Share the cores instead of every rank starting one thread per core.
        torch.set_num_threads(max(1, _cpu_count() // world_size))
        _gloo_on_loopback()
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    return store


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _gloo_on_loopback() -> None:
    """All ranks share this machine: keep gloo on loopback (a laptop's hostname often
    does not resolve to a usable address). A value the user set is left alone."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    loopbacks = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if loopbacks:
        os.environ["GLOO_SOCKET_IFNAME"] = loopbacks[0]


class _ResultPickler(cloudpickle.Pickler):
    """cloudpickle, except that tensors on a GPU (or inside an autograd graph) travel
    as detached CPU copies: the caller may have no GPU, and a graph cannot cross processes."""

    def reducer_override(self, obj: object) -> Any:
        if isinstance(obj, torch.Tensor) and (
            obj.device.type != "cpu" or (obj.requires_grad and not obj.is_leaf)
        ):
            return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return super().reducer_override(obj)


def dumps_result(result: object, rank: int) -> bytes:
    """Pickle what fn returned on ``rank``, or say plainly why it cannot travel."""
    buffer = io.BytesIO()
    try:
        _ResultPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    except Exception as exc:
        raise TypeError(
            f"rank {rank} returned a {type(result).__name__} that cannot be pickled ({exc}). "
            "launch sends each rank's result back to the caller by pickle: return plain "
            "Python values, numbers or tensors (for a model, its state_dict())."
        ) from exc
    return buffer.getvalue()


class _Sender:
    """Sends messages to the caller from any thread of this rank."""

    def __init__(self, conn: Connection) -> None:
        self._conn, self._lock = conn, threading.Lock()

    def __call__(self, *message: object) -> None:
        with self._lock:
            try:
                self._conn.send(message)
            except OSError:  # the caller is gone; the watchdog is about to end this rank
                pass


class _RankStream(io.TextIOBase):
    """Stands in for sys.stdout / sys.stderr and sends whole lines to the caller,
    which prints them as ``[rank r] line``. ``flush()`` also sends a partial line."""

    encoding = "utf-8"

    def __init__(self, stream: Literal["stdout", "stderr"], send: _Sender) -> None:
        super().__init__()
        self._stream, self._send = stream, send
        self._pending, self._lock = "", threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:  # held while sending too, so lines from several threads keep their order
            *lines, self._pending = (self._pending + text).split("\n")
            if lines:
                self._send("out", self._stream, lines)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._send("out", self._stream, [self._pending])
                self._pending = ""


def _watch_caller(conn: Connection, send: _Sender, main_thread_id: int) -> None:
    """Watchdog thread: end this rank the moment the caller goes away, and answer
    "where are you?" so a timeout can show where each stuck rank is waiting."""
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            os._exit(1)  # caller finished, stopped us, or died: never outlive it
        if request == "stack":
            send("stack", _format_stack(sys._current_frames().get(main_thread_id)))


def _format_stack(frame: FrameType | None) -> str:
    """The main thread's stack from fn downwards (our own frames left out)."""
    frames = traceback.extract_stack(frame) if frame is not None else []
    ours = [i for i, f in enumerate(frames) if f.filename == __file__]
    return "".join(traceback.format_list(frames[ours[-1] + 1 :] if ours else frames))


def _format_exception(exc: BaseException) -> str:
    """The traceback as the student would see it in one process: from fn downwards."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
