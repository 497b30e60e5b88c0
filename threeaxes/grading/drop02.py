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


def toy_parameter_count() -> int:
    """Parameters of the notebook's toy model, ToyTransformer(ToyConfig()), counted."""
    return sum(p.numel() for p in ToyTransformer(ToyConfig()).parameters())


def state_bytes_mistake(got, n_params: int, ranks: int = 4) -> str | None:
    """None when `got` is the fp32 Adam training state one dp rank holds (16 B per parameter)."""
    from threeaxes.grading import as_number

    value = as_number(got, "state_bytes_per_rank")
    want = 16 * n_params
    if value == want:
        return None
    named = {
        4 * n_params: "that is 4 bytes per parameter, the weights alone; every rank also keeps "
                      "4 bytes of gradient and 8 of Adam state per parameter",
        want / ranks: f"that is 1/{ranks} of the state: under data parallelism every rank keeps "
                      f"the whole model, its gradients and its optimizer state; only the batch is split",
        8 * n_params: "that is weights and gradients (8 bytes per parameter); Adam's two moments "
                      "add 8 bytes more per parameter",
        12 * n_params: "that is 12 bytes per parameter; fp32 training keeps 4 of weight, 4 of "
                       "gradient and 8 of Adam state (two moments)",
        n_params: "that is the number of parameters; give bytes (16 per parameter)",
        16 * n_params * ranks: f"that is the state of all {ranks} ranks together; give one rank's",
    }
    for wrong, why in named.items():
        if value == wrong:
            return f"state_bytes_per_rank = {value:,.0f}: {why}"
    return (f"state_bytes_per_rank = {value:,.0f}; every rank holds all {n_params:,} parameters, "
            f"with 4 bytes of weight, 4 of gradient and 8 of Adam state for each")


def ring_bytes_mistake(got, n_params: int, ranks: int = 4) -> str | None:
    """None when `got` is what one rank sends in a ring all-reduce of the fp32
    gradients over `ranks` ranks: 2 (n - 1) / n x S, S = 4 bytes x parameters."""
    import math

    from threeaxes.grading import as_number

    value = as_number(got, "ring_bytes_sent_per_rank")
    n, grads = ranks, 4 * n_params
    want = 2 * (n - 1) / n * grads
    if math.isclose(value, want, rel_tol=1e-9):
        return None
    named = {
        # (with n = 4 this is also 2 (n - 1) x S, the / n forgotten)
        2 * (n - 1) / n * 16 * n_params: "S is the gradients only (4 bytes per parameter), "
                                          "not the whole training state: only gradients are all-reduced "
                                          "(and each of the 2 (n - 1) ring steps sends S / n)",
        (n - 1) / n * grads: "that is one half of the ring: the reduce-scatter. The all-gather "
                             "that follows sends as much again: 2 (n - 1) / n x S",
        2 * grads: "that is 2 x S: the ring sends (n - 1)/n of it, as each rank keeps its own "
                   "chunk: 2 (n - 1) / n x S",
        grads: "that is S, the gradients themselves; a ring all-reduce sends 2 (n - 1) / n x S per rank",
        2 * (n - 1) / n * n_params: "that counts numbers, not bytes: each fp32 gradient is 4 bytes",
        (n - 1) * grads: "each rank sends one chunk of S / n per step, 2 (n - 1) steps",
    }
    for wrong, why in named.items():
        if math.isclose(value, wrong, rel_tol=1e-9):
            return f"ring_bytes_sent_per_rank = {value:,.0f}: {why}"
    return (f"ring_bytes_sent_per_rank = {value:,.0f}; use S = 4 bytes x parameters and n = {n} "
            f"in 2 (n - 1) / n x S")


__all__ = ["CHECK_CONFIG", "EXAMPLES_PER_RANK", "check_average_gradients", "toy_parameter_count",
           "state_bytes_mistake", "ring_bytes_mistake"]
