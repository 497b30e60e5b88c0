"""A unit-cost simulation of pipeline schedules, for timelines and checks.

Each stage runs its own ordered list of (kind, microbatch, chunk) actions; an
action starts when its stage is free and its input has arrived (the forward
of the previous virtual stage, or the backward of the next one). Sends take
no time. The orders follow the published schedules:

- GPipe (Huang et al. 2019): all forwards, then all backwards.
- 1F1B (PipeDream-Flush; Narayanan et al. 2021 Section 2.2.1): stage r runs
  p - r - 1 warm-up forwards, then alternates one forward and one backward,
  then drains the remaining backwards.
- Interleaved 1F1B (Section 2.2.2): v model chunks per stage, virtual stage
  c*p + r on GPU r, in Megatron-LM's order (warm-up (p - r - 1)*2 + (v - 1)*p).

The colleague's ``threeaxes.pipeline.schedules`` builds the plans the course
executes; this module exists so the calculators can draw any schedule, the
interleaved one included, and so the bubble formulas are checked against an
independent code path.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Event", "Timeline", "schedule_orders", "simulate_schedule"]


class Event(NamedTuple):
    stage: int        # GPU rank in the pipeline
    kind: str         # "F" or "B"
    microbatch: int
    chunk: int        # model chunk on this GPU (0 unless interleaved)
    start: float
    end: float

    def __str__(self) -> str:   # 2F0 = stage 2, forward, microbatch 0
        return f"{self.stage}{self.kind}{self.microbatch}"


class Timeline(NamedTuple):
    events: tuple            # every Event, in start order per stage
    makespan: float
    busy: tuple              # busy time per stage
    idle_fraction: float     # mean idle share of the makespan over stages


def schedule_orders(pp: int, micro_batches: int, schedule: str = "1f1b",
                    virtual_stages: int = 1):
    """Per stage, the ordered list of (kind, microbatch, chunk) it runs."""
    p, m, v = pp, micro_batches, virtual_stages
    if schedule == "gpipe":
        return [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
                for _ in range(p)]
    if schedule == "1f1b" and v == 1:
        orders = []
        for r in range(p):
            warmup = min(p - r - 1, m)
            order = [("F", i, 0) for i in range(warmup)]
            for i in range(m - warmup):          # steady state: one F, one B
                order += [("F", warmup + i, 0), ("B", i, 0)]
            order += [("B", i, 0) for i in range(m - warmup, m)]   # cool-down
            orders.append(order)
        return orders
    if m % p:
        raise ValueError(f"micro_batches={m} is not a multiple of pp={p}; "
                         "the interleaved schedule needs m divisible by p")
    total = m * v

    def unit(k: int, forward: bool):
        group = k % (p * v)
        chunk = group // p
        if not forward:
            chunk = v - 1 - chunk
        return chunk, (k // (p * v)) * p + group % p

    orders = []
    for r in range(p):
        # Megatron-LM: all warm-up when m == p, else (p - r - 1)*2 + (v - 1)*p
        warmup = total if m == p else min((p - r - 1) * 2 + (v - 1) * p, total)
        order = []
        for k in range(warmup):
            c, i = unit(k, True)
            order.append(("F", i, c))
        for k in range(total - warmup):
            c, i = unit(warmup + k, True)
            order.append(("F", i, c))
            c, i = unit(k, False)
            order.append(("B", i, c))
        for k in range(total - warmup, total):
            c, i = unit(k, False)
            order.append(("B", i, c))
        orders.append(order)
    return orders


def simulate_schedule(pp: int, micro_batches: int, schedule: str = "1f1b",
                      virtual_stages: int = 1, *, forward_cost: float = 1.0,
                      backward_cost: float = 2.0) -> Timeline:
    """Run the schedule with fixed costs and return every timed event.

    A chunk's forward costs ``forward_cost / v`` and its backward
    ``backward_cost / v``, so the work per micro-batch per GPU is the same for
    every v. The idle fraction is averaged over stages.
    """
    p, m = int(pp), int(micro_batches)
    v = int(virtual_stages) if schedule != "gpipe" else 1
    if schedule == "interleaved":
        schedule = "1f1b"
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"pp={pp}, micro_batches={micro_batches} and "
                         f"virtual_stages={virtual_stages} must be >= 1")
    orders = schedule_orders(p, m, schedule, v)
    f_cost, b_cost = forward_cost / v, backward_cost / v
    n_virtual = p * v
    done = {}                     # (kind, microbatch, virtual stage) -> end time
    free = [0.0] * p
    cursor = [0] * p
    events = [[] for _ in range(p)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while cursor[r] < len(orders[r]):
                kind, i, c = orders[r][cursor[r]]
                vs = c * p + r    # virtual stage
                if kind == "F":
                    dep = ("F", i, vs - 1) if vs > 0 else None
                else:
                    dep = ("B", i, vs + 1) if vs < n_virtual - 1 else ("F", i, vs)
                if dep is not None and dep not in done:
                    break          # input not ready: wait for another stage
                start = max(free[r], done[dep] if dep is not None else 0.0)
                end = start + (f_cost if kind == "F" else b_cost)
                done[(kind, i, vs)] = end
                free[r] = end
                events[r].append(Event(r, kind, i, c, start, end))
                cursor[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocked: an action waits on one that "
                               "never runs (check the per-stage orders)")
    makespan = max(free)
    busy = tuple(sum(e.end - e.start for e in ev) for ev in events)
    idle = sum(1 - b / makespan for b in busy) / p
    flat = tuple(e for ev in events for e in ev)
    return Timeline(flat, makespan, busy, idle)
