"""Reference checks for drop 2 (data parallelism), run on fresh ranks.

Hidden tests call them through `threeaxes.grading.check_on_ranks`, e.g.::

    check_on_ranks(drop02.check_average_gradients, 4, average_gradients)

Each check builds the layout inside the worker (`ParallelDims.init(dp=world_size)`),
rebuilds the toy model and its data there, computes the reference with plain
single-process autograd, and returns only plain values: {"ok": bool, "message": str, "max_abs_diff": float}.
"""
from __future__ import annotations

import torch

from threeaxes import comms
from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

# float64, so that "equal to one process" can be checked to ~1e-12
CHECK_CONFIG = ToyConfig(dtype=torch.float64)
EXAMPLES_PER_RANK = 2
_RTOL, _ATOL = 1e-7, 1e-10


def _close(grads, others):
    return all(torch.allclose(a, b, rtol=_RTOL, atol=_ATOL) for a, b in zip(grads, others))


def _max_abs_diff(grads, others):
    return max(float((a - b).abs().max()) for a, b in zip(grads, others))


def _full_batch_grads(inputs, targets):
    """What one process computes from the whole global batch: the answer to match."""
    model = ToyTransformer(CHECK_CONFIG, seed=0)
    lm_loss(model(inputs), targets).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def check_average_gradients(rank, world_size, student_fn):
    """Is `student_fn(model, dims)` the dp average of every gradient?

    Every rank is a dp rank: the layout is `ParallelDims.init(dp=world_size)`.
    Each rank takes its dp coordinate's slice of a global batch, runs
    backward, calls the student's function with the layout, and compares
    every `p.grad` with the gradient one process gets from the whole batch.
    On a mismatch, the message names the likely mistake (no division, no
    all-reduce, both).
    """
    dims = ParallelDims.init(dp=world_size)
    n, dp_rank = dims.size("dp"), dims.coord("dp")
    inputs, targets = make_batch(CHECK_CONFIG, EXAMPLES_PER_RANK * n, seed=2)
    expected = _full_batch_grads(inputs, targets)

    rows = slice(dp_rank * EXAMPLES_PER_RANK, (dp_rank + 1) * EXAMPLES_PER_RANK)
    model = ToyTransformer(CHECK_CONFIG, seed=0)
    lm_loss(model(inputs[rows]), targets[rows]).backward()
    local = [p.grad.detach().clone() for p in model.parameters()]

    try:
        student_fn(model, dims)
    except Exception as exc:  # the student's code; report it, do not crash the rank
        return {"ok": False, "max_abs_diff": float("inf"),
                "message": f"rank {rank}: average_gradients raised {type(exc).__name__}: {exc}"}

    names = [name for name, _ in model.named_parameters()]
    got = [p.grad for p in model.parameters()]
    missing = [name for name, g in zip(names, got) if g is None]
    if missing:
        return {"ok": False, "max_abs_diff": float("inf"),
                "message": f"rank {rank}: {missing[0]} has no gradient after your function; "
                           f"average p.grad in place (or assign p.grad), do not delete it"}
    got = [g.detach().clone() for g in got]
    diff = _max_abs_diff(got, expected)

    # Do the ranks agree? Compare one number per rank (the sum of every gradient).
    fingerprint = torch.stack([g.sum() for g in got]).sum().reshape(1)
    # communication: gather every dp rank's fingerprint (grading only)
    fingerprints = comms.all_gather(fingerprint, "dp", dims=dims)
    ranks_agree = bool(torch.allclose(fingerprints, fingerprints[0].expand_as(fingerprints),
                                      rtol=_RTOL, atol=_ATOL))

    if _close(got, expected):
        return {"ok": True, "max_abs_diff": diff,
                "message": f"rank {rank}: matches one process (max abs diff {diff:.2e})"}
    if _close(got, [n * e for e in expected]):
        hint = (f"the gradients are {n}x too large: you summed over the ranks but did not "
                f"divide the sum by dims.size('dp')={n}")
    elif _close(got, local):
        hint = ("every rank still holds its own local gradient (they differ across ranks): "
                "all_reduce each p.grad over the 'dp' axis so that every rank gets the sum, "
                "then divide by dims.size('dp')")
    elif _close(got, [g / n for g in local]):
        hint = (f"you divided by dims.size('dp')={n} but never combined the ranks: all_reduce "
                f"each p.grad over the 'dp' axis (a sum over the ranks) before dividing")
    elif not ranks_agree:
        hint = ("the ranks ended with different gradients: all_reduce every p.grad over the "
                "'dp' axis, in the same order on every rank, then divide by dims.size('dp')")
    else:
        hint = ("the ranks agree with each other, but not with one process: all_reduce each "
                "p.grad over the 'dp' axis (op=SUM, the default) and divide by "
                "dims.size('dp'), nothing else")
    return {"ok": False, "max_abs_diff": diff,
            "message": f"rank {rank}: {hint} (max abs diff from one process {diff:.3g})"}


__all__ = ["CHECK_CONFIG", "EXAMPLES_PER_RANK", "check_average_gradients"]
