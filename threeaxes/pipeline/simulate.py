"""Timing a pipeline plan: the dependency rules, a simulator, and a text timeline."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..trace import COMPUTE, Event

# schedules' Action and Plan: schedules imports this module, so their names cannot come here
_Action = Any
_Plan = Any

# a duration: a number of seconds, or an exact Fraction of unit costs
Cost = float | Fraction

__all__ = ["Simulation", "simulate", "peak_in_flight", "dependencies", "provides", "format_timeline"]

# an Action's kind -> the trace Event's op
OPS = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight"}


@dataclass(frozen=True)
class Simulation:
    events: dict          # rank -> list[trace.Event], in the order the rank ran them
    makespan: float       # end of the last action
    busy: float           # total time ranks spent computing
    idle_fraction: float  # idle time over (ranks * makespan); a Fraction for exact costs

    @property
    def bubble_overhead(self) -> float:
        """Idle time over busy time: the ratio Megatron's (p-1)/(v m) counts."""
        return self.idle_fraction / (1 - self.idle_fraction)


def dependencies(action: _Action, n_stages: int) -> list[tuple[int, int, str]]:
    """The (stage, microbatch, kind) keys that must finish before `action` starts.

    (s, k, "I") stands for "stage s has the gradient of its input for
    microbatch k", which a B or an I of (s, k) provides (`provides`)."""
    s, k = action.stage, action.microbatch
    if action.kind == "F":
        return [(s - 1, k, "F")] if s > 0 else []
    if action.kind == "W":
        return [(s, k, "I")]
    deps = [(s, k, "F")]
    if s < n_stages - 1:
        deps.append((s + 1, k, "I"))
    return deps


def provides(action: _Action) -> list[tuple[int, int, str]]:
    """The keys other actions may wait on that `action` makes available: its
    own, and for a B also (s, k, "I"), since a full backward computes the
    input gradient too."""
    key = _key(action)
    return [key, (action.stage, action.microbatch, "I")] if action.kind == "B" else [key]


def _key(action: _Action) -> tuple[int, int, str]:
    return (action.stage, action.microbatch, action.kind)


def timings(orders: Mapping[int, Sequence], cost: Callable[[_Action], Cost]) -> dict:
    """Earliest start and end of every action, each rank keeping its order.

    `orders` maps rank -> actions (None entries are skipped: an idle slot is
    not work). `cost(action)` gives its duration. Returns {key: (rank, start,
    end)} in completion order. Raises ValueError, naming the stuck ranks, when
    the orders wait on each other in a cycle (a plan that would deadlock).
    """
    orders = {r: [a for a in acts if a is not None] for r, acts in orders.items()}
    n_stages = 1 + max((a.stage for acts in orders.values() for a in acts), default=-1)
    done: dict = {}
    pos = {r: 0 for r in orders}
    free = {r: 0 for r in orders}
    remaining = sum(len(a) for a in orders.values())
    while remaining:
        progressed = False
        for r, acts in orders.items():
            while pos[r] < len(acts):
                action = acts[pos[r]]
                deps = dependencies(action, n_stages)
                if any(d not in done for d in deps):
                    break
                start = max([free[r]] + [done[d][2] for d in deps])
                end = start + cost(action)
                for key in provides(action):
                    done[key] = (r, start, end)
                free[r], pos[r] = end, pos[r] + 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: str(acts[pos[r]]) for r, acts in orders.items() if pos[r] < len(acts)}
            raise ValueError(
                f"the plan deadlocks: each rank's next action waits on another stuck rank "
                f"({', '.join(f'rank {r} at {a}' for r, a in stuck.items())}); reorder so that "
                f"every F(s,k) comes after F(s-1,k) and every B(s,k) after B(s+1,k) can run")
    # a B's extra (s, k, "I") entry is bookkeeping, not an action: keep one entry per action
    return {key: when for key, when in done.items()
            if key[2] != "I" or (key[0], key[1], "B") not in done}


