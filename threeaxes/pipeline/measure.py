"""Measuring a real pipeline step: its bubble from the trace, its activation
memory from autograd.

    runs = launch(measure_pipeline, 4, cfg, [("1f1b", 8, 1)], batch=8)
    bubble = measured_bubble(runs[0][("1f1b", 8, 1)]["trace"] merged over ranks)

Two measurements, each set beside what the plan predicts:

* **Time.** `run_plan` records a compute span for every forward and backward
  of every stage and microbatch. `measured_bubble` turns those spans into the
  share of the step each rank sat idle (definition in its docstring), which the
  formula (p - 1)/(v m + p - 1) predicts (`threeaxes.cost.bubble`).
* **Activation memory.** `SavedActivations` counts, with PyTorch's
  `torch.autograd.graph.saved_tensors_hooks`, the bytes autograd keeps for the
  backward pass, live, and their peak over the step. The plan predicts the
  peak: in-flight microbatches times one microbatch's saved bytes
  (`predicted_peak_bytes`; `threeaxes.cost.activations.in_flight_micro_batches`).

**The delay, a teaching device.** The toy stages take well under a
millisecond, and 4 ranks share 2 CPU cores, so their real compute time is
mostly process scheduling: a measured timeline would show noise, not the
schedule. `DelayedStage` wraps a stage so that each forward lasts a fixed
`forward_s` seconds and each backward `backward_s`: it sleeps for whatever
the stage's own compute left of that time. It changes no number the stage
computes. Sleeping stands in for a GPU kernel: the host waits while the device
works, and the CPU stays free for the other ranks, so four "busy" ranks fit
on two cores. With these durations well above the real compute and the
send/recv latency, every stage costs the same known time, which is what the
bubble formula assumes.
"""
from __future__ import annotations

import time
import weakref
from collections import Counter
from typing import NamedTuple

import torch
import torch.nn as nn

from .. import trace
from ..toy import ToyConfig, lm_loss, make_batch
from .executor import run_plan, split_microbatches
from .schedules import Plan, make_plan
from .stages import build_stages

__all__ = ["BUSY_SHARE_TOLERANCE", "bubble_bounds", "DelayedStage", "SavedActivations", "BubbleMeasurement", "measured_bubble",
           "predicted_peak_bytes", "one_microbatch_saved_bytes", "measure_pipeline",
           "measured_beside_predicted"]


# How far a measured bubble may sit from the formula. The formula is the ideal:
# stages of exactly equal duration, and a message arriving the instant it is
# sent. A real step can only lose time against it, on every action of its
# critical path: the send/recv from one rank to the next (0.1 ms on an idle
# machine, several ms when the receiving process waits for a core), a sleep
# waking late, the last stage's loss outside the padded time. The ranks do the
# same work in a longer step, so what shrinks is the busy share, 1 - bubble:
# a step 1 + e times the plan's gives a busy share (1 - formula)/(1 + e). The
# tolerance is therefore stated on the busy share, measured over predicted.
# Steps measured at p=4, m=8, stage forward 40 ms and backward 80 ms, ran
# 1.04-1.08 times the plan's with the 2 cores lightly loaded (load average ~3),
# 1.06-1.17 with them 4x oversubscribed by other jobs (load ~8), once 1.45.
# 0.7 admits steps up to 1/0.7 = 1.43 times the plan's; above 1 only noise in
# the spans themselves, since nothing lets a real step beat the ideal.
BUSY_SHARE_TOLERANCE = (0.7, 1.03)


def bubble_bounds(formula: float) -> tuple[float, float]:
    """The measured bubbles accepted beside `formula`: those whose busy share
    1 - bubble is between 0.7 and 1.03 times 1 - formula (BUSY_SHARE_TOLERANCE)."""
    low, high = BUSY_SHARE_TOLERANCE
    return 1 - high * (1 - formula), 1 - low * (1 - formula)


# -- the delay -------------------------------------------------------------------

def _wait_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


class _Clock:
    """When one microbatch's backward through a stage began."""
    __slots__ = ("backward_start",)


