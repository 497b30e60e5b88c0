"""Drop 13's scenario (choose (dp, tp, pp) for a 30B model on
32 GPUs), the notebook's alternatives, and how the visible check builds its cases."""
from __future__ import annotations

from threeaxes.cost import custom_model, get_cluster, get_model, search
from threeaxes.cost.planner import PlanResult
from threeaxes.cost.presets import Cluster, Model
from threeaxes.scenarios import scenario as sizing_scenario

__all__ = ["SCENARIO", "RIVALS", "best_for_shape", "model_from", "cluster_from"]

SCENARIO = sizing_scenario(get_model("30B"), get_cluster("a100-80gb", n_nodes=4), 512)

# the defence's rivals: ZeRO-3 over every GPU with no model parallelism, and a
# tensor-parallel group wider than a node
RIVALS = {
    "zero3_only": dict(dp=32, tp=1, pp=1, micro_batch=1, zero_stage=3),
    "tp_across_nodes": dict(dp=2, tp=16, pp=1, micro_batch=1, zero_stage=1),
}


def best_for_shape(scenario: dict, dp: int, tp: int, pp: int) -> PlanResult | None:
    """The fastest fitting configuration with this (dp, tp, pp), or None if none fits.

    The scenario: LLaMA's 33B model ("30B") on four DGX A100-style nodes of 8
    A100 80GB GPUs, a global batch of 512 sequences of its 2,048-token context.

    `RIVALS` are the layouts the core's defence asks about (the student says what stops or
    slows each first, with its number). `best_for_shape(scenario, dp, tp, pp)` is the fastest fitting configuration of
    one (dp, tp, pp) shape, from the library's `search` (the notebook's
    alternatives; drop 14 uses it too). `model_from` and `cluster_from` build a
    model and a cluster from the plain specs the visible check stores.
    """
    found = [r for r in search(scenario["model"], scenario["cluster"], scenario["global_batch"],
                               scenario["seq_len"], only_fitting=True,
                               **scenario.get("assumptions", {}))
             if (r.dp, r.tp, r.pp) == (dp, tp, pp)]
    return found[0] if found else None


def model_from(spec: str | dict) -> Model:
    """A preset's name ("30B"), or the keyword arguments of `custom_model` as a dict."""
    return get_model(spec) if isinstance(spec, str) else custom_model(**spec)


def cluster_from(spec: tuple[str, int] | list) -> Cluster:
    """[kind, n_gpus], e.g. ["a100-80gb", 32]."""
    kind, n_gpus = spec
    return get_cluster(kind, n_gpus=n_gpus)
