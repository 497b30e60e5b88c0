"""References for drop 7 (a pipeline measured: bubble and activation memory).

Two exercises, judged by value; every reference is computed by the cost model
(`threeaxes.cost.bubble`, `threeaxes.cost.activations`) and cross-checked with
the plan itself (`threeaxes.pipeline`: simulated idle fraction, forwards held),
never typed:

* `predict(schedule, p, m, v)` -> {"bubble": idle share of a step,
  "stage0_in_flight": microbatches whose activations stage 0 (pipeline rank 0)
  holds at its peak, in whole stages' worth: a chunk of an interleaved rank
  counts 1/v}. `expected_prediction`, `plain_prediction`, `prediction_mistake`.
* `smallest_m(p, target, v)` -> the fewest microbatches whose bubble is
  strictly below `target` (GPipe / 1F1B when v = 1, Megatron's interleaved
  1F1B with v chunks per rank otherwise, where m must be a multiple of p;
  PyTorch's ScheduleInterleaved1F1B relaxes that rule, drop 12).
  `expected_smallest_m`, `smallest_m_mistake`.

The hidden tests draw their layouts when they run (`draw_schedule_cases`,
`draw_target_cases`).

Each `*_mistake` returns None for a right answer, else a message naming the
mistake in the student's terms.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any  # a student's answer: any value

from threeaxes.cost.activations import in_flight_micro_batches
from threeaxes.cost.bubble import bubble_fraction
from threeaxes.grading import as_int, as_number
from threeaxes.pipeline import make_plan, simulate
from threeaxes.pipeline.simulate import peak_in_flight

__all__ = ["expected_prediction", "plain_prediction", "prediction_mistake", "check_predict",
           "expected_smallest_m", "smallest_m_mistake", "check_smallest_m", "draw_schedule_cases",
           "draw_target_cases", "on_a_boundary"]


def draw_schedule_cases(rng: random.Random) -> list[tuple[str, int, int, int]]:
    """(schedule, p, m, v) for the hidden test, drawn with `rng`: GPipe, 1F1B with
    fewer and with more microbatches than stages, and interleaving with m = p (every
    chunk forward first) and with m a larger multiple of p."""
    p = [rng.randint(2, 8) for _ in range(5)]
    return [("gpipe", p[0], rng.randint(1, 32), 1),
            ("1f1b", p[1], rng.randint(1, p[1] - 1), 1),
            ("1f1b", p[2], rng.randint(p[2] + 1, 32), 1),
            ("interleaved", p[3], p[3], rng.randint(2, 4)),
            ("interleaved", p[4], p[4] * rng.randint(2, 4), rng.randint(2, 4))]


def on_a_boundary(p: int, target: float, v: int = 1) -> bool:
    """True when some allowed m gives a bubble within 1e-9 of `target`: there
    "strictly below" would hinge on floating-point rounding."""
    step = 1 if v == 1 else p
    last = expected_smallest_m(p, target, v)
    return any(abs((p - 1) / (v * m + p - 1) - target) < 1e-9 for m in range(step, last + step, step))


def draw_target_cases(rng: random.Random, n: int = 6) -> list[tuple[int, float, int]]:
    """(p, target, v) for the hidden test, drawn with `rng`: half without
    interleaving, half with v = 2 to 4; no target on a boundary (`on_a_boundary`)."""
    cases: list[tuple[int, float, int]] = []
    while len(cases) < n:
        v = 1 if len(cases) < n // 2 else rng.randint(2, 4)
        p, target = rng.randint(2, 16), round(rng.uniform(0.02, 0.4), 3)
        if not on_a_boundary(p, target, v):
            cases.append((p, target, v))
    return cases


def expected_prediction(schedule: str, p: int, m: int, v: int = 1) -> dict:
    """The cost model's answer, checked against the plan it describes."""
    bubble = bubble_fraction(p, m, schedule=schedule, virtual_stages=v)
    in_flight = in_flight_micro_batches(p, m, stage=0, schedule=schedule, virtual_stages=v)
    plan = make_plan(schedule, p, m, v)
    # the plan: its simulated idle share, and rank 0's forwards held, chunk by chunk
    assert simulate(plan, Fraction(1, v), Fraction(2, v)).idle_fraction == Fraction(p - 1, v * m + p - 1)
    held = peak = 0
    for action in plan.actions(0):
        held += 1 if action.kind == "F" else -1
        peak = max(peak, held)
    assert Fraction(peak, v) == Fraction(in_flight).limit_denominator(v)
    if v == 1:
        assert peak == peak_in_flight(plan, 0)
    return {"bubble": bubble, "stage0_in_flight": float(in_flight)}


