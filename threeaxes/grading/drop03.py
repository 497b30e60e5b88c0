"""Drop 3 on the student's side: the runners of its exercises."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from threeaxes import trace
from threeaxes.dims import ParallelDims
from threeaxes.grading import plain_tensor
from threeaxes.toy import ToyConfig

__all__ = ["exercise_tensors", "column_split_outputs", "tp_block_collectives"]


def exercise_tensors(tokens: int, d_in: int, d_out: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The (x, w) every rank of the column-split exercise receives: x (tokens,
    d_in) and w (d_in, d_out), float64 from a fixed seed, the same on every rank.

    `column_split_outputs` runs a student's `column_parallel_matmul(x, w, dims)` on
    fresh tp ranks and sends back what it returned, as plain numbers, with the
    collectives it made: no verdict is decided on a rank, since ranks started from a
    student's notebook run there. The grader compares them with the column split it
    slices itself (`autograder/references/drop03.py`); the visible check compares
    them with stored cases (`threeaxes.grading.visible`).

    `tp_block_collectives` is a measurement the grader makes on ranks of its own (no
    student code runs there): the all-reduces of one tensor-parallel block, counted
    and sized by the trace.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, d_in, dtype=torch.float64, generator=gen)
    w = torch.randn(d_in, d_out, dtype=torch.float64, generator=gen)
    return x, w


def column_split_outputs(rank: int, world_size: int, student_fn: Callable[..., Any], tokens: int = 3, d_in: int = 4,
                         d_out: int = 6, seed: int = 0) -> dict[str, Any]:
    """On one tp rank: `student_fn(x, w, dims)`, run to the end on every rank before
    anything is judged (so no rank waits on another). Returns plain values: {"rank",
    "error", "returned" (type name), "outputs" (each returned value, `plain_tensor`),
    "collectives" ([[op, axis, bytes]] made through threeaxes.comms)}."""
    dims = ParallelDims.init(tp=world_size)
    x, w = exercise_tensors(tokens, d_in, d_out, seed)
    result: dict[str, Any] = {"rank": rank, "error": None, "returned": None, "outputs": [], "collectives": []}
    try:
        with trace.record() as sent:
            got = student_fn(x.clone(), w.clone(), dims)
    except Exception as exc:  # noqa: BLE001 - the student's code; report it, do not crash the rank
        return {**result, "error": f"{type(exc).__name__}: {exc}"}
    result["returned"] = type(got).__name__
    if isinstance(got, (tuple, list)):
        result["outputs"] = [plain_tensor(v) for v in got]
    result["collectives"] = [[e.op, e.axis, e.bytes] for e in sent.comms()]
    return result


def tp_block_collectives(rank: int, world_size: int, cfg: ToyConfig, batch: int) -> tuple[int, int, list[int]]:
    """Measured on `world_size` tp ranks (the grader's own ranks): block 0 of
    ToyTransformer(cfg, seed=0) cut by TPBlock, one forward and one backward of a
    (batch, seq_len, d_model) input. Returns (all-reduces forward, all-reduces
    backward, sorted distinct byte counts handed to them)."""
    from threeaxes.tensor_parallel import TPBlock
    from threeaxes.toy import ToyTransformer

    dims = ParallelDims.init(tp=world_size)
    block = TPBlock.from_block(ToyTransformer(cfg, seed=0).blocks[0], cfg, dims)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype,
                    generator=torch.Generator().manual_seed(1), requires_grad=True)
    with trace.record() as forward:
        y = block(x)
    with trace.record() as backward:
        y.sum().backward()
    return (forward.count("all_reduce", "tp"), backward.count("all_reduce", "tp"),
            sorted({e.bytes for e in forward.comms() + backward.comms()}))
