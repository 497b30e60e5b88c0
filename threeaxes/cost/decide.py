"""The cheatsheet's decision tree, walked on numbers.

    walk = walk_tree(get_model("30B"), get_cluster("a100-80gb", n_gpus=8), global_batch=256)
    walk.scheme        # "tp"
    walk.decisions     # each question, its yes/no, and the numbers behind it
    walk.result        # the planner's evaluation of the configuration the tree ends at"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from .constraints import divisors, valid_tp
from .memory import GB, model_state_bytes
from .planner import PlanResult, plan
from .presets import Cluster, Model, custom_model
from .verdict import Verdict, judge

__all__ = ["SCHEMES", "Decision", "TreeWalk", "model_of_size", "simplest_fit", "walk_tree"]

# what each end of the tree is called
SCHEMES = {
    "dp": "data parallelism alone",
    "fsdp": "FSDP / ZeRO-3 over every GPU",
    "tp": "tensor parallelism inside the node (data parallelism across nodes)",
    "3d": "3D: tensor inside nodes, pipeline across nodes, data on top",
}

# GPT-3's widths by size (Brown et al. 2020, Table 2.1): (parameters, d_model)
# and GPT-NeoX-20B's (Black et al. 2022, Table 1) between 13B and 175B
_WIDTHS = ((125e6, 768), (350e6, 1024), (760e6, 1536), (1.3e9, 2048), (2.7e9, 2560),
           (6.7e9, 4096), (13e9, 5140), (20e9, 6144), (175e9, 12288))
_HEAD_DIM = 128


class Decision(NamedTuple):
    question: str
    answer: bool
    numbers: str       # the arithmetic behind the answer, in words
    then: str          # where the tree goes next


class TreeWalk(NamedTuple):
    model: Model
    cluster: Cluster
    global_batch: int
    decisions: list      # [Decision] in the order asked
    scheme: str | None   # a key of SCHEMES; None when nothing fits
    config: dict | None  # the configuration the tree ends at (plan's keyword arguments)
    result: PlanResult | None  # plan(...) of that configuration (None when nothing fits)
    verdict: Verdict | None    # judge(...) against the search's best (None when nothing fits)
    message: str         # what to change when nothing fits, else ""

    @property
    def path(self) -> str:
        """The branch taken, e.g. "one GPU? no -> split layers? yes -> one node? yes -> tp"."""
        steps = [f"{d.question.split(':')[0]} {'yes' if d.answer else 'no'}" for d in self.decisions]
        return " -> ".join(steps + [self.scheme or "nothing fits"])


def model_of_size(billions: float, *, vocab_size: int = 51200, seq_len: int = 2048) -> Model:
    """A GPT-style shape with about `billions` x 1e9 parameters: the width of the
    nearest size in log scale among GPT-3's (Brown et al. 2020, Table 2.1; 5140
    rounded to whole heads) and GPT-NeoX-20B's, heads of 128, and as many layers (a multiple of 8 from 8 up)
    as bring 12 l h^2 plus the embeddings nearest the target."""
    if not billions > 0:
        raise ValueError(f"billions={billions!r} must be > 0 (parameters in billions)")
    target = billions * 1e9
    width = min(_WIDTHS, key=lambda row: abs(math.log(target / row[0])))[1]
    d_model = max(_HEAD_DIM, round(width / _HEAD_DIM) * _HEAD_DIM)
    per_layer = 12 * d_model ** 2
    layers = (target - (vocab_size + seq_len) * d_model) / per_layer
    step = 8 if layers >= 8 else 1
    n_layers = max(1, int(round(layers / step)) * step)
    return custom_model(f"{billions:g}B (GPT-style)", n_layers, d_model, d_model // _HEAD_DIM,
                        vocab_size=vocab_size, seq_len=seq_len)


def _zero_stages(scheme: str, pp: int) -> tuple[int, ...]:
    if scheme in ("dp", "fsdp"):
        return {"dp": (0,), "fsdp": (3,)}[scheme]     # plain replicas; every state sharded
    # the TP branch may shard over dp as well ("or FSDP"); 3D keeps ZeRO-1, the only stage
    # DeepSpeed's rule allows with pipelining, which the planner follows by default
    # (constraints.py; allow_sharded_pp lifts it)
    return (0, 1) if pp > 1 or scheme == "3d" else (0, 1, 2, 3)


def simplest_fit(model: Model, cluster: Cluster, global_batch: int, *, dp: int, tp: int, pp: int, scheme: str,
                 seq_len: int | None = None) -> tuple[dict | None, PlanResult]:
    """The first (config, PlanResult) that fits, plainest first: micro-batch 1, no ZeRO
    beyond what the scheme implies, recomputation none, then selective, then full,
    then the next ZeRO stage. (None, lightest PlanResult) when none fits."""
    lightest: PlanResult | None = None
    for zero in _zero_stages(scheme, pp):
        for recompute in ("none", "selective", "full"):
            config: dict[str, Any] = dict(dp=dp, tp=tp, pp=pp, micro_batch=1, zero_stage=zero,
                                          recompute=recompute)
            result = plan(model, cluster, global_batch, seq_len, **config)
            if result.fits:
                return config, result
            if lightest is None or result.memory.total < lightest.memory.total:
                lightest = result
    assert lightest is not None   # every scheme has a ZeRO stage to try
    return None, lightest


def _gb(x: float) -> str:
    return f"{x / GB:,.1f} GB"


def walk_tree(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *,
              split_layers: bool = True) -> TreeWalk:
    """Walk the cheatsheet's tree for `model` on `cluster`; `split_layers=False` is a
    team that will not use tensor or pipeline parallelism (ZeRO/FSDP instead).

    The tree (one question per level, as the practice set's cheatsheet draws it):

    1. Do the model states fit one GPU? The 16N rule: mixed-precision Adam keeps
       2 + 2 + 12 bytes per parameter (ZeRO, Rajbhandari et al. 2020, Section 3.1;
       `model_state_bytes`). Yes, and the cost model finds the activations room
       too: data parallelism alone.
    2. Will the team split layers (TP/PP)? No: FSDP / ZeRO-3 over every GPU
       (ZeRO Section 5.3: each GPU keeps 16N / N_d bytes).
    3. Do the model states fit one node (16N over the node's GPUs)? Yes: tensor
       parallelism inside the node, the smallest tp that fits, data parallelism
       across nodes. No: 3D, tp fills the node, the smallest pp that fits, dp on top.

    Each end is a (dp, tp, pp) with the plainest settings that fit in the cost
    model's memory (`plan`: states plus activations): micro-batch 1, then
    recomputation (none, selective, full) before any ZeRO stage the scheme does not
    already imply. The planner evaluates it; `judge` compares it with the search's
    best.
    """
    n, per_node, hbm = cluster.n_gpus, cluster.gpus_per_node, cluster.hbm_bytes
    states = model_state_bytes(model.n_params).total       # 16N: 2 + 2 + 12 bytes each
    decisions: list[Decision] = []

    def end(scheme: str, config: dict, result: PlanResult) -> TreeWalk:
        """The walk ending at `config`, judged against the search's best."""
        verdict = judge(model, cluster, global_batch, seq_len, config=config)
        return TreeWalk(model, cluster, global_batch, decisions, scheme, config, result, verdict,
                        "")

    # 1. one GPU, by the 16N rule, then the cost model's memory with activations
    config: dict | None = None
    result: PlanResult | None = None
    if states <= hbm:
        config, result = simplest_fit(model, cluster, global_batch, dp=n, tp=1, pp=1,
                                      scheme="dp", seq_len=seq_len)
    fits_one = config is not None
    numbers = (f"16N = 16 x {model.n_params / 1e9:.2f}B = {_gb(states)} of model states "
               f"{'<=' if states <= hbm else '>'} {_gb(hbm)} per GPU")
    if states <= hbm:
        assert result is not None   # planned above
        numbers += (f"; with activations {_gb(result.memory.total)} at {result.label}"
                    + ("" if fits_one else " does not fit even with full recomputation"))
    decisions.append(Decision("one GPU: do the model states fit one GPU?", fits_one, numbers,
                              "data parallelism alone" if fits_one else "split the model"))
    if fits_one:   # config and result are set
        return end("dp", config, result)  # type: ignore[arg-type]

    # 2. will the team split layers? if not, shard the states over every GPU
    decisions.append(Decision(
        "split layers: will the team use tensor or pipeline parallelism?", split_layers,
        "the team's choice" + ("" if split_layers else
                               f"; ZeRO-3 over {n} GPUs keeps 16N / {n} = {_gb(states / n)} each"),
        "ask about the node" if split_layers else "FSDP / ZeRO-3"))
    if not split_layers:
        config, result = simplest_fit(model, cluster, global_batch, dp=n, tp=1, pp=1,
                                      scheme="fsdp", seq_len=seq_len)
        if config is None:
            return TreeWalk(model, cluster, global_batch, decisions, None, None, None, None,
                            f"ZeRO-3 over every GPU: even the lightest setting ({result.label}) "
                            f"needs {_gb(result.memory.total)} per GPU of {_gb(hbm)}; add GPUs")
        return end("fsdp", config, result)

    # 3. one node: the states spread over the node's GPUs
    fits_node = states / per_node <= hbm
    decisions.append(Decision(
        "one node: do the model states fit one node?", fits_node,
        f"16N / {per_node} GPUs = {_gb(states / per_node)} "
        f"{'<=' if fits_node else '>'} {_gb(hbm)} per GPU",
        "tensor parallelism inside the node" if fits_node else "3D"))
    tps = valid_tp(model, cluster)
    if fits_node:
        for tp in tps:                                      # the smallest tp that fits
            if states / tp <= hbm:
                config, result = simplest_fit(model, cluster, global_batch, dp=n // tp, tp=tp,
                                              pp=1, scheme="tp", seq_len=seq_len)
                if config is not None:
                    return end("tp", config, result)
        # no tp the heads allow fits (or the activations never do): pipeline inside the node
        decisions.append(Decision(
            f"tp: does a tp in {tps} (dividing {model.n_heads} heads) fit?", False,
            f"16N / tp = {_gb(states)} / {max(tps)} = {_gb(states / max(tps))} at the largest, "
            f"with activations too much for {_gb(hbm)}" if states / max(tps) <= hbm else
            f"16N / tp = {_gb(states)} / {max(tps)} = {_gb(states / max(tps))} > {_gb(hbm)}",
            "add pipeline stages"))
    node_tp = max(tps)
    for pp in divisors(n // node_tp)[1:]:                   # the smallest pp > 1 that fits
        if model.n_layers % pp:
            continue
        config, result = simplest_fit(model, cluster, global_batch, dp=n // (node_tp * pp),
                                      tp=node_tp, pp=pp, scheme="3d", seq_len=seq_len)
        if config is not None:
            return end("3d", config, result)
    return TreeWalk(model, cluster, global_batch, decisions, None, None, None, None,
                    f"no pipeline depth makes {model.name} fit {n} GPUs of {_gb(hbm)}; add GPUs")
