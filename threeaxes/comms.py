"""Every collective the course runs goes through here, on the group of a mesh axis, traced.

    comms.all_reduce(grad, "dp")          # the group is the layout's dp group
    comms.send(x, dst=dims.next_rank, axis="pp")

Where the group comes from, and the bytes each event counts: CONTRIBUTING.md, "Collectives"."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, overload

import torch
import torch.distributed as dist

from threeaxes import trace
from threeaxes.dims import ParallelDims, check_axis, resolve
from threeaxes.extra_axes import EXTRA_AXES, AxisLayout

# what `dims=` takes: the three axes' layout, or cp's or ep's one-axis layout
Layout = ParallelDims | AxisLayout

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "isend",
           "recv", "Pending"]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@contextlib.contextmanager
def _traced(op: str, axis: str, dims: Layout, nbytes: int, peer: int | None = None) -> Iterator[None]:
    start = time.time()
    yield
    if trace.recording():
        trace.emit(trace.Event(dims._me(), trace.COMM, op, start, time.time(), axis=axis,
                               group=tuple(dims.ranks(axis)), bytes=nbytes, peer=peer))


class Pending:
    """An asynchronous collective in flight: `wait()` blocks until it is done.

    Its Event runs from the call that started it to the moment the backend
    finished it (a callback on the work's future notes the time), so a trace
    shows when the communication really happened, not when someone waited.
    The Event is emitted by `wait()`, into the traces recording at that moment.
    """

    def __init__(self, work: Any, op: str, axis: str, dims: Layout, nbytes: int, *,
                 start: float, result: torch.Tensor | None = None,
                 finish: Callable[[], torch.Tensor] | None = None) -> None:
        # `finish`, when given, runs once after the backend is done and returns the
        # result (all_gather concatenates the parts, reduce_scatter keeps its slice)
        self.work, self.result, self._finish = work, result, finish
        self._event: dict[str, Any] = dict(rank=dims.rank, kind=trace.COMM, op=op, start=start, axis=axis,
                           group=tuple(dims.ranks(axis)), bytes=nbytes)
        self._done_at: float | None = None
        self._waited = False
        work.get_future().add_done_callback(self._note_done)

    def _note_done(self, _future: object) -> None:
        self._done_at = time.time()

    def is_completed(self) -> bool:
        return bool(self.work.is_completed())

    def wait(self) -> torch.Tensor:
        """Block until the collective is done; return its tensor."""
        if not self._waited:
            self.work.wait()
            self._waited = True
            if self._finish is not None:
                self.result = self._finish()
            if trace.recording():
                trace.emit(trace.Event(end=self._done_at or time.time(), **self._event))
        assert self.result is not None   # every Pending made here has a result or a finish
        return self.result


def _layout(axis: str, dims: Layout | None) -> tuple[str, Layout]:
    if isinstance(dims, AxisLayout):   # cp or ep: the one axis it holds
        return dims.check_axis(axis), dims
    if axis in EXTRA_AXES:
        raise ValueError(f"axis={axis!r} runs on its one-axis layout; pass "
                         f"dims=threeaxes.extra_axes.axis_layout({axis!r}) (made on every rank)")
    return check_axis(axis), resolve(dims)


# the result: the tensor, or with async_op=True a Pending whose wait() gives it
@overload
def all_reduce(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, op: Any = dist.ReduceOp.SUM,
               async_op: Literal[False] = False) -> torch.Tensor: ...
@overload
def all_reduce(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, op: Any = dist.ReduceOp.SUM,
               async_op: Literal[True]) -> Pending: ...
@overload
def all_reduce(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, op: Any = dist.ReduceOp.SUM,
               async_op: bool) -> torch.Tensor | Pending: ...


def all_reduce(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, op: Any = dist.ReduceOp.SUM,
               async_op: bool = False) -> torch.Tensor | Pending:
    """In place: every rank of this rank's `axis` group ends with the sum over the group.

    With `async_op=True` it returns at once with a `Pending`; the tensor holds
    the sum only after `.wait()` (the backend works on it in the background).
    """
    axis, dims = _layout(axis, dims)
    if async_op:
        # communication: started now, finished in the background, waited on later
        start = time.time()
        work = dist.all_reduce(tensor, op=op, group=dims.group(axis), async_op=True)
        return Pending(work, "all_reduce", axis, dims, _nbytes(tensor), start=start, result=tensor)
    with _traced("all_reduce", axis, dims, _nbytes(tensor)):
        dist.all_reduce(tensor, op=op, group=dims.group(axis))
    return tensor


# the result: the tensor, or with async_op=True a Pending whose wait() gives it
@overload
def all_gather(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
               async_op: Literal[False] = False) -> torch.Tensor: ...
@overload
def all_gather(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
               async_op: Literal[True]) -> Pending: ...
@overload
def all_gather(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
               async_op: bool) -> torch.Tensor | Pending: ...


def all_gather(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
               async_op: bool = False) -> torch.Tensor | Pending:
    """Concatenate every rank's `tensor` along `dim`, in axis order.

    With `async_op=True` it returns at once with a `Pending` whose `.wait()`
    returns the concatenated tensor.
    """
    axis, dims = _layout(axis, dims)
    parts = [torch.empty_like(tensor) for _ in range(dims.size(axis))]
    nbytes = _nbytes(tensor) * len(parts)
    if async_op:
        # communication: started now, finished in the background, waited on later
        start = time.time()
        work = dist.all_gather(parts, tensor.contiguous(), group=dims.group(axis), async_op=True)
        return Pending(work, "all_gather", axis, dims, nbytes, start=start,
                       finish=lambda: torch.cat(parts, dim=dim))
    with _traced("all_gather", axis, dims, nbytes):
        dist.all_gather(parts, tensor.contiguous(), group=dims.group(axis))
    return torch.cat(parts, dim=dim)


# the result: the tensor, or with async_op=True a Pending whose wait() gives it
@overload
def reduce_scatter(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
                   async_op: Literal[False] = False) -> torch.Tensor: ...
@overload
def reduce_scatter(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
                   async_op: Literal[True]) -> Pending: ...
@overload
def reduce_scatter(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
                   async_op: bool) -> torch.Tensor | Pending: ...


def reduce_scatter(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0,
                   async_op: bool = False) -> torch.Tensor | Pending:
    """Sum over the group, then keep only this rank's 1/n slice along `dim`.

    With `async_op=True` it returns at once with a `Pending` whose `.wait()`
    returns the slice.
    """
    axis, dims = _layout(axis, dims)
    n, group = dims.size(axis), dims.group(axis)
    if tensor.shape[dim] % n:
        raise ValueError(f"reduce_scatter over {axis}={n} ranks needs dim {dim} "
                         f"({tensor.shape[dim]}) to be a multiple of {n}; pad the tensor")
    chunks = [c.contiguous() for c in tensor.chunk(n, dim=dim)]
    out = torch.empty_like(chunks[0])
    gloo = dist.get_backend(group) == "gloo"
    if async_op:
        # communication: started now, finished in the background, waited on later
        start = time.time()
        if gloo:
            # gloo has no reduce_scatter: all-reduce a copy, keep our slice when done
            full = tensor.contiguous().clone()
            work = dist.all_reduce(full, group=group, async_op=True)
            finish = lambda: out.copy_(full.chunk(n, dim=dim)[dims.coord(axis)])  # noqa: E731
        else:
            work = dist.reduce_scatter(out, chunks, group=group, async_op=True)
            finish = None
        return Pending(work, "reduce_scatter", axis, dims, _nbytes(tensor), start=start,
                       result=out, finish=finish)
    with _traced("reduce_scatter", axis, dims, _nbytes(tensor)):
        if gloo:
            # gloo has no reduce_scatter: all-reduce, then keep our slice
            full = tensor.contiguous().clone()
            dist.all_reduce(full, group=group)
            out.copy_(full.chunk(n, dim=dim)[dims.coord(axis)])
        else:
            dist.reduce_scatter(out, chunks, group=group)
    return out


def all_to_all(tensor: torch.Tensor, axis: str, *, dims: Layout | None = None, dim: int = 0) -> torch.Tensor:
    """Split `tensor` into n equal chunks along `dim`; chunk j goes to the j-th rank of the
    `axis` group, and the result concatenates, in axis order along `dim`, the chunk each rank
    sent here. (Ulysses exchanges heads for sequence with it; expert parallelism sends each
    token to its expert's rank.) Traced with bytes = the whole input (CONTRIBUTING.md, "Collectives")."""
    axis, dims = _layout(axis, dims)
    n, group = dims.size(axis), dims.group(axis)
    if tensor.shape[dim] % n:
        raise ValueError(f"all_to_all over {axis}={n} ranks needs dim {dim} "
                         f"({tensor.shape[dim]}) to be a multiple of {n}; pad the tensor")
    # all_to_all_single splits dim 0: move `dim` to the front and back again
    moved = tensor.movedim(dim, 0).contiguous()
    out = torch.empty_like(moved)
    # communication: every rank sends chunk j to rank j of the group and receives chunk i from each
    with _traced("all_to_all", axis, dims, _nbytes(tensor)):
        dist.all_to_all_single(out, moved, group=group)
    return out.movedim(0, dim).contiguous()


def _check_member(peer: int, axis: str, dims: Layout, what: str) -> None:
    members = dims.ranks(axis)
    if peer not in members:
        raise ValueError(f"{what}={peer!r} is not in this rank's {axis} group {members}; "
                         f"pass a global rank from dims.ranks({axis!r})")


def broadcast(tensor: torch.Tensor, axis: str, *, src: int, dims: Layout | None = None) -> torch.Tensor:
    """In place: every rank of the `axis` group ends with `src`'s tensor (a global rank)."""
    axis, dims = _layout(axis, dims)
    _check_member(src, axis, dims, "src")
    with _traced("broadcast", axis, dims, _nbytes(tensor)):
        dist.broadcast(tensor, src=src, group=dims.group(axis))
    return tensor


def send(tensor: torch.Tensor, *, dst: int, axis: str = "pp", dims: Layout | None = None, tag: int = 0) -> None:
    """Point-to-point: hand `tensor` to global rank `dst` of this rank's `axis` group
    (blocks until taken). A recv matches a send with the same `tag` from the same peer."""
    axis, dims = _layout(axis, dims)
    _check_member(dst, axis, dims, "dst")
    with _traced("send", axis, dims, _nbytes(tensor), peer=dst):
        dist.send(tensor.contiguous(), dst=dst, tag=tag)


def isend(tensor: torch.Tensor, *, dst: int, axis: str = "pp", dims: Layout | None = None,
          tag: int = 0) -> Any:
    """Point-to-point without waiting: post the send, return its work handle.
    Call `.wait()` on it before changing `tensor`. Traced as a "send" whose
    time is only the time to post it."""
    axis, dims = _layout(axis, dims)
    _check_member(dst, axis, dims, "dst")
    tensor = tensor.contiguous()
    with _traced("send", axis, dims, _nbytes(tensor), peer=dst):
        work = dist.isend(tensor, dst=dst, tag=tag)
    return work


def recv(tensor: torch.Tensor, *, src: int, axis: str = "pp", dims: Layout | None = None,
         tag: int = 0) -> torch.Tensor:
    """Point-to-point: fill `tensor` (right shape and dtype) from global rank `src`."""
    axis, dims = _layout(axis, dims)
    _check_member(src, axis, dims, "src")
    with _traced("recv", axis, dims, _nbytes(tensor), peer=src):
        dist.recv(tensor, src=src, tag=tag)
    return tensor
