"""Drop 8 on the grader's side of the ranks: what a real layout and a real step measure."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["mesh_layout_groups", "traced_counts"]


def mesh_layout_groups(rank: int, world_size: int, dp: int, tp: int, pp: int) -> dict[str, list[int] | int | None]:
    """On fresh ranks: the groups and pipeline neighbours the DeviceMesh built for this
    rank, as plain lists and ints. No student code runs here: the grader's reference.

    `check_on_ranks` starts only functions of `threeaxes.grading`, so the two rank
    functions the hidden tests trust live here. Neither runs any student code, and
    both send back raw plain values for the grader to compare with an answer
    (`autograder/references/drop08.py`):

    * `mesh_layout_groups`: the groups and pipeline neighbours the DeviceMesh built;
    * `traced_counts`: the collectives each rank's trace counted in one real step.

    Each measures what an exercise asks the student to work out, so each is on that
    exercise's list of what an answer may not call (grading.json, "forbid").
    """
    import torch.distributed as dist

    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp, tp, pp)
    real: dict[str, list[int] | int | None] = {
        axis: sorted(dist.get_process_group_ranks(dims.group(axis))) for axis in ("dp", "tp", "pp")}
    real.update(prev=dims.prev_rank, next=dims.next_rank)
    return real


def traced_counts(rank: int, world_size: int,
                  runs: Iterable[tuple[int, int, int, int, int]]) -> tuple[dict[str, Any], ...]:
    """On fresh ranks: for each run (dp, tp, pp, m, n_layers), one real `train_3d` step
    of a small toy model; this rank's stage, parameter tensors and the collectives its
    trace counted, as plain values. No student code runs here: the grader's reference."""
    from threeaxes.toy import ToyConfig, make_batch
    from threeaxes.train import train_3d

    out: list[dict[str, Any]] = []
    for dp, tp, pp, m, n_layers in runs:
        cfg = ToyConfig(seq_len=8, n_layers=n_layers)
        result = train_3d(rank, world_size, cfg, [make_batch(cfg, dp * m, seed=0)],
                          dp=dp, tp=tp, pp=pp, m=m)
        trace = result["trace"]
        out.append({"stage": result["coords"]["pp"], "n_tensors": len(result["params"]),
                    "counts": {"tp": trace.count("all_reduce", "tp"), "dp": trace.count("all_reduce", "dp"),
                               "pp": trace.count("send", "pp")}})
    return tuple(out)
