"""One trace for the whole package: every compute span and every collective, per rank.

    with trace.record() as t:            # on every rank of a launched function
        with trace.span("forward", module="stage 1", stage=1, microbatch=0):
            y = stage(x)                 # a compute Event
        comms.all_reduce(grad, "dp")     # a communication Event (comms emits it)
    return t                             # travels back to the notebook by pickle"""
from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.nn as nn

__all__ = ["Event", "Trace", "record", "span", "emit", "module_spans", "layers_of", "COMPUTE", "COMM"]

COMPUTE, COMM = "compute", "comm"


@dataclass(frozen=True)
class Event:
    """One thing a rank did, from `start` to `end` (seconds on the launch's clock).

    kind "compute": `op` is the pass ("forward", "backward", "optimizer"), `module`
    what ran ("stage 1", "blocks.2", "model"), with the pipeline `stage` and
    `microbatch` when there is one.
    kind "comm": `op` is the collective ("all_reduce", "all_gather", "reduce_scatter",
    "broadcast", "send", "recv", "all_to_all"), `axis` the mesh axis it ran on (or "cp", "ep"
    on a one-axis layout, `threeaxes.extra_axes`), `group` that
    axis group's global ranks, `bytes` the size under `threeaxes.comms`'s
    convention, `peer` the other global rank of a send or recv.

        merged = Trace.merge(results)        # one Trace of every rank's events
        merged.rows()                        # plain dicts, one per event, for a table
        plots.gantt(merged.events)           # one row per rank

    The clock: `start` and `end` are `time.time()` seconds. Every process on one
    machine reads the same wall clock, so the events of all ranks of a launch sit
    on one time axis (across torchrun nodes it is each node's NTP-synced clock).
    A plan's predicted timeline (`pipeline.simulate`) uses the same Event type in
    simulated time units, so predicted and measured draw with the same function.
    """
    rank: int
    kind: str
    op: str
    start: float
    end: float
    module: str | None = None
    stage: int | None = None
    microbatch: int | None = None
    axis: str | None = None
    group: tuple[int, ...] = ()
    bytes: int = 0
    peer: int | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def label(self) -> str:
        """Short text for a Gantt box: '2F0' for a pipeline action, 'all_reduce dp' for a collective."""
        if self.kind == COMM:
            return f"{self.op} {self.axis}"
        if self.stage is not None and self.microbatch is not None:
            return f"{self.stage}{self.op[0].upper()}{self.microbatch}"
        return f"{self.op} {self.module}" if self.module else self.op

    def row(self) -> dict:
        """This event as a plain dict (tuples stay tuples): one row of a table."""
        return asdict(self)

    def __str__(self) -> str:
        where = f" group={list(self.group)} {self.bytes:,d} B" if self.kind == COMM else ""
        return f"rank {self.rank} {self.label:<18}{where} [{self.start:.6f}, {self.end:.6f})"


@dataclass
class Trace:
    """The events of one or more ranks, in the order they were recorded."""
    events: list[Event] = field(default_factory=list)

    @classmethod
    def merge(cls, traces: Iterable[Trace]) -> Trace:
        """One Trace from many (e.g. the per-rank traces a launch returns), sorted by start."""
        events = [e for t in traces for e in t.events]
        return cls(sorted(events, key=lambda e: (e.start, e.rank)))

    def select(self, *, kind: str | None = None, op: str | None = None, axis: str | None = None,
               rank: int | None = None) -> list[Event]:
        """The events that match every filter given."""
        return [e for e in self.events
                if (kind is None or e.kind == kind) and (op is None or e.op == op)
                and (axis is None or e.axis == axis) and (rank is None or e.rank == rank)]

    def comms(self, op: str | None = None, axis: str | None = None, rank: int | None = None) -> list[Event]:
        return self.select(kind=COMM, op=op, axis=axis, rank=rank)

    def compute(self, op: str | None = None, rank: int | None = None) -> list[Event]:
        return self.select(kind=COMPUTE, op=op, rank=rank)

    def count(self, op: str | None = None, axis: str | None = None, rank: int | None = None) -> int:
        """How many collectives (of `op`, on `axis`, by `rank`) the trace holds."""
        return len(self.comms(op, axis, rank))

    def total_bytes(self, op: str | None = None, axis: str | None = None, rank: int | None = None) -> int:
        return sum(e.bytes for e in self.comms(op, axis, rank))

    def ranks(self) -> list[int]:
        return sorted({e.rank for e in self.events})

    def rows(self) -> list[dict]:
        """Plain rows, start and end shifted so the earliest event starts at 0."""
        t0 = min((e.start for e in self.events), default=0.0)
        return [{**e.row(), "start": e.start - t0, "end": e.end - t0} for e in self.events]

    def __len__(self) -> int:
        return len(self.events)


