"""Scenario and reference checks for drop 11 (throughput lost on a bigger cluster).

The story: GPT-3 175B trained with tp = 8 inside each 8-GPU DGX A100 node (the
tensor-parallel size of Megatron-LM's 175B run, Narayanan et al. 2021, Table 1) moves to a cluster
twice as large whose nodes hold 4 A100s on NVLink and share one 200 Gb/s HDR
NIC per node (the DGX has one per GPU). The same (tp, pp) with twice the dp
and twice the global batch gives each replica the same work, yet every GPU
now trains far fewer tokens per second: the tp group straddles two nodes and
crosses them through one NIC. With one NIC per GPU, NCCL would spread the
group's rings over the 4 NICs of each node (`cost.network.nics_per_group`)
and the loss would be much smaller; the notebook shows both. Attention is
memory-efficient (the planner's default), so nothing is recomputed.

Everything here is data or a reference computed from `threeaxes.cost` at
grading time, so a change of the cost model changes the answers with it:

* `OLD_SCENARIO`, `NEW_SCENARIO`: the scenario dicts `grade_configuration`
  takes; `OLD_CONFIG`, `old_config_on(...)`: the layout that was moved.
* `moved_axes(old, new, old_dims, new_dims)`: the axes whose group ran inside a node
  before and crosses nodes after (`cost.network.group_inside_node`).
* `tp_wire_bytes(...)`: bytes one GPU sends in its tp all-reduces per step,
  from `cost.network.bytes_sent_per_gpu`; `tp_bytes_mistake` names the usual
  slips against it; `draw_bytes_case(rng)` draws the shapes the hidden test asks
  about at grading time.
"""
from __future__ import annotations

import math

from threeaxes.cost import a100_cluster, bytes_sent_per_gpu, get_model, group_inside_node
from threeaxes.cost.network import group_strides
from threeaxes.grading import as_choice, as_number
from threeaxes.grading import sizing

__all__ = ["MODEL", "OLD_CLUSTER", "NEW_CLUSTER", "OLD_BATCH", "NEW_BATCH", "OLD_CONFIG",
           "OLD_SCENARIO", "NEW_SCENARIO", "DROP_RANGE", "old_config_on",
           "moved_axes", "plain_axis", "axis_mistake", "tp_wire_bytes", "tp_bytes_mistake", "plain_bytes",
           "draw_bytes_case"]

MODEL = get_model("175B")
OLD_CLUSTER = a100_cluster(16)                     # 16 DGX A100 nodes, 8 GPUs each: 128 GPUs
# 64 nodes of 4 A100s: 256 GPUs, NVLink inside, one HDR NIC (25 GB/s each way) per node
NEW_CLUSTER = a100_cluster(64, gpus_per_node=4, nics_per_node=1)
OLD_BATCH, NEW_BATCH = 256, 512                    # sequences per step: doubled with dp
# the layout that ran well on the old cluster (tp = 8: one whole node)
OLD_CONFIG = dict(dp=2, tp=8, pp=8, micro_batch=1, zero_stage=1, recompute="none",
                  sequence_parallel=True)
ASSUMPTIONS: dict = {}                             # the planner's defaults, for both clusters
OLD_SCENARIO = sizing.scenario(MODEL, OLD_CLUSTER, OLD_BATCH, assumptions=ASSUMPTIONS)
NEW_SCENARIO = sizing.scenario(MODEL, NEW_CLUSTER, NEW_BATCH, assumptions=ASSUMPTIONS)
# the per-GPU throughput drop the story needs ("about 40%"); the notebook asserts it
DROP_RANGE = (0.30, 0.50)

AXES_BY_STRIDE = tuple(group_strides(1, 1, 1))   # the answer's choices: "tp", "dp", "pp"