class _BackwardStarts(torch.autograd.Function):
    """Identity on the stage's output; its backward runs first in the stage's
    backward and notes the time. Saves no tensor."""

    @staticmethod
    def forward(ctx, y, clock):
        ctx.clock = clock
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.backward_start = time.perf_counter()
        return grad, None


class _BackwardEnds(torch.autograd.Function):
    """Identity on the first block's input; its backward runs once every block's
    backward has run, and waits until the backward has lasted `backward_s`."""

    @staticmethod
    def forward(ctx, x, clock, backward_s):
        ctx.clock, ctx.backward_s = clock, backward_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _wait_until(ctx.clock.backward_start + ctx.backward_s)
        return grad, None, None


def _check_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
        raise ValueError(f"{name}={value!r}; give a duration in seconds between 0 and 10 "
                         f"(e.g. 0.005 for 5 ms)")
    return float(value)


class DelayedStage(nn.Module):
    """A pipeline stage whose forward lasts at least `forward_s` seconds and
    whose backward at least `backward_s` (a teaching device, see the module
    docstring): when the stage's own compute finishes sooner, it sleeps for the
    rest. The backward is timed from the gradient reaching the stage's output
    to the gradient leaving its first block's input (the embedding's backward,
    on the first stage, comes after and is not padded).

    Everything `run_plan` reads from a stage (`cfg`, parameters, `is_first`,
    `is_last`, `layers`) is the wrapped stage's; outputs and gradients are
    exactly the wrapped stage's.
    """

    def __init__(self, stage: nn.Module, forward_s: float, backward_s: float):
        super().__init__()
        self.stage = stage
        self.forward_s = _check_seconds("forward_s", forward_s)
        self.backward_s = _check_seconds("backward_s", backward_s)
        self.cfg, self.layers = stage.cfg, stage.layers
        self.is_first, self.is_last = stage.is_first, stage.is_last
        self._clock = None
        first_block = next(iter(stage.blocks.values()))
        first_block.register_forward_pre_hook(self._mark_backward_end)

    def _mark_backward_end(self, _module, args):
        if self._clock is None:      # the wrapped stage called on its own: no delay
            return None
        return (_BackwardEnds.apply(args[0], self._clock, self.backward_s), *args[1:])

    def forward(self, x):
        start, clock = time.perf_counter(), _Clock()
        self._clock = clock          # the first block's pre-hook reads it
        try:
            y = _BackwardStarts.apply(self.stage(x), clock)
        finally:
            self._clock = None
        _wait_until(start + self.forward_s)
        return y

    def extra_repr(self):
        return (f"forward lasts >= {self.forward_s * 1e3:g} ms, "
                f"backward >= {self.backward_s * 1e3:g} ms")


# -- activation memory -------------------------------------------------------------

