"""Drop 14's scenario (defend a (dp, tp, pp) tuple for a 70B
model on 64 GPUs) and the changes to the job the notebook tries."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from threeaxes.cost import get_cluster, get_model
from threeaxes.scenarios import scenario as sizing_scenario

__all__ = ["SCENARIO", "RIVALS", "JOB_CHANGES", "changed_scenario"]

SCENARIO = sizing_scenario(get_model("70B"), get_cluster("a100-80gb", n_nodes=8), 1024)

# the defence's rivals: a deep pipeline with no data parallelism, ZeRO-3 with no pipeline,
# and a tensor-parallel group wider than a node
RIVALS = {
    "deep_pipeline_no_dp": dict(dp=1, tp=8, pp=8, micro_batch=1),
    "zero3_no_pipeline": dict(dp=64, tp=1, pp=1, micro_batch=1, zero_stage=3),
    "tp_across_nodes": dict(dp=4, tp=16, pp=1, micro_batch=1, zero_stage=1),
}

# name -> what changes: the cluster's fields, the global batch, the context
JOB_CHANGES: dict[str, dict[str, Any]] = {
    "as given": {},
    "H100 nodes": {"gpu": "h100-80gb"},
    "4x faster network between nodes": {"inter_node_scale": 4},
    "one network card per node (not one per GPU)": {"nics_per_node": 1},
    "a quarter of the batch (256 sequences)": {"global_batch": 256},
    "twice the context (8192 tokens, half the sequences)": {"seq_len": 8192, "global_batch": 512},
}


def changed_scenario(name: str) -> dict:
    """SCENARIO with one of `JOB_CHANGES` applied.

    The scenario: Llama 2 70B on eight DGX A100-style nodes of 8 A100 80GB
    GPUs, a global batch of 1,024 sequences of its 4,096-token context (the
    4M-token batch of Touvron et al. 2023b, Table 1).

    `RIVALS` are the layouts the core's defence asks about (the student says what stops or
    slows each first, with its number). `JOB_CHANGES` are the changes to the job the notebook tries ("what would change
    the choice"); `changed_scenario` builds each.
    """
    change = JOB_CHANGES[name]
    cluster = SCENARIO["cluster"]
    if "gpu" in change:
        cluster = get_cluster(change["gpu"], n_nodes=cluster.n_nodes)
    if "inter_node_scale" in change:
        cluster = replace(cluster, inter_node_bandwidth=cluster.inter_node_bandwidth
                          * change["inter_node_scale"])
    if "nics_per_node" in change:
        cluster = replace(cluster, nics_per_node=change["nics_per_node"])
    return {**SCENARIO, "cluster": cluster,
            "global_batch": change.get("global_batch", SCENARIO["global_batch"]),
            "seq_len": change.get("seq_len", SCENARIO["seq_len"])}
