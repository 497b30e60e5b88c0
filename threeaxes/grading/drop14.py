"""Drop 14 on the student's side: the scenario (defend a (dp, tp, pp) tuple for a 70B
model on 64 GPUs) and the changes to the job the notebook tries.

The scenario: Llama 2 70B on eight DGX A100-style nodes of 8 A100 80GB
GPUs, a global batch of 1,024 sequences of its 4,096-token context (the
4M-token batch of Touvron et al. 2023b, Table 1).

`JOB_CHANGES` are the changes to the job the notebook tries ("what would change
the choice"); `changed_scenario` builds each. The references the hidden tests
use are on the instructor's side (`autograder/references/drop14.py`).
"""
from __future__ import annotations

from dataclasses import replace

from threeaxes.cost import get_cluster, get_model
from threeaxes.grading import sizing

__all__ = ["SCENARIO", "JOB_CHANGES", "changed_scenario"]

SCENARIO = sizing.scenario(get_model("70B"), get_cluster("a100-80gb", n_nodes=8), 1024)

# name -> what changes: the cluster's fields, the global batch, the context
JOB_CHANGES = {
    "as given": {},
    "H100 nodes": {"gpu": "h100-80gb"},
    "4x faster network between nodes": {"inter_node_scale": 4},
    "one network card per node (not one per GPU)": {"nics_per_node": 1},
    "a quarter of the batch (256 sequences)": {"global_batch": 256},
    "twice the context (8192 tokens, half the sequences)": {"seq_len": 8192, "global_batch": 512},
}


def changed_scenario(name: str) -> dict:
    """SCENARIO with one of `JOB_CHANGES` applied."""
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
