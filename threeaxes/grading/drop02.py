"""Drop 2 on the student's side: the runner of the gradient-averaging exercise.

`gradients_after_average` runs a student's `average_gradients(model, dims)` on
fresh dp ranks, after backward on this rank's slice of a fixed batch, and sends
back the raw gradients as plain numbers: no verdict is decided on a rank, since
ranks started from a student's notebook run there. The grader compares them with
one process (`autograder/references/drop02.py`); the visible check compares them
with stored cases (`threeaxes.grading.visible`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

__all__ = ["CHECK_CONFIG", "EXAMPLES_PER_RANK", "SEED", "gradients_after_average"]

# small and float64: a gradient comes back as data, and "equal to one process" holds to ~1e-15
CHECK_CONFIG = ToyConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2, seq_len=8, dtype=torch.float64)
EXAMPLES_PER_RANK, SEED = 2, 2


def gradients_after_average(rank: int, world_size: int, student_fn: Callable[..., Any],
                            examples_per_rank: int = EXAMPLES_PER_RANK, seed: int = SEED) -> dict[str, Any]:
    """On one dp rank: backward on this rank's slice, then `student_fn(model, dims)`.
    Returns plain values: {"rank", "error" (None or what the function raised),
    "grads" ({name: the gradient flattened to floats, or None where p.grad is gone}),
    "shapes" ({name: the gradient's shape, or None})}."""
    dims = ParallelDims.init(dp=world_size)
    inputs, targets = make_batch(CHECK_CONFIG, examples_per_rank * dims.size("dp"), seed=seed)
    rows = slice(dims.coord("dp") * examples_per_rank, (dims.coord("dp") + 1) * examples_per_rank)
    model = ToyTransformer(CHECK_CONFIG, seed=0)
    lm_loss(model(inputs[rows]), targets[rows]).backward()
    try:
        student_fn(model, dims)
    except Exception as exc:  # noqa: BLE001 - the student's code; report it, do not crash the rank
        return {"rank": rank, "error": f"{type(exc).__name__}: {exc}", "grads": {}, "shapes": {}}
    grads: dict[str, list[float] | None] = {}
    shapes: dict[str, list[int] | None] = {}
    for name, p in model.named_parameters():
        g = p.grad if isinstance(p.grad, torch.Tensor) else None
        # below 1e-13 is rounding noise (attention's key bias has a zero gradient in exact
        # arithmetic: softmax ignores a shift); sent as 0.0 so that another machine's noise compares equal
        grads[name] = None if g is None else [v if abs(v) > 1e-13 else 0.0
                                              for v in g.detach().to(torch.float64).reshape(-1).tolist()]
        shapes[name] = None if g is None else list(g.shape)
    return {"rank": rank, "error": None, "grads": grads, "shapes": shapes}
