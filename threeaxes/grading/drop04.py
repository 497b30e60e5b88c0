"""Drop 4 on the student's side: the runner of the stage-boundaries exercise.

`stage_split_params` cuts the toy model with a student's `stage_layers`
boundaries on fresh pipeline ranks, trains one step with the course's pipeline
trainer and sends back the stages and this rank's trained parameters as plain
numbers: no verdict is decided on a rank, since ranks started from a student's
notebook run there. The grader compares them with one process training the
whole model (`autograder/references/drop04.py`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from threeaxes.grading import REFUSED, as_int, plain_tensor
from threeaxes.toy import ToyConfig, make_batch

BATCH, MICROBATCHES, N_LAYERS, SEED = 8, 4, 4, 7

__all__ = ["BATCH", "MICROBATCHES", "N_LAYERS", "SEED", "REFUSED", "check_config", "plain_stage_layers",
           "layers_or_refusal", "covers", "stage_split_params"]

# a call the exercise asks to refuse (pp does not divide n_layers) is stored as REFUSED


def check_config(n_layers: int = N_LAYERS) -> ToyConfig:
    """A small float64 toy model: its parameters come back as data, and "equal to one
    process" holds to ~1e-15."""
    return ToyConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=n_layers, seq_len=8,
                     dtype=torch.float64)


def plain_stage_layers(answer: Any, name: str = "stage_layers(...)") -> list[list[int]]:
    """A student's boundaries as a plain list of lists of ints, or AssertionError."""
    if type(answer) not in (list, tuple):
        raise AssertionError(f"{name} should return a list of lists of layer indices, "
                             f"got {type(answer).__name__}")
    stages: list[list[int]] = []
    for s, stage in enumerate(answer):
        if type(stage) not in (list, tuple, range):
            raise AssertionError(f"{name}[{s}] should be a list of ints, got {type(stage).__name__}")
        stages.append([as_int(i, f"{name}[{s}] entry") for i in stage])
    return stages


def layers_or_refusal(stage_layers: Callable[[int, int], Any], n_layers: int, pp: int) -> list[list[int]] | str:
    """What `stage_layers(n_layers, pp)` answers, as a plain value: its stages as lists of
    ints, or `REFUSED` when it raises ValueError (the exercise's rule where pp does not
    divide n_layers). Any other error, or an answer that is not lists of ints, fails naming
    the call."""
    call = f"stage_layers({n_layers}, {pp})"
    try:
        answer = stage_layers(n_layers, pp)
    except ValueError:
        return REFUSED
    except Exception as error:  # noqa: BLE001 - the student's error, reported with its input
        raise AssertionError(f"{call} raised {type(error).__name__}: {error}") from None
    return plain_stage_layers(answer, call)


def covers(stages: Sequence[Sequence[int]], n_layers: int, pp: int) -> bool:
    """True when `pp` stages hold every layer 0..n_layers-1 exactly once."""
    return len(stages) == pp and sorted(i for s in stages for i in s) == list(range(n_layers))


def stage_split_params(rank: int, world_size: int, student_fn: Callable[[int, int], Any], n_layers: int = N_LAYERS,
                       m: int = MICROBATCHES, seed: int = SEED) -> dict[str, Any]:
    """On one pipeline rank: the student's stages, then one 1F1B training step of
    check_config(n_layers) on batch `seed` in m microbatches. Returns plain values:
    {"rank", "error", "stages", "params" ({name: {"shape", "values" (flattened
    floats)}} of this rank's trained tensors; empty when the stages do not cover
    every layer once, so nothing was trained)}."""
    pp, call = world_size, f"stage_layers({n_layers}, {world_size})"
    result: dict[str, Any] = {"rank": rank, "error": None, "stages": None, "params": {}}
    try:
        stages = plain_stage_layers(student_fn(n_layers, pp), call)
    except AssertionError as exc:
        return {**result, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the student's code; report it, do not crash the rank
        return {**result, "error": f"{call} raised {type(exc).__name__}: {exc}"}
    result["stages"] = stages
    if not covers(stages, n_layers, pp):
        return result
    # the course's trainer, imported here in the worker, never the notebook's copy
    from threeaxes.train import pipeline_train

    cfg = check_config(n_layers)
    try:
        ours = pipeline_train(rank, world_size, cfg, [make_batch(cfg, BATCH, seed=seed)],
                              schedule="1f1b", m=m, stage_layers=stages)
    except ValueError as exc:  # boundaries out of order: every rank raises the same
        return {**result, "error": f"rank {rank}: {exc}"}
    params = {name: plain_tensor(value) for name, value in ours["params"].items()}
    return {**result, "params": params}
