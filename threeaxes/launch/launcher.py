"""Run one function on N ranks from a notebook cell.

    results = launch(fn, 4, x)   # fn(rank, 4, x) on ranks 0..3; the results in rank order"""

from __future__ import annotations

import atexit
import math
import numbers
import os
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from threeaxes.launch import payload_modules, prestart, worker
from threeaxes.launch.local import LaunchTimeout, LocalLaunch, RankError

__all__ = ["launch", "RankError", "LaunchTimeout", "MAX_WORLD_SIZE"]

MAX_WORLD_SIZE = 64


def launch(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60.0, backend: str | None = None,
           **kwargs: Any) -> list[Any]:
    """Call ``fn(rank, world_size, *args, **kwargs)`` on ranks 0..world_size-1.

    Each rank runs in its own process with ``torch.distributed``'s default group
    initialised: gloo on CPU, or NCCL with ``torch.cuda.set_device(rank)`` when there is
    one GPU per rank (``backend=`` overrides). Returns the ranks' return values as a
    list in rank order. Arguments and results travel by pickle, so results must be
    picklable; tensors come back on the CPU (detached, if they were inside a graph).

    Everything a rank prints appears here, each line prefixed ``[rank r]`` (Python's
    sys.stdout / sys.stderr; what C++ code such as NCCL_DEBUG writes straight to the
    file descriptors goes wherever this process's own does, e.g. Jupyter's terminal). An
    exception on any rank raises RankError at once and stops the others. ``timeout``
    is how many seconds fn may run once every rank has started; past it, LaunchTimeout
    (usually a rank skipped or added a collective). ``timeout`` and ``backend`` are
    launch's own keywords, not passed on to fn.

    Under torchrun, fn runs in this process on the real group instead, and the list
    holds every rank's result (gathered with all_gather_object); there, torchrun owns
    the processes, so ``timeout`` and output prefixes are torchrun's business.

    How it works, phase by phase:

    * Rendezvous. The caller opens a TCPStore on port 0, so the OS picks a free port and
      parallel launches never collide; each rank joins the default process group through
      it (gloo on CPU, NCCL with one GPU per rank).
    * Spawn. Ranks fork from a multiprocessing forkserver that has imported torch once,
      so a warm launch takes a tenth of a second instead of seconds. In a Jupyter kernel
      that server starts in the background as soon as ``threeaxes`` is imported, so the
      first launch finds it ready too (``prestart.py``; ``THREEAXES_PRESTART=0`` turns
      this off, ``=1`` turns it on outside kernels). The server accepts once it has torch
      and torch.distributed and imports the rest while idle (``forkserver_idle.py``); a
      launch that comes before that rest is in waits for it, unless its function needs
      nothing more (``payload_modules.py``). fn and its arguments are pickled by value
      (cloudpickle): notebook functions, closures and lambdas work.
    * Wait loop. Each rank has a pipe to the caller (``local.py``; the rank's end is
      ``worker.py``). What a rank prints comes back over it line by line and is printed
      here as ``[rank r] ...`` (in Jupyter only the kernel's own output reaches the cell),
      then its result, or its traceback, which is raised here at once as RankError.
    * Teardown. Whatever happened (success, error, timeout, interrupt) every rank is
      stopped before launch returns; a rank whose caller dies exits on its own, because
      its pipe to the caller closes.

    Under torchrun (RANK and WORLD_SIZE set) nothing is spawned: fn runs in this process
    on the real group, and every rank's result is gathered to every rank.
    """
    _check_args(fn, world_size, timeout, backend)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _launch_under_torchrun(fn, int(world_size), backend, args, kwargs)
    backend = _pick_backend(backend, int(world_size), torch.cuda.device_count())
    try:
        payload = cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise TypeError(
            f"launch could not pickle fn or its arguments ({exc}); they travel to the ranks "
            "by pickle: pass tensors, numbers and plain data, not open files, locks or generators"
        ) from exc
    _let_the_forkserver_finish_unless_light(payload)
    return LocalLaunch(int(world_size), backend, float(timeout), payload).run()


def _let_the_forkserver_finish_unless_light(payload: bytes) -> None:
    """Spawn, first part. The forkserver forks ranks once it has torch and
    torch.distributed, and imports the rest (torch._dynamo, ...) while idle. A function
    that names only torch and torch.distributed goes at once; any other waits until the
    rest is in too, so its ranks do not each import it again (``payload_modules``)."""
    if not prestart.wait_until_warm(timeout=0) and not payload_modules.is_light(payload):
        prestart.wait_until_warm()


def _check_args(fn: object, world_size: Any, timeout: Any, backend: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, ...), got {type(fn).__name__}")
    if (
        isinstance(world_size, bool)
        or not isinstance(world_size, numbers.Integral)
        or not 1 <= world_size <= MAX_WORLD_SIZE  # type: ignore[operator]  # typeshed's Integral has no <=
    ):
        raise ValueError(
            f"world_size must be a whole number of ranks from 1 to {MAX_WORLD_SIZE}, "
            f"got {world_size!r}; for example launch(fn, 4)"
        )
    # typeshed's numbers.Real has no <
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not 0 < timeout < math.inf:  # type: ignore[operator]
        raise ValueError(
            f"timeout must be a positive, finite number of seconds, got {timeout!r}; "
            "for example timeout=120 for slow work"
        )
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(
            f"backend must be 'gloo' (CPU), 'nccl' (one GPU per rank) or None to choose "
            f"automatically, got {backend!r}"
        )


def _pick_backend(backend: str | None, ranks_here: int, gpus: int) -> str:
    """NCCL when every rank on this machine gets its own GPU, else gloo; `backend` overrides."""
    if backend is None:
        return "nccl" if gpus >= ranks_here and dist.is_nccl_available() else "gloo"
    if backend == "nccl" and gpus < ranks_here:
        fix = f" or at most {gpus} ranks" if gpus else ""
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: {ranks_here} ranks on this machine, "
            f"but it has {gpus} GPU(s); use backend='gloo'{fix}"
        )
    if backend == "nccl" and not dist.is_nccl_available():
        raise ValueError("backend='nccl' but this PyTorch build has no NCCL; use backend='gloo'")
    return backend


def _launch_under_torchrun(fn: Callable[..., Any], world_size: int, backend: str | None, args: tuple,
                           kwargs: dict[str, Any]) -> list[Any]:
    """torchrun already started one process per rank: run fn here, on the real group."""
    env_world_size = int(os.environ["WORLD_SIZE"])
    if world_size != env_world_size:
        raise ValueError(
            f"launch(fn, {world_size}) but torchrun started WORLD_SIZE={env_world_size} ranks; "
            f"pass world_size={env_world_size}, or change --nproc_per_node / --nnodes"
        )
    if not dist.is_initialized():
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", env_world_size))
        backend = _pick_backend(backend, ranks_here, torch.cuda.device_count())
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)  # env:// rendezvous, set up by torchrun
        # The group lives for the rest of the script (later launches reuse it); leave it
        # cleanly at exit, or gloo's threads abort the process as the interpreter stops.
        atexit.register(_leave_group_at_exit)
    rank = dist.get_rank()
    result = fn(rank, world_size, *args, **kwargs)
    # communication: every rank gets every rank's (pickled, CPU-only) result
    blobs: list[Any] = [None] * world_size
    dist.all_gather_object(blobs, worker.dumps_result(result, rank))
    return [pickle.loads(blob) for blob in blobs]


def _leave_group_at_exit() -> None:
    if dist.is_initialized():
        # communication: wait until every rank is done before rank 0's store goes away
        dist.barrier()
        dist.destroy_process_group()
