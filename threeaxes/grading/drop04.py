"""Reference checks for drop 4 (pipeline parallelism).

`check_stage_split` runs on fresh ranks through `threeaxes.grading.check_on_ranks`::

    check_on_ranks(drop04.check_stage_split, 4, stage_layers)

It cuts the toy model with the student's boundaries, trains one step with
the course's pipeline trainer (`threeaxes.train.pipeline_train`, which builds
the layout `ParallelDims.init(pp=world_size)` on every rank), and compares
every parameter with one process; only plain values come back:
{"ok": bool, "message": str, "max_abs_diff": float}.

The pure answers (a bubble fraction, a count of microbatches) are compared
with `expected_bubble_fraction` and `expected_stage0_held`, written from the
formulas, and with what the plans themselves count.
"""
from __future__ import annotations

from fractions import Fraction

import torch

from threeaxes.grading import as_int
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, train_steps

CHECK_CONFIG = ToyConfig(dtype=torch.float64, seq_len=8)
BATCH, MICROBATCHES = 8, 4
_TOL = 1e-10

__all__ = ["CHECK_CONFIG", "plain_stage_layers", "check_stage_split",
           "expected_stage_layers", "expected_bubble_fraction", "expected_stage0_held",
           "stage_layers_mistake", "bubble_mistake", "stage0_held_mistake"]


def expected_stage_layers(n_layers: int, pp: int) -> list[list[int]]:
    """Contiguous, equal stages: stage s holds layers s*k .. s*k+k-1, k = n_layers/pp."""
    k = n_layers // pp
    return [list(range(s * k, (s + 1) * k)) for s in range(pp)]


def expected_bubble_fraction(pp: int, m: int) -> Fraction:
    """GPipe and 1F1B: idle over the whole step, (p-1)/(m+p-1) (Huang et al. 2019)."""
    return Fraction(pp - 1, m + pp - 1)


def expected_stage0_held(schedule: str, pp: int, m: int) -> int:
    """Microbatch activations stage 0 holds at its peak: all m under GPipe; under
    1F1B its p-1 warmup forwards and one more, never more than m."""
    return m if schedule == "gpipe" else min(pp, m)


def plain_stage_layers(answer, name: str = "stage_layers(...)") -> list[list[int]]:
    """A student's boundaries as a plain list of lists of ints, or AssertionError."""
    if type(answer) not in (list, tuple):
        raise AssertionError(f"{name} should return a list of lists of layer indices, "
                             f"got {type(answer).__name__}")
    stages = []
    for s, stage in enumerate(answer):
        if type(stage) not in (list, tuple, range):
            raise AssertionError(f"{name}[{s}] should be a list of ints, got {type(stage).__name__}")
        stages.append([as_int(i, f"{name}[{s}] entry") for i in stage])
    return stages


def check_stage_split(rank, world_size, student_fn):
    """Do `student_fn(n_layers, pp)`'s stages, run as a pipeline on world_size
    ranks, train exactly like one process?"""
    cfg, pp = CHECK_CONFIG, world_size
    try:
        stages = plain_stage_layers(student_fn(cfg.n_layers, pp))
    except AssertionError as exc:
        return {"ok": False, "max_abs_diff": float("inf"), "message": str(exc)}
    except Exception as exc:  # the student's code; report it, do not crash the rank
        return {"ok": False, "max_abs_diff": float("inf"),
                "message": f"stage_layers({cfg.n_layers}, {pp}) raised {type(exc).__name__}: {exc}"}
    flat = sorted(i for s in stages for i in s)
    if len(stages) != pp or flat != list(range(cfg.n_layers)):
        missing = sorted(set(range(cfg.n_layers)) - set(flat))
        extra = sorted(i for i in set(flat) if flat.count(i) > 1 or not 0 <= i < cfg.n_layers)
        return {"ok": False, "max_abs_diff": float("inf"),
                "message": f"stage_layers({cfg.n_layers}, {pp}) = {stages}: want {pp} stages that "
                           f"hold every layer 0..{cfg.n_layers - 1} exactly once"
                           + (f"; layers {missing} are on no stage" if missing else "")
                           + (f"; layers {extra} are repeated or do not exist" if extra else "")}

    # the course's trainer, imported here in the worker, never the notebook's copy
    from threeaxes.train import pipeline_train

    batches = [make_batch(cfg, BATCH, seed=7)]
    try:
        ours = pipeline_train(rank, world_size, cfg, batches, schedule="1f1b",
                              m=MICROBATCHES, stage_layers=stages)
    except ValueError as exc:  # boundaries out of order: every rank raises the same
        return {"ok": False, "max_abs_diff": float("inf"), "message": f"rank {rank}: {exc}"}
    single = ToyTransformer(cfg, seed=0)
    train_steps(single, batches)
    reference = {name: value.detach() for name, value in single.named_parameters()}
    diff = max(float((value - reference[name]).abs().max()) for name, value in ours["params"].items())
    stage = ours["coords"]["pp"]
    if diff <= _TOL:
        return {"ok": True, "max_abs_diff": diff,
                "message": f"rank {rank} holds layers {stages[stage]}: matches one process "
                           f"(max abs diff {diff:.1e})"}
    return {"ok": False, "max_abs_diff": diff,
            "message": f"rank {rank}: parameters differ from one process by {diff:.3g}"}


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
