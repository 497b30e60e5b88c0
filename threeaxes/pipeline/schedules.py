"""Pipeline schedules as data."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from .simulate import Simulation, dependencies, peak_in_flight, provides, simulate, timings

__all__ = ["Action", "KINDS", "Plan", "gpipe", "one_f_one_b", "interleaved_1f1b",
           "interleaved_group", "SCHEDULES", "make_plan", "simulate", "peak_in_flight",
           "Simulation", "check_layout"]


KINDS = ("F", "B", "I", "W")


@dataclass(frozen=True)
class Action:
    """One unit of pipeline work: `kind` "F" (forward) or "B" (backward) of
    `microbatch` through `stage`; a zero-bubble plan splits B into "I" (the
    gradient of the stage's input) and "W" (of its weights). Prints as PyTorch
    does: 2F0."""
    stage: int
    microbatch: int
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Action kind={self.kind!r}; use 'F' (forward) or 'B' (backward), "
                             f"or 'I' and 'W' (a backward split into its input and weight "
                             f"gradients)")
        for name in ("stage", "microbatch"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"Action {name}={value!r}; it must be an int >= 0")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    __repr__ = __str__


class Plan(Mapping):
    """rank -> list of `Action | None`, one entry per time slot.

    Checked when made: ranks are 0..p-1; rank r holds stages r, r+p, ...;
    every (stage, microbatch) runs forward once and backward once (a B, or an
    I and a W); and no action sits in a slot at or before a slot of an action
    it waits for.

    A schedule is a `Plan`: for each rank, a row of time slots, each holding an
    `Action` (stage, microbatch, "F" or "B") or None, an idle slot (a bubble).
    Zero-bubble plans (Qi et al. 2024) split a backward into "I" (input gradient)
    and "W" (weight gradient); `torch_plans.py` reads PyTorch's into this form.
    The same plan object is printed as a grid (`print(plan)`), simulated with
    costs (`simulate`), counted for its bubble (`plan.bubble_fraction()`,
    `peak_in_flight`) and run for real on ranks (`executor.run_plan`), so those
    four can never disagree (PyTorch's pipelining/schedules.py keeps the same
    `rank -> [action or None]` form and the same `2F0` spelling). This module is
    the package's one definition of GPipe, 1F1B and interleaved 1F1B (Megatron's,
    and PyTorch's relaxed variant); `SCHEDULES` names them and `make_plan` builds
    one by name.

    In the grid every action takes one slot, forward or backward, and a slot
    never holds an action before the slots of what it waits for (see
    simulate.dependencies). The schedule functions only decide each rank's order
    of work; `Plan.from_orders` places that order into the earliest slots it can
    take, so the idle slots are exactly the waits the order forces.
    """

    def __init__(self, slots: Mapping, name: str = "plan") -> None:
        self.name = name
        ranks = sorted(slots)
        if not ranks or ranks != list(range(len(ranks))):
            raise ValueError(f"a plan needs ranks 0..p-1 as keys, got {ranks}")
        self.p = len(ranks)
        self._slots = {r: tuple(slots[r]) for r in ranks}
        found = [a for row in self._slots.values() for a in row if a is not None]
        for a in found:
            if not isinstance(a, Action):
                raise ValueError(f"plan entry {a!r} is not an Action or None")
        self.n_stages = 1 + max((a.stage for a in found), default=-1)
        self.m = 1 + max((a.microbatch for a in found), default=-1)
        if self.n_stages % self.p:
            raise ValueError(f"{self.n_stages} stages over p={self.p} ranks; give every rank "
                             f"the same number of stages (a multiple of {self.p})")
        self.v = self.n_stages // self.p
        self._check(found)

    def _check(self, found: list[Action]) -> None:
        where: dict[tuple[int, int, str], int] = {}   # action -> its slot
        for r, row in self._slots.items():
            for t, a in enumerate(row):
                if a is None:
                    continue
                if a.stage % self.p != r:
                    raise ValueError(f"{a} is on rank {r}, but stage {a.stage} lives on rank "
                                     f"{a.stage % self.p}; move it there")
                key = (a.stage, a.microbatch, a.kind)
                if key in where:
                    raise ValueError(f"{a} appears twice (slots {where[key]} and {t}); keep one")
                where[key] = t
        for s in range(self.n_stages):
            for k in range(self.m):
                split = [(s, k, kind) in where for kind in "IW"]
                needed = ["F"] + (["I", "W"] if any(split) else ["B"])
                if any(split) and (s, k, "B") in where:
                    raise ValueError(f"{Action(s, k, 'B')} and a split backward of the same "
                                     f"microbatch; keep either B or I and W")
                for kind in needed:
                    if (s, k, kind) not in where:
                        raise ValueError(f"{Action(s, k, kind)} is missing; every stage runs F "
                                         f"and B (or I and W) once for each of the {self.m} "
                                         f"microbatches")
        ready: dict[tuple[int, int, str], tuple[int, Action]] = {}  # what an action waits for -> (slot, provider)
        for (s, k, kind), t in where.items():
            for key in provides(Action(s, k, kind)):
                ready[key] = (t, Action(s, k, kind))
        for key, t in where.items():
            for dep in dependencies(Action(*key), self.n_stages):
                if ready[dep][0] >= t:
                    raise ValueError(
                        f"{Action(*key)} in slot {t} runs before {ready[dep][1]} (slot "
                        f"{ready[dep][0]}) that it waits for; build the plan with "
                        f"Plan.from_orders(...) to place each rank's order in valid slots")

    @classmethod
    def from_orders(cls, orders: Mapping, name: str = "plan") -> Plan:
        """Place each rank's order of actions into the earliest slots it can
        take (one slot per action), leaving None where a rank must wait."""
        done = timings(orders, lambda a: 1)
        length = max((end for _, _, end in done.values()), default=0)
        slots: dict[int, list[Action | None]] = {r: [None] * length for r in orders}
        for (stage, mb, kind), (r, start, _) in done.items():
            slots[r][start] = Action(stage, mb, kind)
        return cls(slots, name)

    # -- Mapping: rank -> list of slots -----------------------------------------
    def __getitem__(self, rank: int) -> list:
        return list(self._slots[rank])

    def __iter__(self) -> Iterator[int]:
        return iter(self._slots)

    def __len__(self) -> int:
        return self.p

    def actions(self, rank: int) -> list[Action]:
        """Rank `rank`'s work in order, without the idle slots."""
        return [a for a in self._slots[rank] if a is not None]

    @property
    def slots(self) -> dict:
        """rank -> tuple of its slots: `Plan(plan.slots, plan.name)` is the same plan (what the
        grading wire sends, threeaxes.grading.wire.data)."""
        return dict(self._slots)

    @property
    def n_slots(self) -> int:
        return max(len(row) for row in self._slots.values())

    def idle_slots(self, rank: int | None = None) -> int:
        """Idle slots in the grid (a short row counts as idle up to the longest)."""
        ranks = range(self.p) if rank is None else [rank]
        return sum(self.n_slots - len(self.actions(r)) for r in ranks)

    def bubble_fraction(self) -> Fraction:
        """Idle slots over all slots, counted from the grid."""
        return Fraction(self.idle_slots(), self.p * self.n_slots)

    def __str__(self) -> str:
        width = max(len(str(a)) for r in self for a in self.actions(r))
        head = f"{self.name}: p={self.p} m={self.m}" + (f" v={self.v}" if self.v > 1 else "")
        lines = [head + f", {self.n_slots} slots, {self.idle_slots()} idle (.)"]
        for r in self:
            row = list(self._slots[r]) + [None] * (self.n_slots - len(self._slots[r]))
            cells = (str(a) if a is not None else "." for a in row)
            lines.append(f"rank {r} | " + " ".join(c.center(width) for c in cells))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Plan {self.name} p={self.p} m={self.m} v={self.v}>"


def check_layout(p: int, m: int) -> None:
    """Errors that say what to change for an impossible (p, m)."""
    if type(p) is not int or p < 1:
        raise ValueError(f"pp={p!r}; the number of pipeline stages must be an int >= 1")
    if type(m) is not int or m < 1:
        raise ValueError(f"m={m!r}; the number of microbatches must be an int >= 1 "
                         f"(m=1 is the whole batch at once)")


def gpipe(p: int, m: int) -> Plan:
    """GPipe (Huang et al. 2019): every forward, then every backward.
    Stage 0 holds all m microbatches' activations before its first backward."""
    check_layout(p, m)
    orders = {}
    for s in range(p):
        # Forward: all m microbatches, in order
        orders[s] = [Action(s, k, "F") for k in range(m)]
        # Backward: all m microbatches, once the last stage sends gradients back
        orders[s] += [Action(s, k, "B") for k in range(m)]
    return Plan.from_orders(orders, "GPipe")


def one_f_one_b(p: int, m: int) -> Plan:
    """1F1B (PipeDream-Flush, Narayanan et al. 2021): after a short warmup each
    stage alternates one forward with one backward, so stage s never holds more
    than p - s microbatches. Same bubble as GPipe, less activation memory."""
    check_layout(p, m)
    orders = {}
    for s in range(p):
        warmup = min(p - 1 - s, m)
        # Warmup: forwards that fill the pipe below this stage
        acts = [Action(s, k, "F") for k in range(warmup)]
        # 1F1B: one forward, then the backward of the oldest microbatch held
        for k in range(m - warmup):
            acts += [Action(s, warmup + k, "F"), Action(s, k, "B")]
        # Cooldown: the backwards still owed once every forward is done
        acts += [Action(s, k, "B") for k in range(m - warmup, m)]
        orders[s] = acts
    return Plan.from_orders(orders, "1F1B")


def interleaved_group(p: int, m: int, relaxed: bool = False) -> int:
    """How many microbatches go through a chunk before the rank moves to its
    next chunk. Megatron's interleaved schedule (Narayanan et al. 2021,
    Section 2.2.2) sends them in groups of p, so it needs m to be a multiple
    of p. PyTorch's `ScheduleInterleaved1F1B` relaxes that: it runs
    rounds = max(1, m // p) rounds of m // rounds microbatches and needs only
    m % rounds == 0 (m = 13 on p = 8: one round of 13; m = 26 on p = 8: three
    rounds, 26 % 3 != 0, refused). ValueError, naming the rule, otherwise."""
    if not relaxed:
        if m % p:
            raise ValueError(f"m={m} is not a multiple of p={p}; Megatron's interleaved schedule "
                             f"sends microbatches in groups of p, so choose m in "
                             f"{{{p}, {2 * p}, {3 * p}, ...}} (or relaxed=True: PyTorch's rule)")
        return p
    rounds = max(1, m // p)
    if m % rounds:
        below = max(k for k in range(1, m) if k % max(1, k // p) == 0)
        above = min(k for k in range(m + 1, 2 * m + 1) if k % max(1, k // p) == 0)
        raise ValueError(f"m={m} on p={p}: PyTorch's interleaved schedule runs max(1, m // p) = "
                         f"{rounds} rounds of equal size and {m} does not split into {rounds}; "
                         f"the nearest m it accepts are {below} and {above}")
    return m // rounds


def interleaved_1f1b(p: int, m: int, v: int, *, relaxed: bool = False) -> Plan:
    """Interleaved 1F1B (Narayanan et al. 2021, Section 2.2.2): rank r holds
    v model chunks, stages r, r+p, ..., r+(v-1)p. Microbatches go through each
    chunk in groups (`interleaved_group`): of p in Megatron's schedule, which
    needs m to be a multiple of p; of m // max(1, m // p) with relaxed=True,
    as PyTorch's `ScheduleInterleaved1F1B` runs it (m = 13 on p = 8 works).
    The bubble overhead (idle over busy) falls to (p-1)/(v m) when m >= p."""
    check_layout(p, m)
    if type(v) is not int or v < 1:
        raise ValueError(f"v={v!r}; the number of chunks per rank must be an int >= 1")
    if v == 1:
        return one_f_one_b(p, m)
    g = interleaved_group(p, m, relaxed)
    total = m * v

    def unit(i: int, forward: bool) -> tuple[int, int]:
        group, within = divmod(i, g * v)
        chunk = within // g
        return (chunk if forward else v - 1 - chunk), group * g + within % g

    orders = {}
    for r in range(p):
        def act(i: int, kind: str) -> Action:
            chunk, mb = unit(i, kind == "F")
            return Action(chunk * p + r, mb, kind)
        if relaxed:
            # PyTorch's warmup count (_get_warmup_ops): the last rank's (v-1) groups, two more per hop
            warmup = min(total, (v - 1) * g + 2 * (p - 1 - r))
        else:
            # Megatron-LM's warmup count; with m == p every forward comes first
            warmup = total if m == p else min(total, (p - r - 1) * 2 + (v - 1) * p)
        # Warmup: forwards through this rank's chunks until the first backward can come
        acts = [act(i, "F") for i in range(warmup)]
        # 1F1B: one forward, one backward
        for i in range(total - warmup):
            acts += [act(warmup + i, "F"), act(i, "B")]
        # Cooldown: the backwards still owed
        acts += [act(i, "B") for i in range(total - warmup, total)]
        orders[r] = acts
    return Plan.from_orders(orders, "interleaved 1F1B" + (" (PyTorch's)" if relaxed else ""))


# The one name -> schedule table of the package. "interleaved" also takes v
# (chunks per rank); make_plan passes it.
SCHEDULES: dict[str, Callable[..., Plan]] = {"gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved_1f1b}


def make_plan(schedule: str, p: int, m: int, v: int = 1, *, relaxed: bool = False) -> Plan:
    """A plan by name: 'gpipe' (Huang et al. 2019), '1f1b' or 'interleaved'
    with v chunks per rank (Narayanan et al. 2021, Sections 2.2.1 and 2.2.2;
    relaxed=True: PyTorch's rule on m, see `interleaved_group`)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; choose one of {sorted(SCHEDULES)}")
    if schedule == "interleaved":
        return interleaved_1f1b(p, m, v, relaxed=relaxed)
    if v != 1:
        raise ValueError(f"v={v} chunks per rank needs schedule='interleaved' "
                         f"(or keep schedule={schedule!r} with v=1)")
    return SCHEDULES[schedule](p, m)
