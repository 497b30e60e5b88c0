"""References for drop 13 (choose (dp, tp, pp) for a 30B model on 32 GPUs).

The story and its scenario are the package's `threeaxes.scenarios.drop13`; `SCENARIO` is what
`autograder.references.sizing.grade_configuration` judges a student's
configuration against (feasibility, then closeness to the search's best,
computed at grading time).

The exercise graded by value:

* `model_parallel_floor(model, cluster)`: the smallest model-parallel degree
  tp * pp whose share of the model states (mixed-precision Adam, 16 bytes per
  parameter, no ZeRO) fits in one GPU, among the splits the rules allow: tp
  divides the heads and the key/value heads and stays inside a node, pp divides
  the layers, tp * pp divides the GPUs. `floor_mistake` names the usual slips
  (the optimizer forgotten, the master copy forgotten, a degree no rule allows,
  tp across nodes, GiB for GB). The hidden test asks it, beside the scenario's
  own pair, about pairs it draws at grading time (`draw_floor_case`).

The defence (`my_defence` for the student's own configuration, `rivals` for `RIVALS`) is
judged by `autograder.references.defence` against this scenario.

`floor_reference(model_spec, cluster_spec)` is the reference on the plain specs the
visible check stores (`threeaxes.scenarios.drop13.model_from`, `cluster_from`).
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from typing import Any  # Any: a student's answer

from threeaxes.cost import (
    CLUSTERS,
    MODELS,
    Cluster,
    GiB,
    Model,
    custom_model,
    divisors,
    get_cluster,
    get_model,
    model_state_bytes,
    valid_tp,
)
from threeaxes.grading import as_int
from threeaxes.scenarios.drop13 import RIVALS, SCENARIO, best_for_shape, cluster_from, model_from  # noqa: F401

__all__ = ["SCENARIO", "RIVALS", "DEFENCE_SETUP", "draw_floor_case", "model_parallel_floor",
           "floor_reference", "plain_floor", "floor_mistake"]

# what the defence's answer cell needs from the notebook before it (the catalogued mistakes
# run after these lines: autograder.references.defence)
DEFENCE_SETUP = [
    "from threeaxes.scenarios import drop13",
    "SCENARIO = drop13.SCENARIO",
    "model, cluster, GLOBAL_BATCH = SCENARIO['model'], SCENARIO['cluster'], SCENARIO['global_batch']",
    "s, h, L, N = model.seq_len, model.d_model, model.n_layers, model.n_params",
    "ASSUME = SCENARIO['assumptions']",
    "my_config = dict(dp=4, tp=2, pp=4, micro_batch=1, zero_stage=1, sequence_parallel=True)",
]

# head counts a drawn custom model may have (of 128 dimensions each): some divide 8, some not
DRAWN_HEADS = (12, 20, 24, 25, 32, 40, 48, 52, 56, 64, 96)


def draw_floor_case(rng: random.Random) -> tuple:
    """A (model, cluster, how) for the hidden test, drawn from `rng` (a `random.Random`) at
    grading time: a preset model or a custom one (any layer count, heads that 8 may not
    divide, grouped key/value heads or not) on 4 to 256 A100s or H100s, redrawn until its
    model states overflow one GPU and fit the cluster. `how` is the code that builds the
    pair again."""
    while True:
        if rng.random() < 0.4:
            name = rng.choice(sorted(MODELS))
            model, how = get_model(name), f"get_model({name!r})"
        else:
            n_heads = rng.choice(DRAWN_HEADS)
            kv_heads = rng.choice([None] + [k for k in (1, 2, 4, 8) if n_heads % k == 0])
            n_layers, d_model = rng.randint(8, 96), 128 * n_heads
            model = custom_model("a drawn model", n_layers, d_model, n_heads, n_kv_heads=kv_heads)
            how = (f"custom_model('a drawn model', n_layers={n_layers}, d_model={d_model}, "
                   f"n_heads={n_heads}, n_kv_heads={kv_heads})")
        kind, n_gpus = rng.choice(sorted(CLUSTERS)), rng.choice((4, 8, 16, 32, 64, 128, 256))
        cluster = get_cluster(kind, n_gpus=n_gpus)
        if model_state_bytes(model.n_params).total <= cluster.hbm_bytes:
            continue            # fits one GPU: the floor is 1 whatever one counts
        try:
            model_parallel_floor(model, cluster)
        except ValueError:      # too big for this cluster even split over every GPU
            continue
        return model, cluster, f"{how} on get_cluster({kind!r}, n_gpus={n_gpus})"


def _splits(model: Model, cluster: Cluster, allow_tp_across_nodes: bool = False) -> Iterator[tuple[int, int]]:
    """Every (tp, pp) the rules allow: tp from `valid_tp`, pp dividing the layers and GPUs / tp."""
    for tp in valid_tp(model, cluster, allow_tp_across_nodes):
        for pp in divisors(cluster.n_gpus // tp):
            if model.n_layers % pp == 0:
                yield tp, pp


def model_parallel_floor(model: Model, cluster: Cluster) -> int:
    """The reference: smallest allowed tp * pp whose model-state share fits one GPU."""
    fitting = [tp * pp for tp, pp in _splits(model, cluster)
               if model_state_bytes(model.n_params, tp=tp, pp=pp).total <= cluster.hbm_bytes]
    if not fitting:
        raise ValueError(f"{model.name}'s model states do not fit on {cluster} even split "
                         "over every GPU; add nodes")
    return min(fitting)


def floor_reference(model_spec: str | dict, cluster_spec: tuple[str, int] | list) -> int:
    """`model_parallel_floor` on the visible check's plain specs."""
    return model_parallel_floor(model_from(model_spec), cluster_from(cluster_spec))