def plain_prediction(answer: Any, name: str = "predict(...)") -> dict:
    """The answer as {"bubble": float, "stage0_in_flight": float}, or an AssertionError."""
    keys = ("bubble", "stage0_in_flight")
    if type(answer) is not dict or set(answer) != set(keys):
        raise AssertionError(f"{name} should return a dict with exactly the keys {list(keys)}")
    return {k: as_number(answer[k], f"{name}[{k!r}]") for k in keys}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def prediction_mistake(got: dict, schedule: str, p: int, m: int, v: int = 1) -> str | None:
    """None when `got` (plain) is right; otherwise what was probably mistaken."""
    want = expected_prediction(schedule, p, m, v)
    where = f"{schedule}, p={p}, m={m}, v={v}"
    b, held = got["bubble"], got["stage0_in_flight"]
    if not _close(b, want["bubble"]):
        if p > 1 and _close(b, (p - 1) / (v * m)):
            return (f"{where}: bubble {b:.4g} is (p-1)/(v m), idle time over the useful time; "
                    f"the share of the step divides by the whole step, (p-1)/(v m + p - 1)")
        if v > 1 and _close(b, (p - 1) / (m + p - 1)):
            return (f"{where}: bubble {b:.4g} is plain 1F1B's; interleaving makes each hop of the "
                    f"fill and drain v times shorter: (p-1)/(v m + p - 1)")
        return f"{where}: bubble {b:.4g} is not right; count the idle slots of make_plan{(schedule, p, m, v)}"
    if not _close(held, want["stage0_in_flight"]):
        if schedule == "gpipe":
            return (f"{where}: stage 0 holds {held:g}? GPipe runs all m={m} forwards before its "
                    f"first backward, so it holds every microbatch")
        if v == 1 and _close(held, m) and m > p:
            return (f"{where}: stage 0 holds {held:g}? That is GPipe; under 1F1B stage 0 starts "
                    f"its first backward after p={p} forwards and never holds more than that")
        if v > 1 and _close(held, min(p, m)):
            return (f"{where}: stage 0 holds {held:g}? That is plain 1F1B; interleaving warms up "
                    f"with more forwards, 2(p-1) + (v-1)p + 1 chunks (all m v when m = p), "
                    f"each chunk 1/v of a stage")
        return (f"{where}: stage 0 holds {held:g}? count rank 0's forwards before each backward in "
                f"make_plan{(schedule, p, m, v)}, each chunk counting 1/v")
    return None


def expected_smallest_m(p: int, target: float, v: int = 1) -> int:
    """The fewest microbatches (a multiple of p when v > 1) whose bubble
    `bubble_fraction(p, m, ...)` is strictly below `target`, by search."""
    schedule = "1f1b" if v == 1 else "interleaved"
    step = 1 if v == 1 or p == 1 else p
    m = step
    while bubble_fraction(p, m, schedule=schedule, virtual_stages=v) >= target:
        m += step
    return m


def smallest_m_mistake(got: int, p: int, target: float, v: int = 1) -> str | None:
    want = expected_smallest_m(p, target, v)
    if got == want:
        return None
    where = f"p={p}, target {target:g}, v={v}"
    any_m = next(m for m in range(1, 10**6) if (p - 1) / (v * m) < target)   # stepping by 1
    over_m = math.ceil(any_m / p) * p if v > 1 else any_m
    if got == over_m and got != want:
        return (f"{where}: you answered {got}, from (p-1)/m, idle over useful time; the bubble is "
                f"a share of the whole step, (p-1)/(v m + p - 1), so {want} microbatches suffice")
    # two slips at once, named as the two where they can be told apart
    if v > 1 and got % p and got == any_m:
        return (f"{where}: you answered {got}, with two slips: (p-1)/(v m), idle over useful time, "
                f"where the bubble is a share of the whole step, (p-1)/(v m + p - 1); and m={got} is "
                f"not a multiple of p={p}, which Megatron's interleaved schedule needs")
    at_most_any_m = next(m for m in range(1, 10**6) if (p - 1) / (v * m + p - 1) <= target)
    if v > 1 and got % p and got == at_most_any_m and not (p - 1) / (v * got + p - 1) < target:
        return (f"{where}: you answered {got}, with two slips: its bubble equals the target, where "
                f"the exercise asks for strictly below; and m={got} is not a multiple of p={p}, "
                f"which Megatron's interleaved schedule needs")
    if v > 1 and got % p:
        return (f"{where}: m={got} is not a multiple of p={p}; Megatron's interleaved schedule, "
                f"which the exercise asks about, needs m in {{{p}, {2 * p}, ...}}")
    if v > 1 and got == expected_smallest_m(p, target, 1):
        return (f"{where}: you answered {got}, plain 1F1B's count; with v={v} chunks the bubble is "
                f"(p-1)/(v m + p - 1)")
    if got > want:
        return f"{where}: m={want} already gives a bubble below {target:g}; you answered {got}"
    return f"{where}: m={got} still leaves a bubble of at least {target:g}"


def check_smallest_m(smallest_m: Callable[[int, float, int], object], p: int, target: float, v: int = 1) -> None:
    """Raise AssertionError naming the mistake unless smallest_m(p, target, v) is right."""
    got = as_int(smallest_m(p, target, v), f"smallest_m({p}, {target}, {v})")
    mistake = smallest_m_mistake(got, p, target, v)
    assert mistake is None, mistake


def check_predict(predict: Callable[[str, int, int, int], object], schedule: str, p: int, m: int, v: int = 1) -> None:
    """Raise AssertionError naming the mistake unless predict(...) is right."""
    args = (schedule, p, m, v)
    got = plain_prediction(predict(*args), f"predict{args}")
    mistake = prediction_mistake(got, *args)
    assert mistake is None, mistake
