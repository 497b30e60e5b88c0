"""Every collective the course runs goes through here, so it can be traced.

Each call records one `CommEvent` (op, axis, bytes, seconds) into the active
`trace()` if there is one. Later drops print these traces next to what the
cost model predicts. "bytes" is the size of the tensor handed to the call on
this rank (the payload), not what the ring algorithm puts on the wire; the
cost model converts between the two.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class CommEvent:
    op: str        # "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv"
    axis: str      # "dp", "tp", "pp" or "world"
    bytes: int     # payload on this rank
    seconds: float
    peer: int | None = None  # the other rank of a send/recv

    def __str__(self):
        peer = f" peer={self.peer}" if self.peer is not None else ""
        return f"{self.op:<14} axis={self.axis:<5} {self.bytes:>9,d} B{peer}"


@dataclass
class Trace:
    events: list[CommEvent] = field(default_factory=list)

    def total_bytes(self, op: str | None = None, axis: str | None = None) -> int:
        return sum(e.bytes for e in self.events
                   if (op is None or e.op == op) and (axis is None or e.axis == axis))

    def count(self, op: str | None = None, axis: str | None = None) -> int:
        return sum(1 for e in self.events
                   if (op is None or e.op == op) and (axis is None or e.axis == axis))


_active: list[Trace] = []


@contextlib.contextmanager
def trace():
    """Record every collective made inside the block: `with trace() as t: ...`."""
    t = Trace()
    _active.append(t)
    try:
        yield t
    finally:
        _active.remove(t)


@contextlib.contextmanager
def _timed(op: str, axis: str, tensor: torch.Tensor, peer: int | None = None):
    start = time.perf_counter()
    yield
    event = CommEvent(op, axis, tensor.numel() * tensor.element_size(),
                      time.perf_counter() - start, peer)
    for t in _active:
        t.events.append(event)


def all_reduce(tensor, *, group=None, axis="world", op=dist.ReduceOp.SUM):
    """In place: every rank of `group` ends with the sum over the group."""
    with _timed("all_reduce", axis, tensor):
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


def all_gather(tensor, *, group=None, axis="world", dim=0):
    """Concatenate every rank's `tensor` along `dim`, in group-rank order."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    with _timed("all_gather", axis, tensor):
        dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def reduce_scatter(tensor, *, group=None, axis="world", dim=0):
    """Sum over the group, then keep only this rank's 1/n slice along `dim`."""
    n = dist.get_world_size(group)
    chunks = [c.contiguous() for c in tensor.chunk(n, dim=dim)]
    out = torch.empty_like(chunks[0])
    with _timed("reduce_scatter", axis, tensor):
        if dist.get_backend(group) == "gloo":
            # gloo has no reduce_scatter: all-reduce, then keep our slice
            full = tensor.contiguous().clone()
            dist.all_reduce(full, group=group)
            out.copy_(full.chunk(n, dim=dim)[dist.get_rank(group)])
        else:
            dist.reduce_scatter(out, chunks, group=group)
    return out


def broadcast(tensor, *, src, group=None, axis="world"):
    """In place: every rank ends with `src`'s tensor (src is a global rank)."""
    with _timed("broadcast", axis, tensor):
        dist.broadcast(tensor, src=src, group=group)
    return tensor


def send(tensor, *, dst, axis="pp", tag=0):
    """Point-to-point: hand `tensor` to global rank `dst` (blocks until taken).
    A recv matches a send with the same `tag` from the same peer."""
    with _timed("send", axis, tensor, peer=dst):
        dist.send(tensor.contiguous(), dst=dst, tag=tag)


def isend(tensor, *, dst, axis="pp", tag=0):
    """Point-to-point without waiting: post the send, return its work handle.
    Call `.wait()` on it before changing `tensor`. Traced as a "send"; its
    seconds are only the time to post it."""
    tensor = tensor.contiguous()
    with _timed("send", axis, tensor, peer=dst):
        work = dist.isend(tensor, dst=dst, tag=tag)
    return work


def recv(tensor, *, src, axis="pp", tag=0):
    """Point-to-point: fill `tensor` (right shape and dtype) from global rank `src`."""
    with _timed("recv", axis, tensor, peer=src):
        dist.recv(tensor, src=src, tag=tag)
    return tensor
