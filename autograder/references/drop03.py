"""References for drop 3, "Cut the matmul, not the batch": the instructor's side.

`column_parallel_matmul(x, w, dims)` is judged on raw values (CONTRIBUTING.md, "Test cells run
in the grader"): `threeaxes.grading.drop03.column_split_outputs` runs it on fresh ranks and
sends back its tensors and collectives; `column_split_mistake` compares them here with the
column split computed in one process (1e-12) and names the mistake::

    results = check_on_ranks(drop03.column_split_outputs, 4, column_parallel_matmul, 5, 8, 12, seed)
    assert drop03.column_split_mistake(results, 4, 5, 8, 12, seed) is None

`expected_tp_block_allreduces` is what `tp_block_collectives` measures of one tensor-parallel
block, by formula, for the visible check's stored cases.
"""
from __future__ import annotations

from typing import Any  # what a rank or a student sent: any value

import torch

from threeaxes.grading import same_as_reference, tensor_of
from threeaxes.grading.drop03 import column_split_outputs, exercise_tensors, tp_block_collectives


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.to(torch.float64) - b).abs().max().item()


def column_split_mistake(results: Any, tp: int, tokens: int = 3, d_in: int = 4, d_out: int = 6,
                         seed: int = 0) -> str | None:
    """None when every rank's (w_shard, y_local, y) from `column_split_outputs`
    equals the column split computed here in one process; else the mistake."""
    if d_out % tp or d_in % tp:
        raise ValueError(f"instructor: d_in={d_in} and d_out={d_out} must both be multiples of tp={tp}")
    if type(results) is not list or len(results) != tp:
        return f"expected one result from each of {tp} ranks, got {type(results).__name__}"
    x, w = exercise_tensors(tokens, d_in, d_out, seed)
    for r, result in enumerate(results):
        why = _rank_mistake(result, r, tp, x, w)
        if why:
            return f"rank {r} of {tp} (x {tokens}x{d_in}, w {d_in}x{d_out}): {why}"
    return None


def _rank_mistake(result: Any, r: int, tp: int, x: torch.Tensor, w: torch.Tensor) -> str | None:
    (tokens, d_in), d_out = x.shape, w.shape[1]
    c, k = d_out // tp, d_in // tp
    want_shard = w[:, r * c:(r + 1) * c]
    want_local, want_y = x @ want_shard, x @ w
    cols = f"w[:, {r * c}:{(r + 1) * c}], shape ({d_in}, {c})"
    if type(result) is not dict or not {"error", "returned", "outputs", "collectives"} <= set(result):
        sent = sorted(map(str, result)) if type(result) is dict else type(result).__name__
        return (f"the rank sent back {sent} instead of its tensors: the ranks did not run the "
                f"course's check (was threeaxes changed in this notebook? restart the kernel and "
                f"run the notebook again)")
    if result["error"]:
        return f"column_parallel_matmul raised {result['error']}"
    outputs = result["outputs"]
    if type(outputs) is not list or len(outputs) != 3:
        return f"return three tensors (w_shard, y_local, y); got {result['returned']}"
    tensors = [tensor_of(value) for value in outputs]
    for name, value, tensor in zip(("w_shard", "y_local", "y"), outputs, tensors):
        if tensor is None:
            return f"{name} should be a torch.Tensor, got {value if type(value) is str else 'something else'}"
    w_shard, y_local, y = tensors
    assert w_shard is not None and y_local is not None and y is not None   # the loop returned on a None

    # -- what this rank holds -------------------------------------------------------
    if not same_as_reference(w_shard, want_shard):
        if same_as_reference(w_shard, w[r * k:(r + 1) * k, :]):
            return (f"w_shard is rows {r * k}..{(r + 1) * k - 1} of w with every column: that is "
                    f"the row split, not the column split. The column split keeps all {d_in} rows "
                    f"and takes this rank's block of columns, {cols}.")
        if same_as_reference(w_shard, w.T[r * c:(r + 1) * c, :]):
            return (f"w_shard holds the right numbers transposed ({c}, {d_in}); slice w itself: "
                    f"{cols} (nn.Linear's weight is stored transposed, w is not).")
        for other in range(tp):
            if other != r and same_as_reference(w_shard, w[:, other * c:(other + 1) * c]):
                return f"w_shard holds the columns of rank {other}; rank {r} takes {cols}."
        if tuple(w_shard.shape) != (d_in, c):
            return (f"w_shard has shape {tuple(w_shard.shape)}; a column split of a ({d_in}, "
                    f"{d_out}) weight over {tp} ranks gives each rank ({d_in}, {c}): {cols}.")
        return (f"w_shard has the right shape but not the right numbers (max abs diff "
                f"{_max_diff(w_shard, want_shard):.3g}); take {cols}.")

    # -- what it computes alone -------------------------------------------------------
    if not same_as_reference(y_local, want_local):
        if tuple(y_local.shape) != (tokens, c):
            return (f"y_local has shape {tuple(y_local.shape)}; it should be this rank's columns "
                    f"of Y, x @ w_shard, shape ({tokens}, {c}).")
        return f"y_local is not x @ w_shard (max abs diff {_max_diff(y_local, want_local):.3g})."

    # -- what crosses, and the result -----------------------------------------------------
    if not any(type(e) in (tuple, list) and len(e) == 3 and e[0] == "all_gather"
               for e in result["collectives"]):
        return (f"y was put together without threeaxes.comms.all_gather. Each rank computes only "
                f"its own {c} columns of Y; gather every rank's y_local with "
                f"comms.all_gather(y_local, \"tp\", dims=dims, dim=-1).")
    if not same_as_reference(y, want_y):
        if tuple(y.shape) != (tokens, d_out):
            return (f"y has shape {tuple(y.shape)}, not ({tokens}, {d_out}); put the slices side "
                    f"by side along the last dim (dim=-1), not under each other.")
        return f"y is not x @ w (max abs diff {_max_diff(y, want_y):.3g}); are the slices in rank order?"
    return None