def _floor_with(model: Model, cluster: Cluster, bytes_per_param: float, capacity: float | None = None,
                allow_tp_across_nodes: bool = False, splits: Iterable[tuple[int, int]] | None = None) -> int | None:
    capacity = cluster.hbm_bytes if capacity is None else capacity
    splits = _splits(model, cluster, allow_tp_across_nodes) if splits is None else splits
    fitting = [tp * pp for tp, pp in splits if bytes_per_param * model.n_params / (tp * pp) <= capacity]
    return min(fitting) if fitting else None


def _loose_splits(model: Model, cluster: Cluster, kv_heads: bool = True,
                  gpus: bool = True) -> Iterator[tuple[int, int]]:
    """The splits with one rule left out: tp dividing the key/value heads, or tp * pp the GPUs."""
    for tp in divisors(cluster.gpus_per_node):
        if model.n_heads % tp or (kv_heads and model.kv_heads % tp):
            continue
        for pp in divisors(model.n_layers):
            if not gpus or cluster.n_gpus % (tp * pp) == 0:
                yield tp, pp


def plain_floor(answer: Any, name: str = "model_parallel_floor(...)") -> int:
    return as_int(answer, name)


def floor_mistake(got: int, model: Model, cluster: Cluster) -> str | None:
    """None when `got` is right; otherwise a message naming the mistake."""
    want = model_parallel_floor(model, cluster)
    if got == want:
        return None
    where = f"for {model.name} on {cluster.n_gpus} GPUs of {cluster.hbm_bytes / 1e9:.0f} GB"
    if got == _floor_with(model, cluster, 4):
        return (f"{where} you got {got}: that counts 4 bytes per parameter (fp16 weights and "
                "gradients); you forgot the optimizer state, 12 more bytes per parameter "
                "(fp32 master copy and Adam's two moments): 16 in all")
    if got == _floor_with(model, cluster, 2):
        return (f"{where} you got {got}: that holds only the fp16 weights; training also keeps "
                "gradients (2 bytes) and the optimizer state (12 bytes) per parameter")
    if got == _floor_with(model, cluster, 12):
        return (f"{where} you got {got}: that counts 12 bytes per parameter; remember the fp32 "
                "master copy (4 bytes) beside Adam's two fp32 moments: 2 + 2 + 12 = 16")
    raw = math.ceil(model_state_bytes(model.n_params).total / cluster.hbm_bytes)
    if got == raw:
        return (f"{where} you got {got} = ceil(16N / GPU memory), but no allowed split has that "
                "many pieces: tp must divide the heads (and key/value heads) and stay inside a "
                "node, pp must divide the layers, tp * pp must divide the GPUs; take the "
                "smallest allowed product that fits")
    if got == _floor_with(model, cluster, 16, allow_tp_across_nodes=True):
        return (f"{where} you got {got}: that split puts tp across nodes; keep tp inside one "
                f"node of {cluster.gpus_per_node} GPUs")
    if got == _floor_with(model, cluster, 16, splits=_loose_splits(model, cluster, kv_heads=False)):
        return (f"{where} you got {got}: tp must divide the key/value heads (model.kv_heads = "
                f"{model.kv_heads}) as well as the query heads")
    if got == _floor_with(model, cluster, 16, splits=_loose_splits(model, cluster, gpus=False)):
        return (f"{where} you got {got}: tp * pp must divide the cluster's GPUs, so that "
                "dp = GPUs / (tp * pp) replicas fill it")
    if got == _floor_with(model, cluster, 16, capacity=cluster.hbm_bytes * GiB / 1e9):
        return (f"{where} you got {got}: GPU memory is cluster.hbm_bytes bytes (80 GB = 80e9), "
                "compare bytes with bytes")
    return (f"{where} you got {got}, which is not the smallest allowed tp * pp whose share of "
            "16 bytes per parameter fits one GPU")
