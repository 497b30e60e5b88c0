"""References for drop 1 (three kinds of parallel): the instructor's side.

The visible checks' stored cases take their right values from the `expected_*`
functions here (`python -m autograder.cases drop01`). Three exercises, each also
with a `*_mistake` function that returns None when the answer is right and
otherwise a message naming the mistake in the student's terms:

* `training_bytes(n_params, precision)`: bytes of weights, gradients and Adam
  state (`training_bytes_mistake`).
* `largest_model_billion`: the largest model whose training state fits in
  80 GB under mixed precision (`largest_model_mistake`).
* `what_is_split` / `what_crosses`: what each axis cuts and sends
  (`axis_roles_mistake`).
"""
from __future__ import annotations

import math
import random
from typing import Any  # a student's answer: any value

from threeaxes.cost.memory import PRECISIONS, STATE_TERMS
from threeaxes.grading import as_number

__all__ = ["expected_training_bytes", "training_bytes_mistake",
           "expected_largest_model_billion", "largest_model_mistake", "AXIS_SPLITS",
           "AXIS_CROSSES", "expected_axis_tables", "axis_roles_mistake"]


def expected_training_bytes(n_params: int, precision: str) -> dict:
    """Bytes of (weights, gradients, Adam state): PRECISIONS gives bytes per parameter,
    two fp32 moments for Adam plus, in mixed precision, an fp32 master copy."""
    return {key: b * n_params for key, b in zip(STATE_TERMS, PRECISIONS[precision])}


def training_bytes_mistake(got: Any, n_params: int, precision: str) -> str | None:
    """None when `got` (training_bytes(n_params, precision)) is right."""
    call = f"training_bytes({n_params:,}, {precision!r})"
    if type(got) is not dict or set(got) != set(STATE_TERMS):
        keys = sorted(got) if type(got) is dict else type(got).__name__
        return f"{call} should return a dict with exactly the keys params, grads, optimizer; got {keys}"
    values = {key: as_number(got[key], f"{call}[{key!r}]") for key in STATE_TERMS}
    want = expected_training_bytes(n_params, precision)
    if values == want:
        return None
    per_param = PRECISIONS[precision]
    if n_params > 1 and tuple(values[k] for k in STATE_TERMS) == per_param:
        return (f"{call} = {values}: those are bytes per parameter; multiply each by "
                f"n_params={n_params:,}")
    if n_params > 1 and values == {k: 8 * v for k, v in want.items()}:
        return f"{call}: you counted bits, not bytes (8 times too many)"
    for key, b in zip(STATE_TERMS, per_param):
        if values[key] == want[key]:
            continue
        said = values[key] / n_params
        if precision == "mixed" and key == "optimizer" and said == 8:
            return (f"{call}['optimizer'] = {values[key]:,.0f} B is 8 bytes per parameter: "
                    f"Adam's two moments, but remember the fp32 master copy of the weights "
                    f"(4 bytes more), which mixed precision updates and keeps: 12 bytes")
        if precision == "fp32" and key == "optimizer" and said == 4:
            return (f"{call}['optimizer'] = {values[key]:,.0f} B is 4 bytes per parameter: "
                    f"Adam keeps two moments (momentum and variance), 4 bytes each: 8 bytes")
        if precision == "fp32" and key == "optimizer" and said == 12:
            return (f"{call}['optimizer'] = {values[key]:,.0f} B is 12 bytes per parameter: an "
                    f"fp32 run needs no master copy (its weights are already fp32), only Adam's "
                    f"two moments: 8 bytes")
        if precision == "mixed" and key in ("params", "grads") and said == 4:
            return (f"{call}[{key!r}] = {values[key]:,.0f} B is 4 bytes per parameter: under mixed "
                    f"precision the {'weights the model computes with' if key == 'params' else 'gradients'} "
                    f"are 16-bit, 2 bytes each")
        return (f"{call}[{key!r}] = {values[key]:,.0f} B, {said:g} bytes per parameter; under "
                f"{precision} each parameter's {key} take {b} bytes")
    return f"{call} = {values} is not right"


def expected_largest_model_billion(memory_bytes: float = 80e9) -> float:
    return memory_bytes / sum(PRECISIONS["mixed"]) / 1e9


