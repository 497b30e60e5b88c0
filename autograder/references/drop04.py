"""References for drop 4 (pipeline parallelism): the instructor's side.

`stage_layers(n_layers, pp)` is judged on raw values (CONTRIBUTING.md, "Test cells run in the
grader"): `threeaxes.grading.drop04.stage_split_params` cuts the toy model with the student's
boundaries on fresh ranks, trains one pipeline step and sends back the stages and each rank's
parameters; `stage_split_mistake` compares them here with one process's step (float64, 1e-12)::

    results = check_on_ranks(drop04.stage_split_params, 4, stage_layers, 8, 2, seed)
    assert drop04.stage_split_mistake(results, 4, 8, 2, seed) is None

The pure answers (a bubble fraction, a count of microbatches) are compared with
`expected_bubble_fraction` and `expected_stage0_held`, written from the formulas and checked
against what the plans count; the visible checks' stored cases come from the `expected_*`
functions (`python -m autograder.cases drop04`).
"""
from __future__ import annotations

import random
from fractions import Fraction
from typing import Any  # what a rank sent: any value

from threeaxes.grading import same_as_reference, tensor_of
from threeaxes.grading.drop04 import (
    BATCH,
    MICROBATCHES,
    N_LAYERS,
    REFUSED,
    SEED,
    check_config,
    covers,
    plain_stage_layers,
    stage_split_params,
)
from threeaxes.toy import ToyTransformer, make_batch, train_steps

__all__ = ["check_config", "plain_stage_layers", "stage_split_params", "stage_split_mistake",
           "expected_stage_layers", "expected_stage_layers_or_refusal", "expected_bubble_fraction",
           "expected_bubble_fraction_value",
           "expected_stage0_held", "stage_layers_mistake", "bubble_mistake", "stage0_held_mistake"]


def expected_stage_layers(n_layers: int, pp: int) -> list[list[int]]:
    """Contiguous, equal stages: stage s holds layers s*k .. s*k+k-1, k = n_layers/pp."""
    k = n_layers // pp
    return [list(range(s * k, (s + 1) * k)) for s in range(pp)]


def expected_stage_layers_or_refusal(n_layers: int, pp: int) -> list[list[int]] | str:
    """What the visible check expects of stage_layers(n_layers, pp): the stages where pp
    divides n_layers, else a refusal (ValueError), as the exercise's text asks."""
    return REFUSED if n_layers % pp else expected_stage_layers(n_layers, pp)


def expected_bubble_fraction(pp: int, m: int) -> Fraction:
    """GPipe and 1F1B: idle over the whole step, (p-1)/(m+p-1) (Huang et al. 2019)."""
    return Fraction(pp - 1, m + pp - 1)


def expected_bubble_fraction_value(pp: int, m: int) -> float:
    """`expected_bubble_fraction` as the plain number the exercise returns."""
    return float(expected_bubble_fraction(pp, m))


def expected_stage0_held(schedule: str, pp: int, m: int) -> int:
    """Microbatch activations stage 0 holds at its peak: all m under GPipe; under
    1F1B its p-1 warmup forwards and one more, never more than m."""
    return m if schedule == "gpipe" else min(pp, m)


def stage_split_mistake(results: Any, pp: int, n_layers: int = N_LAYERS, m: int = MICROBATCHES,
                        seed: int = SEED) -> str | None:
    """None when the ranks' stages (from `stage_split_params`) hold every layer once
    and every parameter they trained equals one process's training of the whole
    model, computed here; else what is wrong."""
    if type(results) is not list or len(results) != pp:
        return f"expected one result from each of {pp} ranks, got {type(results).__name__}"
    for rank, r in enumerate(results):
        if type(r) is not dict or not {"error", "stages", "params"} <= set(r) \
                or type(r["params"]) is not dict:
            sent = sorted(map(str, r)) if type(r) is dict else type(r).__name__
            return (f"rank {rank} sent back {sent} instead of its parameters: the ranks did not "
                    f"run the course's check (was threeaxes changed in this notebook? restart the "
                    f"kernel and run the notebook again)")
        if r["error"]:
            return str(r["error"])
    stages = results[0]["stages"]
    if any(r["stages"] != stages for r in results):
        return f"stage_layers({n_layers}, {pp}) gave different stages on different ranks"
    if not covers(stages, n_layers, pp):
        flat = [i for s in stages for i in s]
        missing = sorted(set(range(n_layers)) - set(flat))
        extra = sorted(i for i in set(flat) if flat.count(i) > 1 or not 0 <= i < n_layers)
        return (f"stage_layers({n_layers}, {pp}) = {stages}: want {pp} stages that hold every "
                f"layer 0..{n_layers - 1} exactly once"
                + (f"; layers {missing} are on no stage" if missing else "")
                + (f"; layers {extra} are repeated or do not exist" if extra else ""))

    cfg = check_config(n_layers)
    single = ToyTransformer(cfg, seed=0)
    train_steps(single, [make_batch(cfg, BATCH, seed=seed)])
    reference = {name: value.detach() for name, value in single.named_parameters()}
    held = [name for r in results for name in r["params"]]
    if sorted(held) != sorted(reference):
        return (f"the ranks hold {len(held)} parameter tensors between them, the model has "
                f"{len(reference)}: each should live on exactly one rank")
    for rank, r in enumerate(results):
        for name, value in r["params"].items():
            want = reference[name]
            if not same_as_reference(tensor_of(value), want):
                return (f"rank {rank} (layers {stages[rank]}): {name} after one training step "
                        f"differs from one process's")
    return None


