"""Drop 9 on the student's side: the runners of the shard-and-gather exercise."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["plain_vector", "gather_flat_results", "shard_gather_raw"]


def plain_vector(value: object) -> tuple[tuple[int, ...], list[float]] | str:
    """A tensor as (shape, values in float64); anything else as its type's name."""
    import torch

    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.detach().to(torch.float64).flatten().tolist()
    return type(value).__name__


def gather_flat_results(rank: int, world_size: int, gather_flat: Callable[..., Any],
                        cases: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """On fresh ranks (dp = world_size), for each case {"numel", "shards": one list of
    numbers per dp rank}: what gather_flat(this rank's shard, numel, dims) gave back, the
    collectives it made as (op, axis), or the error it raised. Raw values only."""
    import torch

    from threeaxes import trace
    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp=world_size)
    out: list[dict[str, Any]] = []
    for case in cases:
        shard = torch.tensor(case["shards"][dims.coord("dp")], dtype=torch.float64)
        entry: dict[str, Any] = {"gathered": None, "collectives": None, "error": None}
        with trace.record() as recorded:
            try:
                entry["gathered"] = plain_vector(gather_flat(shard, case["numel"], dims))
            except Exception as exc:  # noqa: BLE001 - the student's error is sent back as text
                entry["error"] = f"gather_flat raised {type(exc).__name__}: {exc}"
        entry["collectives"] = tuple((e.op, e.axis) for e in recorded.comms())
        out.append(entry)
        if entry["error"]:
            break     # a rank that failed may have left the others waiting in a collective
    return tuple(out)


def shard_gather_raw(rank: int, world_size: int, shard_flat: Callable[..., Any], gather_flat: Callable[..., Any],
                     vectors: Iterable[list[float]]) -> tuple[dict[str, Any], ...]:
    """On fresh ranks (dp = world_size), for each flat vector: this rank's shard, what
    gather_flat gave back and the collectives it made as (op, axis), or the error raised.
    Raw values only: the grader judges them (`gather_mistake`).

    Both run a student's functions on fresh ranks and send back raw values, never a
    verdict, since ranks started from a student's notebook run there:

    * `gather_flat_results`: each rank's stored shard through the student's
      `gather_flat`: what came back and the collectives it made (the visible check
      compares them with stored cases, `threeaxes.grading.visible`);
    * `shard_gather_raw`: the student's `shard_flat` then `gather_flat` on vectors
      the grader drew (the hidden test judges them, `autograder/references/drop09.py`).
    """
    import torch

    from threeaxes import comms, trace
    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp=world_size)
    out: list[dict[str, Any]] = []
    for values in vectors:
        flat = torch.tensor(values, dtype=torch.float64)
        entry: dict[str, Any] = {"shard": None, "gathered": None, "collectives": None, "error": None}
        try:
            shard = shard_flat(flat.clone(), dims.coord("dp"), world_size)
            entry["shard"] = plain_vector(shard)
        except Exception as exc:  # noqa: BLE001 - the student's error is sent back as text
            entry["error"] = f"shard_flat raised {type(exc).__name__}: {exc}"
        # communication: every rank says whether its shard is ready, so that no rank waits in
        # an all-gather that another rank never joins
        ready = comms.all_reduce(torch.tensor([float(entry["error"] is None)]), "dp", dims=dims)
        if ready.item() == world_size:
            with trace.record() as recorded:
                try:
                    entry["gathered"] = plain_vector(gather_flat(shard, flat.numel(), dims))
                except Exception as exc:  # noqa: BLE001
                    entry["error"] = f"gather_flat raised {type(exc).__name__}: {exc}"
            entry["collectives"] = tuple((e.op, e.axis) for e in recorded.comms())
        out.append(entry)
    return tuple(out)