def largest_model_mistake(got: Any) -> str | None:
    """None when `got` (largest_model_billion) is right for 80 GB under mixed-precision Adam."""
    value = as_number(got, "largest_model_billion")
    want = expected_largest_model_billion()
    if math.isclose(value, want, rel_tol=1e-9):
        return None
    if math.isclose(value, want * 1e9, rel_tol=1e-9):
        return (f"largest_model_billion = {value:g} is a number of parameters; give it in "
                f"billions (divide by 1e9)")
    named = {
        80 / 12: "12 bytes per parameter: you forgot the fp32 master copy (2 + 2 + 8 is Adam "
                 "without it); mixed precision keeps 2 + 2 + 12 = 16 bytes per parameter",
        80 / 2: "2 bytes per parameter: that is the fp16 weights alone; training also keeps "
                "gradients and Adam state, 16 bytes per parameter in all",
        80 / 4: "4 bytes per parameter: the weights alone (or weights and gradients in 16-bit); "
                "training also keeps Adam's moments and the master copy, 16 bytes in all",
        80 / 8: "8 bytes per parameter: that leaves out the optimizer's state; mixed-precision "
                "Adam needs 2 + 2 + 12 = 16 bytes per parameter",
        80 * 2**30 / 16 / 1e9: "80 GiB (80 x 2^30 bytes) where the course counts 80 GB = 80e9 bytes",
        80e9 / 16 / 2**30: "billions of 2^30 parameters; a billion here is 1e9",
    }
    for wrong, why in named.items():
        if math.isclose(value, wrong, rel_tol=1e-6):
            return f"largest_model_billion = {value:g}: {why}"
    if not 0 < value < 80:
        return "give the answer in billions of parameters, e.g. 3.5 for 3.5B"
    return (f"largest_model_billion = {value:g} does not match 80 GB divided by the bytes each "
            f"parameter needs under mixed-precision Adam (see training_bytes)")


AXIS_SPLITS = {"data": "batch", "tensor": "layer weights", "pipeline": "layers"}
AXIS_CROSSES = {"data": "gradients", "tensor": "partial layer outputs",
                "pipeline": "activations between stages"}

def expected_axis_tables() -> dict:
    """Both tables as the visible check reads them (its `axis_tables`)."""
    return {"what_is_split": dict(AXIS_SPLITS), "what_crosses": dict(AXIS_CROSSES)}


_SPLIT_HINTS = {
    "data": "every data-parallel rank held all the parameters (look at 'parameters held per "
            "rank'); what differed between ranks was the examples they took from the batch",
    "tensor": "each tensor-parallel rank held a slice of one layer's weight matrix (its columns "
              "of fc1), not whole layers",
    "pipeline": "each pipeline rank held whole blocks (one block per rank), not a slice of "
                "every layer's weights",
}
_CROSS_HINTS = {
    "data": "the data-parallel all-reduce summed the gradients of the ranks",
    "tensor": "the tensor-parallel all-gather put the ranks' slices of one layer's output "
              "side by side",
    "pipeline": "pipeline ranks sent the activation leaving their block to the next stage",
}


def axis_roles_mistake(split: dict, crosses: dict) -> str | None:
    """None when both tables (plain lower-case strings, from as_choice) are right."""
    if split.get("tensor") == "layers" and split.get("pipeline") == "layer weights":
        return ("what_is_split: you swapped tensor and pipeline. Tensor parallelism cuts inside "
                "one layer (each rank held some of fc1's columns); pipeline parallelism gives "
                "each rank whole layers")
    for axis in ("data", "tensor", "pipeline"):
        if split.get(axis) != AXIS_SPLITS[axis]:
            return f"what_is_split[{axis!r}] = {split.get(axis)!r}: {_SPLIT_HINTS[axis]}"
    for axis in ("data", "tensor", "pipeline"):
        if crosses.get(axis) != AXIS_CROSSES[axis]:
            return f"what_crosses[{axis!r}] = {crosses.get(axis)!r}: {_CROSS_HINTS[axis]}"
    return None


def draw_training_cases(rng: random.Random) -> list[tuple]:
    """Parameter counts drawn at grading (one, a small model, a large one), each precision."""
    return [(n, precision) for n in (rng.randint(2, 10**6), rng.randint(10**9, 10**11))
            for precision in ("fp32", "mixed")]