def simulate(plan: _Plan, forward_cost: Cost = 1, backward_cost: Cost = 2,
             weight_cost: Cost | None = None) -> Simulation:
    """Run `plan` in simulated time: each action starts as soon as its rank is
    free and its dependencies are done. Costs given as ints or Fractions give
    an exact Fraction `idle_fraction`.

    A zero-bubble plan's split backward costs `backward_cost` in all: its W
    (weight gradient) `weight_cost`, half of it unless given (Qi et al. 2024
    take T_F = T_B = T_W, the input and the weight gradient each about one
    forward's matmuls), and its I (input gradient) the rest.

    With forward_cost=1 and backward_cost=2 (a backward does twice a forward's
    matmuls), GPipe and 1F1B both give (p-1)/(m+p-1) (Narayanan et al. 2021,
    Section 2.2: bubble time (p-1)(t_f+t_b) against m(t_f+t_b) of work).

    Each action becomes a `trace.Event(rank, "compute", "forward"|"backward",
    start, end, module="stage s", stage=s, microbatch=k)`.

    The rules every plan must respect (s is a stage, k a microbatch, S the number
    of stages):

        F(s, k) waits for F(s-1, k)      the activation comes from the previous stage
        B(s, k) waits for F(s, k)        backward needs this stage's own forward
        B(s, k) waits for B(s+1, k)      the gradient comes from the next stage

    and every rank runs its own actions one at a time, in the plan's order.
    Zero-bubble schedules (Qi et al. 2024, Section 2) split a backward in two:
    I(s, k), the gradient of the stage's input, which the previous stage waits
    for, and W(s, k), the gradient of its weights, which nothing waits for. I
    waits as B does (for F(s, k) and for the next stage's input gradient), W
    waits for I(s, k); a B hands the previous stage its input gradient just as an
    I does.
    Communication is free here; the simulator measures only how the order of
    work leaves ranks idle, which is what the bubble formula counts.

    This module works on anything with `.stage`, `.microbatch` and `.kind`, so
    it does not import the `Plan` class (schedules.py imports it instead).

    A simulation's events are the package's one `threeaxes.trace.Event`, in
    simulated time units, so `plots.gantt` draws a predicted timeline exactly as
    it draws one measured on real ranks.
    """
    w = weight_cost
    if w is None:                                    # half a backward; exact costs stay exact
        exact_b = isinstance(backward_cost, (int, Fraction))
        w = Fraction(backward_cost) / 2 if exact_b else backward_cost / 2
        if isinstance(w, Fraction) and w.denominator == 1:   # exact_b
            w = int(w)
    costs = {"F": forward_cost, "B": backward_cost, "I": backward_cost - w, "W": w}

    def cost(a: _Action) -> Cost:
        return costs[a.kind]

    done = timings({r: plan[r] for r in plan}, cost)
    events: dict[int, list[Event]] = {r: [] for r in plan}
    for (stage, mb, kind), (r, start, end) in sorted(done.items(), key=lambda kv: kv[1][1]):
        events[r].append(Event(r, COMPUTE, OPS[kind], start, end, module=f"stage {stage}",
                               stage=stage, microbatch=mb))
    makespan = max((e.end for evs in events.values() for e in evs), default=0)
    busy = sum(e.end - e.start for evs in events.values() for e in evs)
    total = len(events) * makespan
    exact = all(isinstance(c, (int, Fraction)) for c in costs.values())
    idle = (Fraction(total - busy) / total if exact else (total - busy) / total) if total else 0
    return Simulation(events, makespan, busy, idle)


def peak_in_flight(plan: _Plan, stage: int) -> int:
    """Most microbatches whose activations `stage` holds at once: a forward
    stores them, the matching backward frees them (with a split backward, the
    W: the weight gradient still needs the stage's saved inputs)."""
    held = peak = 0
    for action in plan.actions(stage % plan.p):
        if action.stage != stage or action.kind == "I":
            continue
        held += 1 if action.kind == "F" else -1
        peak = max(peak, held)
    return peak


def format_timeline(events: Mapping[int, Sequence[Event]], width: int = 72) -> str:
    """A text timeline of per-rank events: one row per rank, time left to right,
    F or B (the op's first letter) where the rank computes, '.' where it waits.
    Only compute events are drawn (`plots.gantt` draws communication too).
    Real (wall-clock) events are shifted so the earliest start is 0."""
    events = {r: [e for e in evs if e.kind == COMPUTE] for r, evs in events.items()}
    flat = [e for evs in events.values() for e in evs]
    if not flat:
        return "(no events)"
    t0 = min(e.start for e in flat)
    span = max(e.end for e in flat) - t0 or 1
    rows = []
    for r in sorted(events):
        cells, taken = ["."] * width, 0
        for e in sorted(events[r], key=lambda e: e.start):
            # every event gets at least one cell, after the previous one's
            a = min(max(int((e.start - t0) / span * width), taken), width - 1)
            b = max(a + 1, int(round((e.end - t0) / span * width)))
            for i in range(a, min(b, width)):
                cells[i] = e.op[0].upper()
            taken = b
        rows.append(f"rank {r} |{''.join(cells)}|")
    return "\n".join(rows)
