"""References for drop 2 (data parallelism): the instructor's side.

`average_gradients(model, dims)` is judged on raw values (CONTRIBUTING.md, "Test cells run in
the grader"): `threeaxes.grading.drop02.gradients_after_average` runs it on fresh ranks and
sends back each rank's gradients; `average_gradients_mistake` compares them here with the whole
batch's gradient from one process (float64, 1e-12) and names the likely mistake::

    results = check_on_ranks(drop02.gradients_after_average, 4, average_gradients, 2, seed)
    assert drop02.average_gradients_mistake(results, 4, 2, seed) is None

The visible checks' stored cases take their right values from `expected_dp_bytes` and from the
notebook's solution run through the runner (`python -m autograder.cases drop02`).
"""
from __future__ import annotations

from typing import Any  # what a rank or a student sent: any value

import torch

from threeaxes.grading import same_as_reference
from threeaxes.grading.drop02 import CHECK_CONFIG, EXAMPLES_PER_RANK, SEED, gradients_after_average
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

Grads = dict[str, torch.Tensor]   # a parameter's name: its gradient


def reference_gradients(world_size: int, examples_per_rank: int = EXAMPLES_PER_RANK,
                        seed: int = SEED) -> tuple[Grads, list[Grads]]:
    """In one process: (the whole batch's gradients, each rank's local gradients), by name."""
    inputs, targets = make_batch(CHECK_CONFIG, examples_per_rank * world_size, seed=seed)

    def grads(rows: slice) -> Grads:
        model = ToyTransformer(CHECK_CONFIG, seed=0)
        lm_loss(model(inputs[rows]), targets[rows]).backward()
        out = {}
        for name, p in model.named_parameters():
            assert p.grad is not None, f"{name} takes part in the loss"
            out[name] = p.grad.detach().clone()
        return out

    local = [grads(slice(r * examples_per_rank, (r + 1) * examples_per_rank)) for r in range(world_size)]
    return grads(slice(None)), local


def _close(got: Grads, want: Grads) -> bool:
    return all(same_as_reference(got[name], want[name]) for name in want)


def _max_diff(got: Grads, want: Grads) -> float:
    return max(float((got[name] - want[name]).abs().max()) for name in want)


def _plain_grads(result: Any, rank: int, want: Grads) -> tuple[Grads | None, str | None]:
    """The gradients one rank sent back (flattened floats) as {name: float64 tensor},
    or a message why not."""
    if type(result) is not dict or type(result.get("grads")) is not dict:
        sent = sorted(map(str, result)) if type(result) is dict else type(result).__name__
        return None, (f"rank {rank} sent back {sent} instead of its gradients: the ranks did not "
                      f"run the course's check (was threeaxes changed in this notebook? restart "
                      f"the kernel and run the notebook again)")
    if result.get("error"):
        return None, f"rank {rank}: average_gradients raised {result['error']}"
    grads, shapes, names = result["grads"], result.get("shapes") or {}, list(want)
    missing = [name for name in names if grads.get(name) is None]
    if missing:
        return None, (f"rank {rank}: {missing[0]} has no gradient after your function; average "
                      f"p.grad in place (or assign p.grad), do not delete it")
    out = {}
    for name in names:
        values = grads[name]
        if (type(values) is not list or any(type(v) is not float for v in values)
                or shapes.get(name) != list(want[name].shape)):
            return None, f"rank {rank}: the gradient of {name} no longer has the parameter's shape"
        out[name] = torch.tensor(values, dtype=torch.float64).reshape(want[name].shape)
    return out, None


def average_gradients_mistake(results: Any, world_size: int, examples_per_rank: int = EXAMPLES_PER_RANK,
                              seed: int = SEED) -> str | None:
    """None when every rank's gradients (from `gradients_after_average`) equal the
    whole batch's gradient computed here in one process; else the likely mistake."""
    expected, local = reference_gradients(world_size, examples_per_rank, seed)
    if type(results) is not list or len(results) != world_size:
        return f"expected one result from each of {world_size} ranks, got {type(results).__name__}"
    got = []
    for rank, result in enumerate(results):
        grads, why = _plain_grads(result, rank, expected)
        if why:
            return why
        assert grads is not None, "_plain_grads gives the gradients or why not"
        got.append(grads)
    agree = all(_close(other, got[0]) for other in got)
    for rank, grads in enumerate(got):
        why = _rank_mistake(rank, grads, expected, local[rank], world_size, agree)
        if why:
            return why
    return None


def _rank_mistake(rank: int, grads: Grads, expected: Grads, local: Grads, n: int,
                  ranks_agree: bool = True) -> str | None:
    """None when this rank's gradients are the whole batch's; else the likely mistake."""
    if _close(grads, expected):
        return None
    if _close(grads, {k: n * v for k, v in expected.items()}):
        hint = (f"the gradients are {n}x too large: you summed over the ranks but did not "
                f"divide the sum by dims.size('dp')={n}")
    elif _close(grads, local):
        hint = ("every rank still holds its own local gradient (they differ across ranks): "
                "all_reduce each p.grad over the 'dp' axis so that every rank gets the sum, "
                "then divide by dims.size('dp')")
    elif _close(grads, {k: v / n for k, v in local.items()}):
        hint = (f"you divided by dims.size('dp')={n} but never combined the ranks: all_reduce "
                f"each p.grad over the 'dp' axis (a sum over the ranks) before dividing")
    elif not ranks_agree:
        hint = ("the ranks ended with different gradients: all_reduce every p.grad over the "
                "'dp' axis, in the same order on every rank, then divide by dims.size('dp')")
    else:
        hint = ("the ranks agree with each other, but not with one process: all_reduce each "
                "p.grad over the 'dp' axis (op=SUM, the default) and divide by "
                "dims.size('dp'), nothing else")
    return f"rank {rank}: {hint} (max abs diff from one process {_max_diff(grads, expected):.3g})"


def toy_parameter_count() -> int:
    """Parameters of the notebook's toy model, ToyTransformer(ToyConfig()), counted."""
    return sum(p.numel() for p in ToyTransformer(ToyConfig()).parameters())


def state_bytes_mistake(got: Any, n_params: int, ranks: int = 4) -> str | None:
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


def expected_dp_bytes(ranks: int = 4) -> dict:
    """Both counts of exercise 2 for the notebook's toy on `ranks` dp ranks (the visible
    check's `dp_bytes`): fp32 Adam's 16 B per parameter on every rank, and what one rank
    sends in a ring all-reduce of the fp32 gradients, 2 (n - 1) / n x S."""
    n_params = toy_parameter_count()
    return {"state_bytes_per_rank": 16 * n_params,
            "ring_bytes_sent_per_rank": 2 * (ranks - 1) / ranks * (4 * n_params)}


def ring_bytes_mistake(got: Any, n_params: int, ranks: int = 4) -> str | None:
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


__all__ = ["CHECK_CONFIG", "EXAMPLES_PER_RANK", "gradients_after_average", "reference_gradients",
           "average_gradients_mistake", "toy_parameter_count", "state_bytes_mistake",
           "expected_dp_bytes", "ring_bytes_mistake"]