def stage_layers_mistake(got: list[list[int]], n_layers: int, pp: int) -> str | None:
    """None when `got` (plain, from plain_stage_layers) is stage_layers(n_layers, pp)."""
    want = expected_stage_layers(n_layers, pp)
    if got == want:
        return None
    call = f"stage_layers({n_layers}, {pp}) = {got}"
    k = n_layers // pp
    if got == [list(range(s * k, (s + 1) * k + 1)) for s in range(pp)]:
        return (f"{call}: each range is one layer too long, so neighbouring stages share a layer "
                f"and the last one has layer {n_layers}, which does not exist; layers 0..{n_layers - 1} "
                f"should each appear exactly once: range(s * k, (s + 1) * k) already stops "
                f"before (s + 1) * k")
    if got == [list(range(s * k + 1, (s + 1) * k)) for s in range(pp)] or \
            got == [list(range(s * k, (s + 1) * k - 1)) for s in range(pp)]:
        return (f"{call}: each range is one layer short, so some layers are on no stage; layers "
                f"0..{n_layers - 1} should each appear exactly once")
    if got == [list(range(s, n_layers, pp)) for s in range(pp)]:
        return (f"{call}: you dealt the layers out in turn (layer i to stage i % pp); a stage "
                f"holds a contiguous run of layers, so that each activation goes to the next "
                f"stage only once: stage 0 gets layers 0..{k - 1}")
    if len(got) != pp:
        return f"{call}: that is {len(got)} stages; pp={pp} stages should each get {k} layers"
    if sorted(i for stage in got for i in stage) != list(range(n_layers)):
        return f"{call}: layers 0..{n_layers - 1} should each appear exactly once"
    if [i for stage in got for i in stage] != list(range(n_layers)):
        return f"{call}: the stages should hold the layers in order, stage 0 the first {k}"
    return f"{call}: every stage should hold {k} layers"


def bubble_mistake(got: float, p: int, m: int) -> str | None:
    """None when `got` is the idle fraction of a GPipe/1F1B step, (p-1)/(m+p-1)."""
    import math

    want = float(expected_bubble_fraction(p, m))
    if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
        return None
    call = f"bubble_fraction({p}, {m}) = {got:g}"
    if p > 1 and math.isclose(got, (p - 1) / m, rel_tol=1e-9):
        return (f"{call} is (p-1)/m: idle time over the *useful* time (m slots of work). The "
                f"bubble fraction divides the idle time by the whole step, which also contains "
                f"the idle part: m + p - 1 slots")
    if math.isclose(got, 1 - want, rel_tol=1e-9):
        return f"{call} is the busy fraction, m/(m+p-1); the question asks for the idle part"
    if math.isclose(got, 100 * want, rel_tol=1e-9):
        return f"{call} is a percentage; give a fraction between 0 and 1"
    if math.isclose(got, (p - 1) / (m + p), rel_tol=1e-9):
        return (f"{call} is (p-1)/(m+p): one slot too many. A step lasts m + p - 1 slots: m of "
                f"work, and p - 1 of waiting for the pipeline to fill (and drain)")
    if p > 1 and math.isclose(got, (p - 1) / p, rel_tol=1e-9):
        return f"{call} leaves out m: more microbatches shrink the bubble"
    return (f"{call}; count the idle slots of one stage in gpipe({p}, {m}) and divide by all "
            f"the slots of the step")


def stage0_held_mistake(got: int, schedule: str, p: int, m: int) -> str | None:
    """None when `got` is the peak count of microbatches in flight on stage 0."""
    want = expected_stage0_held(schedule, p, m)
    if got == want:
        return None
    call = f"stage0_microbatches_held({schedule!r}, {p}, {m}) = {got}"
    if schedule == "gpipe":
        if got == min(p, m):
            return (f"{call}: that is 1F1B's count. GPipe runs all {m} forwards before its first "
                    f"backward, so stage 0 holds all {m}")
        return f"{call}: GPipe runs every forward before its first backward; stage 0 holds all {m}"
    if m < p and got == p:
        return (f"{call}: there are only {m} microbatches, so stage 0 cannot hold {p}; 1F1B "
                f"holds min(p, m)")
    if got == m and m > p:
        return (f"{call}: that is GPipe's count. 1F1B starts a backward after p - 1 warmup "
                f"forwards and one more, so stage 0 holds at most p = {p}")
    if got == p - 1 and m >= p:
        return (f"{call}: p - 1 is the warmup forwards alone; stage 0 runs one more forward "
                f"before its first backward comes back: p = {p}")
    return (f"{call}; count the forwards of stage 0 before its first backward in "
            f"one_f_one_b({p}, {m}) (never more than m)")


def draw_bubble_cases(rng: random.Random) -> list[tuple[int, int]]:
    """(p, m) drawn at grading, a deep pipeline with few micro-batches among them."""
    return [(rng.randint(2, 8), rng.randint(1, 32)) for _ in range(5)] + [(rng.randint(5, 8), rng.randint(1, 3))]


def draw_stage0_cases(rng: random.Random) -> list[tuple[str, int, int]]:
    """(schedule, p, m) drawn at grading: both schedules, m below and above p."""
    p = rng.randint(2, 8)
    return [(s, p, m) for s in ("gpipe", "1f1b") for m in (rng.randint(1, p), rng.randint(p + 1, 4 * p))]
