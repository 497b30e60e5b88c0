"""Reference checks for drop 3, "Cut the matmul, not the batch".

Each check runs on fresh ranks through `threeaxes.grading.check_on_ranks`:
it builds the layout (`ParallelDims.init(tp=world_size)`) and the exercise's
tensors inside the worker (fixed seed, float64), calls the student's function
with the layout, and compares with the reference computed there. Only plain values come back: {"ok": bool, "message": str,
"max_abs_diff": float}.

The student's function runs to the end on every rank before anything is
compared, so every rank makes the same collectives and a wrong answer never
leaves a rank waiting.
"""
from __future__ import annotations

import torch

from threeaxes import trace
from threeaxes.dims import ParallelDims

_TOL = 1e-12


def exercise_tensors(tokens: int, d_in: int, d_out: int, seed: int = 0):
    """The (x, w) every rank of the column-split exercise receives: x (tokens,
    d_in) and w (d_in, d_out), float64 from a fixed seed, the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, d_in, dtype=torch.float64, generator=gen)
    w = torch.randn(d_in, d_out, dtype=torch.float64, generator=gen)
    return x, w


def _result(ok, message, diff=0.0):
    return {"ok": bool(ok), "message": str(message), "max_abs_diff": float(diff)}


def _same(a, b):
    return (isinstance(a, torch.Tensor) and tuple(a.shape) == tuple(b.shape)
            and torch.allclose(a.detach().to(torch.float64), b, rtol=_TOL, atol=_TOL))


def _max_diff(a, b):
    return (a.detach().to(torch.float64) - b).abs().max().item()


def column_split_check(rank, world_size, student_fn, tokens=3, d_in=4, d_out=6, seed=0):
    """Grade `student_fn(x, w, dims) -> (w_shard, y_local, y)` on this rank.

    Every rank is a tp rank: `dims = ParallelDims.init(tp=world_size)`, and
    r = dims.coord("tp"). The reference: w_shard = w[:, r*c:(r+1)*c] with
    c = d_out / tp (a column split: every row of w, 1/tp of its columns),
    y_local = x @ w_shard, and y = x @ w assembled by an all-gather over the
    "tp" axis through threeaxes.comms.
    """
    dims = ParallelDims.init(tp=world_size)
    tp, r = dims.size("tp"), dims.coord("tp")
    if d_out % tp or d_in % tp:
        raise ValueError(f"instructor: d_in={d_in} and d_out={d_out} must both be multiples of tp={tp}")
    x, w = exercise_tensors(tokens, d_in, d_out, seed)
    c, k = d_out // tp, d_in // tp
    want_shard = w[:, r * c:(r + 1) * c]
    want_local = x @ want_shard
    want_y = x @ w

    with trace.record() as sent:
        got = student_fn(x.clone(), w.clone(), dims)

    where = f"rank {r} of {tp} (x {tokens}x{d_in}, w {d_in}x{d_out})"
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return _result(False, f"{where}: return three tensors (w_shard, y_local, y); "
                              f"got {type(got).__name__}")
    names = ("w_shard", "y_local", "y")
    for name, value in zip(names, got):
        if not isinstance(value, torch.Tensor):
            return _result(False, f"{where}: {name} should be a torch.Tensor, got {type(value).__name__}")
    w_shard, y_local, y = got

    # -- what this rank holds -------------------------------------------------------
    if not _same(w_shard, want_shard):
        cols = f"w[:, {r * c}:{(r + 1) * c}], shape ({d_in}, {c})"
        if _same(w_shard, w[r * k:(r + 1) * k, :]):
            return _result(False, (
                f"{where}: w_shard is rows {r * k}..{(r + 1) * k - 1} of w with every column: "
                f"that is the row split, not the column split. The column split keeps all {d_in} "
                f"rows and takes this rank's block of columns, {cols}."))
        if _same(w_shard, w.T[r * c:(r + 1) * c, :]):
            return _result(False, (
                f"{where}: w_shard holds the right numbers transposed ({c}, {d_in}); "
                f"slice w itself: {cols} (nn.Linear's weight is stored transposed, w is not)."))
        for other in range(tp):
            if other != r and _same(w_shard, w[:, other * c:(other + 1) * c]):
                return _result(False, (
                    f"{where}: w_shard holds the columns of rank {other}; rank {r} takes {cols}."))
        shape = tuple(w_shard.shape)
        if shape != (d_in, c):
            return _result(False, (
                f"{where}: w_shard has shape {shape}; a column split of a ({d_in}, {d_out}) "
                f"weight over {tp} ranks gives each rank ({d_in}, {c}): {cols}."))
        return _result(False, f"{where}: w_shard has the right shape but not the right numbers; "
                              f"take {cols}.", _max_diff(w_shard, want_shard))

    # -- what it computes alone -------------------------------------------------------
    if not _same(y_local, want_local):
        if tuple(y_local.shape) != (tokens, c):
            return _result(False, (
                f"{where}: y_local has shape {tuple(y_local.shape)}; it should be this rank's "
                f"columns of Y, x @ w_shard, shape ({tokens}, {c})."))
        return _result(False, f"{where}: y_local is not x @ w_shard.", _max_diff(y_local, want_local))

    # -- what crosses, and the result -----------------------------------------------------
    gathers = sent.count("all_gather")
    if gathers == 0:
        return _result(False, (
            f"{where}: y was put together without threeaxes.comms.all_gather. Each rank "
            f"computes only its own {c} columns of Y; gather every rank's y_local with "
            f"comms.all_gather(y_local, \"tp\", dims=dims, dim=-1)."))
    if not _same(y, want_y):
        if tuple(y.shape) != (tokens, d_out):
            return _result(False, (
                f"{where}: y has shape {tuple(y.shape)}, not ({tokens}, {d_out}); put the "
                f"slices side by side along the last dim (dim=-1), not under each other."))
        return _result(False, f"{where}: y is not x @ w; are the slices in rank order?",
                       _max_diff(y, want_y))
    diff = max(_max_diff(w_shard, want_shard), _max_diff(y_local, want_local), _max_diff(y, want_y))
    return _result(True, (
        f"{where}: holds w[:, {r * c}:{(r + 1) * c}] ({w_shard.nbytes} B of {w.nbytes} B), "
        f"all-gathered {sent.total_bytes('all_gather')} B; y equals x @ w"), diff)


def tp_counts_mistake(counts, measured=(2, 2)) -> str | None:
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


__all__ = ["exercise_tensors", "column_split_check", "tp_counts_mistake", "tp_bytes_mistake"]
