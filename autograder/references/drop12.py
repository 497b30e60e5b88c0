"""References for drop 12 (a 35% pipeline bubble, and the micro-batch count is stuck).

The story and its scenario (`SCENARIO`, `CURRENT`, `MICRO_BATCH`, `BUBBLE_TARGET`) are the
package's `threeaxes.scenarios.drop12`. `autograder.references.sizing.grade_configuration` judges
a student's configuration against `SCENARIO` (feasibility, then closeness to the search's best,
computed at grading time); `target_mistake` adds this drop's two rules: the micro-batch stays
one sequence and the bubble falls under `BUBBLE_TARGET`.

The exercise graded by value:

* `bubble(p, m, v)`: the share of a step each GPU idles under Megatron-LM's
  1F1B (v = 1) or its interleaved 1F1B with v chunks per GPU, ValueError where
  Megatron's interleaved schedule refuses to run (m not a multiple of p;
  Narayanan et al. 2021, Section 2.2.2). PyTorch's ScheduleInterleaved1F1B
  relaxes that rule (the drop shows it), but the exercise asks about the
  team's framework, so following PyTorch's rule there is a named mistake. `bubble_mistake` names the
  usual slips: Megatron's overhead (p - 1)/m instead of a share of the step,
  v forgotten, the busy share instead of the idle one. The hidden test asks about
  (p, m, v) it draws at grading time (`draw_bubble_case`, `draw_bad_interleave_case`,
  `draw_relaxed_only_case`).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any  # Any: a student's answer

from threeaxes.cost import bubble_fraction, plan
from threeaxes.grading import as_number
from threeaxes.grading.drop12 import REFUSED, names_the_rule, value_or_refusal  # noqa: F401
from threeaxes.scenarios.drop12 import BUBBLE_TARGET, CURRENT, MICRO_BATCH, SCENARIO

__all__ = ["LEVERS", "lever_bubbles", "SCENARIO", "CURRENT", "MICRO_BATCH", "BUBBLE_TARGET", "draw_bubble_case",
           "draw_bad_interleave_case", "draw_relaxed_only_case", "reference_bubble", "bubble_outcome",
           "plain_bubble", "bubble_mistake", "raises_for_bad_interleave", "target_mistake"]


# The two levers the core's first exercise names: fewer stages (dp kept, so m = 13) and fewer
# replicas (m = 26); the freed GPUs go to tp = 8, a whole node, in both.
LEVERS = {"fewer_stages": dict(dp=4, tp=8, pp=4), "fewer_replicas": dict(dp=2, tp=8, pp=8)}


def lever_bubbles() -> dict:
    """The planner's 1F1B bubble, as a share of the step, of each lever's layout."""
    out = {}
    for name, shape in LEVERS.items():
        layout: dict[str, Any] = {**CURRENT, **shape}
        result = plan(SCENARIO["model"], SCENARIO["cluster"], SCENARIO["global_batch"], SCENARIO["seq_len"],
                      **layout, **SCENARIO["assumptions"])
        out[name] = result.bubble_fraction
    return out


def draw_bubble_case(rng: random.Random, interleaved: bool) -> tuple:
    """A (p, m, v) that 1F1B can run, drawn from `rng` (a `random.Random`) at grading
    time: plain (v = 1), or interleaved with 2 to 4 chunks per GPU and m a multiple of p."""
    p = rng.randint(2, 16)
    v = rng.randint(2, 4) if interleaved else 1
    m = rng.randint(1, 64) if v == 1 else p * rng.randint(1, 6)
    return p, m, v


def draw_bad_interleave_case(rng: random.Random) -> tuple:
    """A (p, m, v) with v > 1 and m not a multiple of p: Megatron's interleaved schedule cannot run."""
    p, v = rng.randint(2, 16), rng.randint(2, 4)
    return p, p * rng.randint(0, 5) + rng.randint(1, p - 1), v


