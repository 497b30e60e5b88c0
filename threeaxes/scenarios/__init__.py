"""The sizing drops' scenarios (drops 10 to 14), one module per drop, as a notebook reads them:

    from threeaxes.scenarios import drop12
    drop12.SCENARIO["model"], drop12.CURRENT

A scenario is course content built from the cost model; it holds no check: what judges an answer
in it is in `threeaxes.grading` (the visible checks) and `autograder/references/` (the hidden tests)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threeaxes.cost.presets import Cluster, Model

__all__ = ["scenario"]


def scenario(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *,
             assumptions: dict | None = None, search_options: dict | None = None) -> dict:
    """A sizing scenario, as a dict the notebooks can unpack: the planner's
    `assumptions` (e.g. {"usable_memory_fraction": 0.9}) go to plan and search
    alike, `search_options` (e.g. {"micro_batch_sizes": (1,)}) to the search only: the
    dict each drop keeps as its `SCENARIO` (a model, a cluster, a global batch; the story's
    layouts sit beside it)."""
    return {"model": model, "cluster": cluster, "global_batch": global_batch, "seq_len": seq_len,
            "assumptions": dict(assumptions or {}), "search_options": search_options}