class _Saved:
    """What autograd stores instead of a saved tensor while `SavedActivations`
    is on; when autograd lets go of it (its backward ran), the bytes are released."""
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedActivations:
    """Count the bytes autograd saves for backward: live now (`current`) and at
    most (`peak`), while the block runs.

        with SavedActivations(exclude=model) as saved:
            loss = model(x).sum()      # saved.current grows as ops save their inputs
            loss.backward()            # ... and falls back to 0 as backward frees them
        saved.peak

    Bytes are counted by the memory they cover, not by tensor: a saved tensor
    covers the bytes of its storage from its first to its last element. A tensor
    saved twice, or several views of one memory (q, k and v reshaped, a
    transpose), count once; a microbatch that is a slice of the batch counts only
    its slice. Tensors held by the modules in `exclude` (their parameters and
    buffers, e.g. a weight a matmul saves) are weights, not activations, and are
    left out. A saved tensor counts from the moment autograd saves it until
    autograd releases it, normally when the backward that needed it has run.
    """

    def __init__(self, exclude=()):
        modules = [exclude] if isinstance(exclude, nn.Module) else list(exclude)
        self._weights = {t.untyped_storage().data_ptr() for mod in modules
                         for t in (*mod.parameters(), *mod.buffers())}
        self._live: Counter = Counter()       # (storage address, first byte, end byte) -> count
        self.current = self.peak = 0
        self._hooks = None

    def _extent(self, t: torch.Tensor):
        if t.numel() == 0 or t.layout != torch.strided:
            return None
        address = t.untyped_storage().data_ptr()
        if address in self._weights:
            return None
        size = t.element_size()
        last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return address, t.storage_offset() * size, (last + 1) * size

    def _count(self) -> int:
        """Bytes covered by the live saved tensors, overlaps counted once."""
        total, by_storage = 0, {}
        for address, lo, hi in self._live:
            by_storage.setdefault(address, []).append((lo, hi))
        for spans in by_storage.values():
            end = -1
            for lo, hi in sorted(spans):
                if hi > end:
                    total += hi - max(lo, end)
                    end = hi
        return total

    def _release(self, key):
        self._live[key] -= 1
        if not self._live[key]:
            del self._live[key]
            self.current = self._count()

    def _pack(self, t):
        key = self._extent(t)
        if key is None:
            return t
        handle = _Saved(t)
        self._live[key] += 1
        weakref.finalize(handle, self._release, key)
        self.current = self._count()
        self.peak = max(self.peak, self.current)
        return handle

    @staticmethod
    def _unpack(handle):
        return handle.tensor if isinstance(handle, _Saved) else handle

    def reset_peak(self) -> None:
        self.peak = self.current

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        return False


def one_microbatch_saved_bytes(stage: nn.Module, micro_batch: int, *, seed: int = 0) -> int:
    """Bytes `stage` saves for backward for one microbatch of `micro_batch`
    sequences, measured in this process: the forward (and, on the last stage,
    the loss) exactly as `run_plan` runs it, counted by `SavedActivations`."""
    cfg = stage.cfg
    tokens, labels = make_batch(cfg, micro_batch, seed=seed)
    if stage.is_first:
        x = tokens
    else:   # what the previous stage would send: (micro_batch, seq, d_model)
        x = torch.randn(micro_batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, requires_grad=True)
    with SavedActivations(exclude=stage) as saved:
        y = stage(x)
        if stage.is_last:
            y = lm_loss(y, labels)
        held = saved.current
        y.backward(None if stage.is_last else torch.ones_like(y))
    if saved.current:
        raise RuntimeError(f"{saved.current} saved bytes outlived the backward pass")
    return held


def predicted_peak_bytes(plan: Plan, rank: int, stage_bytes: dict) -> int:
    """Most saved bytes `rank` holds at once under `plan`: walk its actions, a
    forward of stage s adding `stage_bytes[s]` (one microbatch through s), the
    backward taking them away. With one stage per rank this is
    `peak_in_flight(plan, rank) * stage_bytes[rank]`; with several (interleaved)
    it weighs each chunk by its own bytes."""
    held = peak = 0
    for action in plan.actions(rank):
        held += stage_bytes[action.stage] if action.kind == "F" else -stage_bytes[action.stage]
        peak = max(peak, held)
    return peak


# -- time ---------------------------------------------------------------------------

class BubbleMeasurement(NamedTuple):
    start: float            # the step's first forward began (seconds, the trace's clock)
    end: float              # its last backward ended
    busy: dict              # rank -> seconds inside forward and backward spans
    idle_fraction: dict     # rank -> idle share of the step
    mean: float             # the mean over ranks: idle time of all ranks / (ranks x step)


