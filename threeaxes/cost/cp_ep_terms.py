"""The planner's terms for context parallelism (cp) and expert parallelism (ep):
what ``evaluate`` adds to a (dp, tp, pp) configuration when cp or ep > 1. With
cp = ep = 1 (and etp = tp) each function gives what the three-axis planner
always gave, so every three-axis result is unchanged."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import context_parallel_time
from .experts import expert_all_to_all_time
from .memory import ModelStateBytes, model_state_bytes
from .network import all_to_all_link, group_link

if TYPE_CHECKING:
    from .presets import Cluster, Model

# evaluate's PlanContext: evaluate imports this module, so its name cannot come here
_PlanContext = Any

__all__ = ["state_bytes", "gradient_groups", "cp_comm_time", "ep_comm_time"]


def state_bytes(model: Model, *, dp: int, tp: int, pp: int, cp: int, ep: int, etp: int, zero_stage: int,
                precision: str) -> ModelStateBytes:
    """Parameters, gradients and optimizer states per GPU (ZeRO's accounting,
    Rajbhandari et al. 2020, Section 5 and Figure 1, applied to each part).

    - model states: the dense weights are split by tp and pp and, under ZeRO,
      sharded over the dp x cp ranks that hold the same weights (Megatron-LM's
      distributed optimizer shards over its data-parallel group with context
      parallelism); the routed experts are split by etp, ep and pp and sharded
      over the experts' data-parallel group edp (``placement.layout_strides``).
    - gradients: the dense ones reduced over dp x cp, the experts' over edp, each
      group at the link its ranks reach (``network.group_link``).
    - context parallelism, per layer and micro-batch: ``context.context_parallel_time``
      for this rank's heads (the tp rank's h/t query and k/t key/value widths); the
      ring hides behind the attention it overlaps (Liu et al. 2023, Section 3).
    - expert parallelism, per MoE layer and micro-batch: four all-to-alls of the
      tokens this rank holds, b s / (cp t) with sequence parallelism, k copies each
      (``experts.expert_all_to_all_time``; Lepikhin et al. 2021, Section 2.3), at
      the bandwidth an all-to-all gets across nodes (``network.all_to_all_link``).
    """
    experts = model.expert_params
    dense = model_state_bytes(model.n_params - experts, dp=dp * cp, tp=tp, pp=pp,
                              zero_stage=zero_stage, precision=precision)
    if not experts:
        return dense
    edp = tp * cp * dp // (etp * ep)
    exp = model_state_bytes(experts, dp=edp, tp=etp * ep, pp=pp, zero_stage=zero_stage,
                            precision=precision)
    return ModelStateBytes(*(a + b for a, b in zip(dense, exp)))


def gradient_groups(model: Model, cluster: Cluster, groups: dict[str, tuple[int, int]], *, tp: int, pp: int,
                    ep: int, etp: int) -> list:
    """[(weights per GPU, group size, Link)] of each data-parallel reduction a step
    runs: the dense weights over dp x cp, the experts' over edp. The caller prices
    the gradients at their bytes and any gathered weights at theirs."""
    experts = model.expert_params
    out = []
    stride, size = groups["dp_cp"]
    if size > 1:
        out.append(((model.n_params - experts) / (tp * pp), size,
                    group_link(cluster, stride, size)))
    stride, size = groups["edp"]
    if experts and size > 1:
        out.append((experts / (etp * ep * pp), size, group_link(cluster, stride, size)))
    return out


def cp_comm_time(ctx: _PlanContext, groups: dict[str, tuple[int, int]], *, tp: int, cp: int, mbs: int, m: int,
                 layers_here: float, cp_mode: str) -> float:
    """Seconds of context-parallel exchange on the critical path of one step: every
    layer of this stage, every micro-batch, forward and backward."""
    if cp == 1:
        return 0.0
    model, s = ctx.model, ctx.seq_len
    # the ring and the all-gather pass along a ring; Ulysses' head swap is an all-to-all
    link = (all_to_all_link if cp_mode == "all_to_all" else group_link)(ctx.cluster,
                                                                          *groups["cp"])
    kv = model.d_model * model.kv_heads // model.n_heads
    # this rank's attention, forward and backward: 12 h s FLOPs per token and layer
    # (PaLM App. B) over its b s / cp tokens and h / t of the width
    attention = 12 * model.d_model * s * mbs * s / (cp * tp) / (ctx.peak * ctx.efficiency)
    per_layer = context_parallel_time(s, mbs, model.d_model // tp, cp, link, mode=cp_mode,
                                      kv_width=max(1, kv // tp), dtype_bytes=ctx.act_dtype_bytes,
                                      attention_seconds=attention)
    return layers_here * m * per_layer


def ep_comm_time(ctx: _PlanContext, groups: dict[str, tuple[int, int]], *, tp: int, cp: int, ep: int, mbs: int,
                 m: int, pp: int, sequence_parallel: bool) -> float:
    """Seconds of the MoE layers' all-to-alls in one step on this stage."""
    moe = ctx.model.moe
    if moe is None or ep == 1:
        return 0.0
    link = all_to_all_link(ctx.cluster, *groups["ep"])
    tokens = mbs * ctx.seq_len // cp // (tp if sequence_parallel else 1)
    per_layer = expert_all_to_all_time(tokens, ctx.model.d_model, moe.top_k, ep, link,
                                       dtype_bytes=ctx.act_dtype_bytes)
    return moe.layers(ctx.model.n_layers) / pp * m * per_layer