_active: list[Trace] = []  # the traces being recorded in this process, innermost last


@contextlib.contextmanager
def record() -> Iterator[Trace]:
    """Record every compute span and collective of this process inside the block."""
    t = Trace()
    _active.append(t)
    try:
        yield t
    finally:
        _active.remove(t)


def recording() -> bool:
    return bool(_active)


def emit(event: Event) -> None:
    """Add `event` to every trace being recorded (nothing happens when none is)."""
    for t in _active:
        t.events.append(event)


def this_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@contextlib.contextmanager
def span(op: str, *, module: str | None = None, stage: int | None = None,
         microbatch: int | None = None) -> Iterator[None]:
    """Time the block as one compute Event (free when nothing is being recorded)."""
    if not _active:
        yield
        return
    start = time.time()
    yield
    emit(Event(this_rank(), COMPUTE, op, start, time.time(), module=module, stage=stage,
               microbatch=microbatch))


def layers_of(model: nn.Module) -> list[str]:
    """The names of a model's layers, in registration order: its direct children,
    with a ModuleList or Sequential opened one level ("blocks.0", "blocks.1", ...)."""
    import torch.nn as nn

    names: list[str] = []
    for name, child in model.named_children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            names += [f"{name}.{i}" for i in range(len(child))]
        else:
            names.append(name)
    return names


# An embedding's input (token ids) needs no gradient, so PyTorch warns that its
# full backward hook fires on the output's gradient: its backward span is then
# an instant, which is right for a layer whose backward only scatters into its weight.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")


@contextlib.contextmanager
def module_spans(model: nn.Module, names: Iterable[str] | None = None, *, stage: int | None = None,
                 microbatch: int | None = None) -> Iterator[list[str]]:
    """Record a compute Event for the forward and for the backward of each layer.

        with trace.record() as t, trace.module_spans(model):
            loss = lm_loss(model(x), y)
            loss.backward()
        # t holds "forward blocks.0" ... and "backward head", "backward ln_f", ... "backward tok_embed"

    `names` are submodule names (`model.get_submodule(name)`), by default
    `layers_of(model)`. A forward span runs from the layer's forward pre-hook to
    its forward hook; a backward span from the moment the gradient of its output
    is ready to the moment the gradients of its inputs are (full backward hooks).
    The hooks are removed when the block ends; backward must run inside it.
    """
    layer_names = layers_of(model) if names is None else list(names)
    started: dict[tuple[str, str], float] = {}
    handles: list[Any] = []

    def opener(op: str, name: str) -> Callable[..., None]:
        def hook(*_: object) -> None:
            started[op, name] = time.time()
        return hook

    def closer(op: str, name: str) -> Callable[..., None]:
        def hook(*_: object) -> None:
            if _active and (op, name) in started:
                emit(Event(this_rank(), COMPUTE, op, started.pop((op, name)), time.time(),
                           module=name, stage=stage, microbatch=microbatch))
        return hook

    for name in layer_names:
        layer = model.get_submodule(name)
        handles += [layer.register_forward_pre_hook(opener("forward", name)),
                    layer.register_forward_hook(closer("forward", name)),
                    layer.register_full_backward_pre_hook(opener("backward", name)),
                    layer.register_full_backward_hook(closer("backward", name))]
    try:
        yield layer_names
    finally:
        for handle in handles:
            handle.remove()