def measured_bubble(events) -> BubbleMeasurement:
    """The bubble of one measured pipeline step, from its trace.

    The step runs from the earliest start to the latest end of any forward or
    backward span of any rank (`run_plan`'s compute spans; communication and
    other events are ignored). A rank is busy while one of its forward or
    backward spans runs and idle for the rest of the step, waiting for a
    neighbour (a recv) included. Its bubble is idle time / step time; `mean`
    averages over ranks, which equals all ranks' idle time over ranks x step
    time, the quantity `simulate(plan).idle_fraction` and (p - 1)/(v m + p - 1)
    predict. Works on simulated events too (there it equals the simulation's
    idle fraction).
    """
    if hasattr(events, "events"):        # a Trace or a Simulation
        events = events.events
    if isinstance(events, dict):
        events = [e for row in events.values() for e in row]
    spans = [e for e in events if e.kind == trace.COMPUTE and e.op in ("forward", "backward")]
    if not spans:
        raise ValueError("no forward or backward spans to measure; pass the events of a step "
                         "recorded with `trace.record()` around `run_plan`")
    start, end = min(e.start for e in spans), max(e.end for e in spans)
    if end <= start:
        raise ValueError("the spans take no time; measure a step whose forwards and backwards last")
    busy = {}
    for e in spans:
        busy[e.rank] = busy.get(e.rank, 0) + (e.end - e.start)
    idle = {r: (end - start - b) / (end - start) for r, b in sorted(busy.items())}
    return BubbleMeasurement(start, end, dict(sorted(busy.items())), idle, sum(idle.values()) / len(idle))


# -- one launch, several schedules -----------------------------------------------------

def measure_pipeline(rank: int, world_size: int, cfg: ToyConfig, runs, *, batch: int,
                     layer_forward_s: float = 0.02, layer_backward_s: float = 0.04,
                     seed: int = 0) -> dict:
    """A `launch` target: one pipeline step per (schedule, m, v) in `runs`, on
    `world_size` pipeline ranks, measured.

    A stage's forward lasts `layer_forward_s` per block it holds and its
    backward `layer_backward_s` per block (`DelayedStage`), so every rank does
    the same work per microbatch whatever the schedule. Before the measured step an
    undelayed warm-up step opens the connections and warms the allocator.
    Returns {(schedule, m, v): {"trace": the measured step's Trace, "peak_bytes":
    this rank's most saved bytes during it, "stages": the stages it held}}.
    """
    from ..dims import ParallelDims

    dims = ParallelDims.init(pp=world_size)
    inputs, targets = make_batch(cfg, batch, seed=seed)
    out = {}
    for schedule, m, v in runs:
        dims.check_model(cfg, v)
        plan = make_plan(schedule, world_size, m, v)
        split_microbatches(inputs, m)    # a clear error if the batch does not split into m
        mine = [s for s in range(plan.n_stages) if s % world_size == dims.coord("pp")]
        stages = build_stages(cfg, plan.n_stages, seed=seed, ranks=mine)
        # warm-up: same plan, no delay
        run_plan(plan, stages, inputs, targets, dims)
        slow = {s: DelayedStage(mod, layer_forward_s * len(mod.layers),
                                layer_backward_s * len(mod.layers)) for s, mod in stages.items()}
        with trace.record() as recorded, SavedActivations(exclude=slow.values()) as saved:
            run_plan(plan, slow, inputs, targets, dims)
        if saved.current:
            raise RuntimeError(f"rank {rank}: {saved.current} saved bytes outlived the step")
        out[(schedule, m, v)] = {"trace": recorded, "peak_bytes": saved.peak, "stages": mine}
    return out


def measured_beside_predicted(events, plan: Plan, forward_s: float, backward_s: float, *,
                              title: str = ""):
    """One matplotlib Figure: the measured step on top (`plots.gantt` of its
    events), below it `simulate(plan)` with a stage's forward costing
    `forward_s` and its backward `backward_s`, both axes in milliseconds."""
    from matplotlib.figure import Figure

    from .. import plots
    from .simulate import simulate

    fig = Figure(figsize=(12, 4.6), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    predicted = simulate(plan, forward_s, backward_s)
    plots.gantt(events, ax=top, title=f"measured: {title}", time_unit="ms")
    plots.gantt(predicted.events, ax=bottom, title=f"predicted: {plan.name} plan simulated",
                time_unit="ms")
    span = max(top.get_xlim()[1], bottom.get_xlim()[1])
    for ax in (top, bottom):
        ax.set_xlim(0, span)
    return fig