def expected_tp_block_allreduces(batch: int, seq: int, d_model: int, bytes_per_value: int) -> tuple:
    """What `tp_block_collectives` measures for one block, by formula: two all-reduces
    forward (after attention's projection and after fc2), two backward (at the inputs
    of attention and of the MLP), each handed the whole (batch, seq, d_model) activation."""
    return 2, 2, batch * seq * d_model * bytes_per_value


def tp_counts_mistake(counts: Any, measured: tuple[int, int] = (2, 2)) -> str | None:
    """None when (forward, backward) all-reduce counts of one tensor-parallel
    block equal `measured` (the trace's: two each way); otherwise the mistake."""
    forward, backward = counts
    if (forward, backward) == tuple(measured):
        return None
    if backward == 0 and forward > 0:
        return (f"you counted {forward} forward all-reduces and none backward; backward makes two "
                f"more per block: the gradient reaching the input of attention and of the MLP is "
                f"a partial sum on each rank (the f map's all-reduce)")
    if (forward, backward) == (1, 1):
        return ("one all-reduce each way is one sublayer's worth; a block has two (attention, "
                "then the MLP), and each ends with a row-parallel linear")
    if (forward, backward) == (4, 4) or (forward, backward) == (4, 0):
        return ("a column-parallel linear followed by a row-parallel one needs no all-reduce "
                "in between: count one per sublayer each way, not one per linear")
    if forward != measured[0]:
        return (f"forward: you said {forward}, the trace counted {measured[0]}: one all-reduce "
                f"after attention's output projection and one after the MLP's fc2")
    return (f"backward: you said {backward}, the trace counted {measured[1]}: one at the input "
            f"of attention and one at the input of the MLP")


def tp_bytes_mistake(got: int, batch: int, seq: int, d_model: int, bytes_per_value: int,
                     tp: int = 2) -> str | None:
    """None when `got` is the bytes handed to each block all-reduce: the whole
    (batch, seq, d_model) activation at bytes_per_value bytes per number."""
    want = batch * seq * d_model * bytes_per_value
    if got == want:
        return None
    shape = f"({batch}, {seq}, {d_model})"
    named = {
        want // tp: f"that is 1/{tp} of the activation: the all-reduce adds up whole partial "
                    f"sums, every rank hands it the full {shape} tensor, not a slice",
        want // bytes_per_value: f"that counts numbers, not bytes: multiply by "
                                 f"bytes_per_value={bytes_per_value}",
        4 * want: "that is the MLP's hidden width (4 x d_model); the all-reduce comes after fc2 "
                  "(and after attention's projection), back at width d_model",
        2 * want: "that is twice the activation, what a ring sends per rank at large tp; the "
                  "question is the bytes handed to the all-reduce (the full tensor), not wire bytes",
        8 * want: "that is bits; give bytes",
    }
    for wrong, why in named.items():
        if got == wrong:
            return f"{got:,} B per all-reduce: {why}"
    return (f"{got:,} B per all-reduce; each one carries the whole {shape} activation at "
            f"{bytes_per_value} bytes per number, {want:,} B")


__all__ = ["exercise_tensors", "column_split_outputs", "column_split_mistake", "tp_block_collectives",
           "expected_tp_block_allreduces", "tp_counts_mistake", "tp_bytes_mistake"]