def old_config_on(cluster) -> dict:
    """The old layout on another cluster: same tp and pp, dp fills the GPUs."""
    tp, pp = OLD_CONFIG["tp"], OLD_CONFIG["pp"]
    return {**OLD_CONFIG, "dp": cluster.n_gpus // (tp * pp)}


def moved_axes(old_cluster, new_cluster, old_dims: tuple, new_dims: tuple) -> list:
    """Axes whose group ran inside one node before and crosses nodes after."""
    before, after = group_strides(*old_dims), group_strides(*new_dims)
    return [axis for axis in AXES_BY_STRIDE
            if group_inside_node(*before[axis], old_cluster.gpus_per_node)
            and not group_inside_node(*after[axis], new_cluster.gpus_per_node)]


def plain_axis(answer, name: str = "moved_axis") -> str:
    return as_choice(answer, set(AXES_BY_STRIDE), name)


def axis_mistake(got: str, old_cluster, new_cluster, old_dims, new_dims) -> str | None:
    """None when `got` is the one axis that moved off NVLink; else what went wrong."""
    moved = moved_axes(old_cluster, new_cluster, old_dims, new_dims)
    if got in moved:
        return None
    before, after = group_strides(*old_dims), group_strides(*new_dims)
    inside_before = group_inside_node(*before[got], old_cluster.gpus_per_node)
    inside_after = group_inside_node(*after[got], new_cluster.gpus_per_node)
    if not inside_before and not inside_after:
        return (f"the {got} group already crossed nodes on the old cluster (its ranks are "
                f"{before[got][0]} apart, {before[got][1]} of them), so it did not move off "
                "NVLink: it was never on it")
    if inside_after:
        return f"the {got} group still fits inside one node of the new cluster"
    return f"{got!r} is not the axis that moved off NVLink"


def tp_wire_bytes(n_layers, d_model, seq_len, micro_batch, micro_batches, tp, pp,
                  bytes_per_value=2) -> float:
    """Bytes one GPU sends in its tensor-parallel all-reduces in one step.

    Each layer all-reduces the (micro_batch, seq_len, d_model) activation twice
    forward and twice backward (Shoeybi et al. 2019, Section 3; sequence
    parallelism's reduce-scatter + all-gather moves the same bytes), for every
    micro-batch, on the n_layers / pp layers of this GPU's stage; a ring
    all-reduce of S bytes sends 2 (tp - 1) / tp * S per GPU (Thakur et al. 2005).
    """
    activation = bytes_per_value * micro_batch * seq_len * d_model
    per_all_reduce = bytes_sent_per_gpu("all_reduce", activation, tp)
    return (n_layers // pp) * micro_batches * 4 * per_all_reduce


def tp_bytes_mistake(got: float, args: tuple) -> str | None:
    """None when `got` equals the reference for `args`; else the slip it matches."""
    want = tp_wire_bytes(*args)
    if math.isclose(got, want, rel_tol=1e-9):
        return None
    n_layers, d_model, seq_len, mbs, m, tp, pp = args[:7]
    activation = 2 * mbs * seq_len * d_model
    where = (f"for n_layers={n_layers}, d_model={d_model}, seq_len={seq_len}, "
             f"micro_batch={mbs}, micro_batches={m}, tp={tp}, pp={pp}")
    slips = [
        (want / 2, "half the bytes: either you counted only the two forward all-reduces per "
                   "layer (backward makes two more), or (tp - 1) / tp of the activation per "
                   "all-reduce, an all-gather's share (an all-reduce sends 2 (tp - 1) / tp)"),
        (want * pp, f"you counted all {n_layers} layers; this GPU holds only its stage's "
                    f"n_layers / pp = {n_layers // pp}"),
        (want / m, f"you counted one micro-batch; the stage runs all {m} of them each step"),
        (want * 2, "you counted 4-byte values; the activations travel in 2-byte bf16"),
        (want * tp / (2 * (tp - 1)) if tp > 1 else None,
         "you counted the whole activation per all-reduce; a ring all-reduce sends "
         "2 (tp - 1) / tp of it from each GPU"),
    ]
    for value, message in slips:
        if value is not None and math.isclose(got, value, rel_tol=1e-9):
            return f"{where}: {message}"
    return (f"{where}: got {got:.4g} bytes, expected {want:.4g}; one all-reduce here is of "
            f"{activation:g} bytes")


def plain_bytes(answer, name: str) -> float:
    return as_number(answer, name)


def draw_bytes_case(rng) -> tuple:
    """A (n_layers, d_model, seq_len, micro_batch, micro_batches, tp, pp) for the hidden
    test, drawn from `rng` (a `random.Random`) at grading time: pp divides the layers
    (each stage holds n_layers / pp of them) and tp >= 2 (tp = 1 sends nothing)."""
    pp = rng.choice((1, 2, 4, 8, 16))
    n_layers = pp * rng.randint(1, 12)
    d_model = 128 * rng.randint(4, 96)
    return (n_layers, d_model, rng.choice((512, 1024, 2048, 4096, 8192)), rng.randint(1, 4),
            rng.randint(1, 64), rng.choice((2, 4, 8)), pp)
