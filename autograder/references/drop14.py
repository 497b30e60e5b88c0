"""References for drop 14 (defend a (dp, tp, pp) tuple for a 70B model on 64 GPUs).

The story and its scenario (`SCENARIO`, `RIVALS`, `JOB_CHANGES`) are the package's
`threeaxes.scenarios.drop14`; `autograder.references.sizing.grade_configuration` judges a
configuration against `SCENARIO`.

The exercise graded by value:

* `state_gb_per_gpu(n_params, dp, tp, pp, zero_stage)`: the GB (1e9 bytes) of
  parameters, gradients and optimizer state one GPU holds under mixed-precision
  Adam, the model split evenly over tp * pp and then sharded over dp by the
  ZeRO stage. Judged against `threeaxes.cost.model_state_bytes` (ZeRO,
  Section 5 and Figure 1); `state_mistake` names the usual slips. The hidden
  test asks about layouts it draws at grading time (`draw_state_case`).

The defence (`my_defence` for the student's own configuration, `rivals` for `RIVALS`) is
judged by `autograder.references.defence` against this scenario.
"""
from __future__ import annotations

import random
from typing import Any  # Any: a student's answer

from threeaxes.cost import GB, GiB, model_state_bytes
from threeaxes.grading import as_number
from threeaxes.scenarios.drop14 import JOB_CHANGES, RIVALS, SCENARIO, changed_scenario  # noqa: F401

__all__ = ["SCENARIO", "RIVALS", "DEFENCE_SETUP", "draw_state_case", "expected_state_gb",
           "plain_state_gb", "state_mistake"]

# what the defence's answer cell needs from the notebook before it (the catalogued mistakes
# run after these lines: autograder.references.defence)
DEFENCE_SETUP = [
    "from threeaxes.scenarios import drop14",
    "SCENARIO = drop14.SCENARIO",
    "model, cluster, GLOBAL_BATCH = SCENARIO['model'], SCENARIO['cluster'], SCENARIO['global_batch']",
    "s, h, L, N = model.seq_len, model.d_model, model.n_layers, model.n_params",
    "ASSUME = SCENARIO['assumptions']",
    "my_config = dict(dp=2, tp=2, pp=16, micro_batch=1, zero_stage=1, sequence_parallel=True)",
]


def draw_state_case(rng: random.Random, zero_stage: int) -> tuple:
    """A (n_params, dp, tp, pp, zero_stage) for the hidden test, drawn from `rng` (a
    `random.Random`) at grading time: 1M to 200B parameters (not a round number), dp of
    2 to 64 (so ZeRO shards something), tp a power of 2 up to 8, pp of 1 to 16."""
    n_params = rng.randint(10**6, 2 * 10**11)
    return (n_params, rng.randint(2, 64), rng.choice((1, 2, 4, 8)), rng.randint(1, 16), zero_stage)


def _gb(n_params: int, dp: int, tp: int, pp: int, zero_stage: int, p: float = 2, g: float = 2, k: float = 12,
        split: int | None = None, shard: bool = True) -> float:
    psi = n_params / (tp * pp if split is None else split)
    d = dp if shard else 1
    return (p * psi / (d if zero_stage >= 3 else 1) + g * psi / (d if zero_stage >= 2 else 1)
            + k * psi / (d if zero_stage >= 1 else 1)) / GB


def expected_state_gb(n_params: int, dp: int, tp: int, pp: int, zero_stage: int) -> float:
    """The reference, through the cost model, in GB (1e9 bytes)."""
    return model_state_bytes(n_params, dp=dp, tp=tp, pp=pp, zero_stage=zero_stage).total / GB


def plain_state_gb(answer: Any, name: str = "state_gb_per_gpu(...)") -> float:
    return as_number(answer, name)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)


def state_mistake(got: float, n_params: int, dp: int, tp: int, pp: int, zero_stage: int) -> str | None:
    """None when `got` is right; otherwise a message naming the mistake."""
    want = expected_state_gb(n_params, dp, tp, pp, zero_stage)
    if _close(got, want):
        return None
    where = (f"for {n_params:,} parameters with dp={dp}, tp={tp}, pp={pp}, "
             f"zero_stage={zero_stage}: you returned {got:.4g} GB")
    args = (n_params, dp, tp, pp, zero_stage)
    if _close(got, _gb(*args, k=0)):
        return (f"{where}; you forgot the optimizer state: Adam keeps 12 bytes per parameter "
                "(fp32 master copy and two moments) beside the 2 + 2 of weights and gradients")
    if _close(got, _gb(*args, k=8)):
        return f"{where}; remember the fp32 master copy: the optimizer keeps 4 + 4 + 4 bytes"
    if _close(got, _gb(*args, shard=False)):
        return (f"{where}; ZeRO stage {zero_stage} shards over the {dp} dp ranks: stage 1 the "
                "optimizer state, stage 2 also the gradients, stage 3 also the weights")
    if zero_stage and _close(got, _gb(*args, split=tp * pp * dp, shard=False)):
        return (f"{where}; you divided everything by dp; under ZeRO stage {zero_stage} only "
                "the sharded terms are divided by dp")
    for split, axis in ((tp, "tp"), (pp, "pp")):
        if split != tp * pp and _close(got, _gb(*args, split=split)):
            return f"{where}; the model is split over tp * pp = {tp * pp} ranks, not {axis} alone"
    if _close(got * GiB, want * GB) or _close(got, want * GB):
        return f"{where}; return GB of 1e9 bytes (not GiB, not bytes)"
    return f"{where}; expected 16 bytes per parameter split over tp * pp, then ZeRO over dp"


def draw_state_cases(rng: random.Random) -> list[tuple]:
    """One case of `draw_state_case` for each ZeRO stage, for catalogue.telling."""
    return [draw_state_case(rng, zero_stage=stage) for stage in range(4)]