def draw_relaxed_only_case(rng: random.Random) -> tuple:
    """A (p, m, v) that Megatron's interleaved schedule refuses and PyTorch's
    `ScheduleInterleaved1F1B` runs: v > 1, m not a multiple of p, and m a
    multiple of its max(1, m // p) rounds (PyTorch's rule)."""
    while True:
        p, v, m = rng.randint(2, 16), rng.randint(2, 4), rng.randint(1, 64)
        if m % p and m % max(1, m // p) == 0:
            return p, m, v


def reference_bubble(p: int, m: int, v: int = 1) -> float:
    """The cost model's idle share of the step (ValueError when it cannot run)."""
    return bubble_fraction(p, m, schedule="1f1b", virtual_stages=v)


def bubble_outcome(p: int, m: int, v: int = 1) -> float | str:
    """The visible check's right value: the idle share, or `REFUSED` where Megatron's
    interleaved schedule cannot run (what `value_or_refusal` makes of a right answer)."""
    return REFUSED if v > 1 and m % p else reference_bubble(p, m, v)


def plain_bubble(answer: Any, name: str = "bubble(...)") -> float:
    return as_number(answer, name)


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def bubble_mistake(got: float, p: int, m: int, v: int = 1) -> str | None:
    """None when `got` is the idle share of the step; otherwise a message naming the mistake."""
    want = reference_bubble(p, m, v)
    if _near(got, want):
        return None
    where = f"bubble({p}, {m}, {v}) = {got:.4g}"
    if _near(got, (p - 1) / (v * m)):
        return (f"{where}: that is (p - 1)/(v m), Megatron's bubble overhead: idle time divided "
                "by the useful time. Asked is the share of the whole step, idle time divided by "
                "useful plus idle time")
    if v > 1 and _near(got, (p - 1) / (m + p - 1)):
        return (f"{where}: you left out v. With v chunks per GPU each hop of the fill and drain "
                "lasts 1/v as long, so the idle time is (p - 1)/v of a micro-batch's work")
    if _near(got, 1 - want):
        return f"{where}: that is the share of the step each GPU is busy, not idle"
    if _near(got, 100 * want):
        return f"{where}: give a fraction between 0 and 1, not a percentage"
    return f"{where}, expected {want:.4g}: idle time over the step's wall time"


def raises_for_bad_interleave(student_bubble: Callable[[int, int, int], object], p: int, m: int, v: int) -> str | None:
    """None when the student's function refuses an interleaved plan Megatron cannot run."""
    try:
        got = student_bubble(p, m, v)
    except ValueError as error:
        message = str(error).strip()
        if message and names_the_rule(message):
            return None
        if message:
            return (f"bubble({p}, {m}, {v}) raised ValueError({message!r}), whose message does not "
                    f"name the rule; say it: Megatron's interleaved schedule needs m to be a multiple of p")
        return (f"bubble({p}, {m}, {v}) raised a bare ValueError; say why in its message: "
                f"Megatron's interleaved schedule needs m to be a multiple of p")
    return (f"bubble({p}, {m}, {v}) returned {got!r}, but Megatron's interleaved schedule, the "
            f"team's, cannot run there: it sends micro-batches round the pipeline in groups of "
            f"p={p}, so it needs m to be a multiple of p and {m} is not (PyTorch's schedule relaxes "
            f"that rule; the exercise asks about Megatron's). Raise ValueError saying so")


def target_mistake(answer: dict, scenario: dict = SCENARIO, target: float = BUBBLE_TARGET,
                   micro_batch: int = MICRO_BATCH) -> str | None:
    """None when the plain configuration keeps the micro-batch, fits and meets the
    bubble target; otherwise everything that is wrong, in the scenario's terms, the most
    important first: the micro-batch (which sets m with dp), then memory, then the bubble.
    A configuration that breaks a rule raises ValueError from `plan`, naming every broken rule."""
    result = plan(scenario["model"], scenario["cluster"], scenario["global_batch"],
                  scenario.get("seq_len"), **answer, **scenario.get("assumptions", {}))
    batch, dp, b = scenario["global_batch"], result.dp, result.micro_batch
    wrong = []
    if b != micro_batch:
        wrong.append(f"your micro-batch holds {b} sequences; the scenario keeps it at "
                     f"{micro_batch} (micro_batch={micro_batch}), so that m = global batch / dp, "
                     f"here {batch} / {dp} = {batch // dp}")
    if not result.fits:
        wrong.append(f"{result.label} needs {result.memory.total / 1e9:.1f} GB per GPU and a GPU "
                     f"holds {result.capacity / 1e9:.1f} GB: a layout that does not fit meets no target")
    elif not result.bubble_fraction < target:
        wrong.append(f"{result.label}: m = {batch} / (dp={dp} x micro_batch={b}) = "
                     f"{result.micro_batches} micro-batches on p={result.pp} stages, "
                     f"v={result.virtual_stages}, idles {result.bubble_fraction:.1%} of the step, "
                     f"not under the {target:.0%} target")
    return "; and ".join(wrong) or None
