"""One configuration's memory per GPU and step time, by term: the model the
planner applies (``planner.plan`` checks the rules, then calls ``evaluate``;
``planner.search`` calls it for every configuration)."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .activations import ACTIVATION_COUNTS, first_stage_activation_bytes
from .bubble import bubble_fraction, bubble_overhead
from .constraints import INTERLEAVE_RULES, interleave_group
from .cp_ep_terms import cp_comm_time, ep_comm_time, gradient_groups, state_bytes
from .dp_exchange import dp_exchange_time
from .kernel_time import layer_time, logits_time
from .memory import PRECISIONS, MemoryBreakdown
from .network import all_gather_time, all_reduce_time, group_link, p2p_time
from .placement import layout_strides
from .stage_memory import ACTIVATION_SCALE

if TYPE_CHECKING:
    from .presets import Cluster, Model

__all__ = ["TimeBreakdown", "PlanResult", "PlanContext", "evaluate", "DEFAULT_COMPUTE_EFFICIENCY",
           "SHAPES"]

# Fraction of peak FLOP/s the matmuls reach. Published end-to-end figures on
# A100 clusters, which also pay for communication and bubbles, are 44-52% of
# peak (Narayanan et al. 2021, Table 1) and 43.7-57.0% HFU (Korthikanti et al.
# 2022, Table 5); compute alone must run faster than that, so 0.6 is assumed.
DEFAULT_COMPUTE_EFFICIENCY = 0.6
# compute_efficiency=SHAPES times every layer from its shard's shapes instead
# (threeaxes.cost.kernel_time); it is what reproduces Narayanan et al. 2021,
# Table 1 (threeaxes.cost.published).
SHAPES = "shapes"


class TimeBreakdown(NamedTuple):
    compute: float
    tp_comm: float
    pp_comm: float
    dp_comm: float
    bubble: float
    total: float
    cp_comm: float = 0.0       # context parallelism's exchange (cp_ep_terms)
    ep_comm: float = 0.0       # expert parallelism's all-to-alls (cp_ep_terms)


class PlanResult(NamedTuple):
    dp: int
    tp: int
    pp: int
    micro_batch: int
    micro_batches: int
    zero_stage: int
    recompute: str
    virtual_stages: int
    sequence_parallel: bool
    memory: MemoryBreakdown
    capacity: float            # usable bytes per GPU
    fits: bool
    time: TimeBreakdown
    tokens_per_second: float
    mfu: float
    bubble_fraction: float     # idle share of the step's wall time
    cp: int = 1                # context-parallel ranks (the sequence split)
    ep: int = 1                # expert-parallel ranks
    etp: int | None = None     # the experts' tensor parallelism (None: tp)
    cp_mode: str = "ring"

    @property
    def label(self) -> str:
        extras = [f"cp={self.cp}" + ("" if self.cp_mode == "ring" else f"({self.cp_mode})")
                  if self.cp > 1 else "",
                  f"ep={self.ep}" if self.ep > 1 else "",
                  f"etp={self.etp}" if self.etp not in (None, self.tp) else "",
                  f"zero{self.zero_stage}" if self.zero_stage else "",
                  f"rc={self.recompute}" if self.recompute != "none" else "",
                  f"v={self.virtual_stages}" if self.virtual_stages > 1 else "",
                  "sp" if self.sequence_parallel else ""]
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} mbs={self.micro_batch} "
                f"m={self.micro_batches} " + " ".join(e for e in extras if e)).strip()


class PlanContext:
    """What stays fixed across configurations: model, cluster, batch, assumptions."""

    def __init__(self, model: Model, cluster: Cluster, global_batch: int, seq_len: int | None,
                 precision: str, compute_efficiency: float | str, dp_overlap: float,
                 usable_memory_fraction: float, pp_scatter_gather: bool = False,
                 flash_attention: bool = True, interleave: str = "flexible",
                 activation_count: str = "korthikanti") -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r}; choose precision in {set(PRECISIONS)}")
        self.shapes = isinstance(compute_efficiency, str)
        if self.shapes and compute_efficiency != SHAPES:
            raise ValueError(f"compute_efficiency={compute_efficiency!r}; give a fraction "
                             f"in (0, 1] or {SHAPES!r}")
        if not isinstance(compute_efficiency, str) and not 0 < compute_efficiency <= 1:
            raise ValueError(f"compute_efficiency={compute_efficiency} must be in (0, 1] "
                             f"(or {SHAPES!r} to time each layer from its shapes)")
        self.pp_scatter_gather = bool(pp_scatter_gather)
        if interleave not in INTERLEAVE_RULES:
            raise ValueError(f"interleave={interleave!r}; choose interleave in {set(INTERLEAVE_RULES)}")
        self.interleave = interleave
        self.flash_attention = bool(flash_attention)
        if activation_count not in ACTIVATION_COUNTS:
            raise ValueError(f"activation_count={activation_count!r}; choose activation_count "
                             f"in {set(ACTIVATION_COUNTS)}")
        if activation_count == "as_built" and not model.gated_mlp:
            raise ValueError(f"activation_count='as_built' counts SwiGLU layers and "
                             f"{model.name}'s MLP is not gated: use 'korthikanti'")
        self.activation_count = activation_count
        self.shaped: dict[tuple, tuple[float, float]] = {}   # (tp, mbs, recompute, sp) -> (layer s, head s)
        if not 0 <= dp_overlap <= 1:
            raise ValueError(f"dp_overlap={dp_overlap} must be in [0, 1]")
        if not 0 < usable_memory_fraction <= 1:
            raise ValueError(f"usable_memory_fraction={usable_memory_fraction} must be in (0, 1]")
        if isinstance(global_batch, bool) or int(global_batch) != global_batch or global_batch < 1:
            raise ValueError(f"global_batch={global_batch!r} must be a positive integer "
                             "(sequences per step)")
        self.model, self.cluster = model, cluster
        self.global_batch = int(global_batch)
        self.seq_len = model.seq_len if seq_len is None else int(seq_len)
        if self.seq_len < 1:
            raise ValueError(f"seq_len={seq_len!r} must be >= 1")
        self.precision = precision
        self.act_dtype_bytes = PRECISIONS[precision][0]
        self.act_scale = ACTIVATION_SCALE[precision]
        self.param_dtype_bytes, self.grad_dtype_bytes = PRECISIONS[precision][:2]
        self.efficiency = compute_efficiency
        self.dp_overlap = dp_overlap
        self.capacity = cluster.hbm_bytes * usable_memory_fraction
        l, h, s = model.n_layers, model.d_model, self.seq_len
        self.tokens = self.global_batch * s
        attention_per_token = 12.0 * l * h * s            # PaLM App. B
        # a mixture of experts runs only the weights a token meets (experts.active_params)
        self.active = getattr(model, "active_params", model.n_params)
        self.model_flops = self.tokens * (6.0 * self.active + attention_per_token)
        # extra work per token that recomputation re-runs (Korthikanti App. A:
        # eq. 8 for selective, a second forward of the layers for full, eq. 3)
        self.recompute_flops = {
            "none": 0.0,
            "selective": self.tokens * 12.0 * l * h * s,
            "full": self.tokens * (2.0 * (model.layer_params - (model.n_params - self.active))
                                   + 4.0 * l * h * s),
        }
        self.n_gpus = cluster.n_gpus
        self.peak = cluster.peak_flops


def evaluate(ctx: PlanContext, dp: int, tp: int, pp: int, mbs: int, zero: int, recompute: str, v: int,
             sp: bool, cp: int = 1, ep: int = 1, etp: int | None = None, cp_mode: str = "ring") -> PlanResult:
    """Memory and step time of one configuration (already checked against the
    rules) under the assumptions ``ctx`` holds. cp and ep's terms are
    ``cp_ep_terms``'s; with cp = ep = 1 they add nothing.

    The step-time model (every assumption is an argument of ``plan``):

    - compute: hardware FLOPs (Chowdhery et al. 2022 App. B, 6N + 12 l h s per
      token, plus what recomputation re-runs, Korthikanti et al. 2022 App. A)
      over n_gpus * peak * ``compute_efficiency``. With
      ``compute_efficiency="shapes"`` instead: the slowest (last) pipeline
      stage's layers and output layer, m micro-batches of them, each timed from
      its shapes by ``kernel_time.layer_time`` (GEMMs below peak when a tensor-
      parallel shard is thin, memory-bound element-wise work at HBM bandwidth).
    - memory: activations of the first pipeline stage (``activations``), by
      default with memory-efficient attention (``flash_attention=True``:
      FlashAttention, Dao et al. 2022, never stores the s x s scores, the 5as^2b
      term of Korthikanti et al. 2022 that selective recomputation also
      removes). That is what a Llama-style run uses today; pass
      ``flash_attention=False`` for attention that materialises the scores
      (Megatron-LM's 2021-2022 runs). With sequence parallelism the memory is
      Korthikanti's 34 sbh/t (Table 2), which assumes Megatron-LM's extra
      all-gather of each sublayer's input in the backward pass instead of
      storing it whole (Section 4.2.2, overlapped with compute there); the
      planner charges no time or bytes for that all-gather.
    - TP communication: 4 all-reduces of the b s h activation per layer per
      micro-batch, 2 forward and 2 backward (Shoeybi et al. 2019, Section 3,
      Figure 4), 6 with full recomputation; sequence parallelism swaps each for
      a reduce-scatter plus all-gather of the same volume (Korthikanti et al.
      2022, Section 4.2.2). None of it overlaps with compute.
    - links: NVLink inside a node; a group that crosses nodes runs at the NICs
      it can use (``network.group_link``: k members per node drive up to k of
      the node's NICs at once, as NCCL's parallel rings do).
    - PP communication: one send forward and one backward per micro-batch per
      model chunk, counted on the critical path. ``pp_scatter_gather`` splits
      each send over the t tensor-parallel ranks' own InfiniBand cards and
      all-gathers it over NVLink on arrival (Narayanan et al. 2021, Section 4.1).
    - DP communication and how much of it hides (``dp_overlap``): each ZeRO
      stage's exchange with m micro-batches per step, ``dp_exchange``.
    - bubble: ``bubble_overhead`` (Narayanan et al. 2021, Section 2.2) times the
      pipeline's busy time (compute + TP communication).
    """
    model, cluster = ctx.model, ctx.cluster
    etp = tp if etp is None else etp
    if ctx.shapes and (cp > 1 or model.expert_params):
        raise ValueError("compute_efficiency='shapes' times dense layers of a whole sequence "
                         "only; give a fraction of peak for cp > 1 or a mixture of experts")
    m = ctx.global_batch // (dp * mbs)
    h = model.d_model
    s = ctx.seq_len // cp                 # this rank's share of each sequence

    # the interleaved schedule's micro-batch group (constraints.interleave_group)
    group = interleave_group(pp, m, ctx.interleave) if v > 1 else None

    # memory per GPU (first pipeline stage, the fullest one)
    states = state_bytes(model, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, zero_stage=zero,
                         precision=ctx.precision)
    acts = first_stage_activation_bytes(
        s, mbs, h, model.n_heads, n_layers=model.n_layers, tp=tp, pp=pp, micro_batches=m,
        virtual_stages=v, sequence_parallel=sp, recompute=recompute,
        vocab_size=model.vocab_size, flash_attention=ctx.flash_attention,
        group=group, count=ctx.activation_count, n_kv_heads=model.n_kv_heads,
        ffn_hidden=model.ffn_hidden, embedding_slot=model.embedding_slot).total * ctx.act_scale
    total_mem = states.total + acts
    memory = MemoryBreakdown(states.params, states.grads, states.optimizer, acts, total_mem)

    # time per step
    if ctx.shapes:
        compute = _shaped_compute(ctx, tp, pp, mbs, m, recompute, sp)
    else:
        compute = (ctx.model_flops + ctx.recompute_flops[recompute]) / (
            ctx.n_gpus * ctx.peak * ctx.efficiency)  # type: ignore[operator]  # a number unless ctx.shapes
    act_bytes = ctx.act_dtype_bytes * mbs * s * h          # one micro-batch's b s h
    layers_here = model.n_layers / pp
    # (stride, size) per group, ranks numbered tp fastest, then cp, dp, pp (Megatron-LM's order)
    groups = layout_strides(tp, cp, dp, pp, ep=ep, etp=etp)
    tp_comm = 0.0
    per_layer = 6 if recompute == "full" else 4
    if model.expert_params and etp != tp:
        # the attention's half of the regions runs over tp, the experts' half over etp
        # (Megatron Core's folding: the MoE layer gathers and scatters its tokens in etp)
        tp_comm = sum(layers_here * m * per_layer / 2 * all_reduce_time(
            act_bytes, size, link.bandwidth, link.latency).total
            for size, link in ((tp, group_link(cluster, *groups["tp"])),
                               (etp, group_link(cluster, *groups["etp"]))) if size > 1)
    elif tp > 1:
        link = group_link(cluster, *groups["tp"])
        # communication: all-reduce (or reduce-scatter + all-gather) of b s h per TP region
        tp_comm = layers_here * m * per_layer * all_reduce_time(
            act_bytes, tp, link.bandwidth, link.latency).total
    pp_comm = 0.0
    if pp > 1:
        link = group_link(cluster, *groups["pp"])
        if sp:
            # communication: with sequence parallelism each TP rank already holds 1/t of
            # the activation and sends just that shard over its own link; the next stage
            # keeps it sharded (Megatron-LM's get_tensor_shapes: s / t per p2p tensor)
            one = p2p_time(act_bytes / tp, link.bandwidth, link.latency).total
        elif ctx.pp_scatter_gather and tp > 1 and not link.inside_node:
            # communication: each TP rank sends 1/t of the activation on its own
            # InfiniBand card, the receiving stage all-gathers it over NVLink
            # (Narayanan et al. 2021, Section 4.1)
            nv = group_link(cluster, *groups["tp"])
            one = (p2p_time(act_bytes / tp, link.bandwidth, link.latency).total
                   + all_gather_time(act_bytes, tp, nv.bandwidth, nv.latency).total)
        else:
            # communication: the whole activation over one link
            one = p2p_time(act_bytes, link.bandwidth, link.latency).total
        # communication: send the activation forward and its gradient back, per chunk
        pp_comm = 2 * v * m * one
    # communication: the sequence's keys and values (cp), the tokens to their experts (ep)
    cp_comm = cp_comm_time(ctx, groups, tp=tp, cp=cp, mbs=mbs, m=m, layers_here=layers_here,
                           cp_mode=cp_mode)
    ep_comm = ep_comm_time(ctx, groups, tp=tp, cp=cp, ep=ep, mbs=mbs, m=m, pp=pp,
                           sequence_parallel=sp)
    # communication: the data-parallel exchange of each group of weights (dense over dp x cp,
    # experts over edp), less what hides behind the passes it runs beside
    busy = compute + tp_comm + cp_comm + ep_comm
    backward_share = ((2 / 3 * ctx.model_flops + ctx.recompute_flops[recompute])
                      / (ctx.model_flops + ctx.recompute_flops[recompute]))
    dp_comm = dp_exchange_time(gradient_groups(model, cluster, groups, tp=tp, pp=pp, ep=ep, etp=etp),
                               zero=zero, m=m, grad_bytes=ctx.grad_dtype_bytes,
                               weight_bytes=ctx.param_dtype_bytes, busy=busy,
                               backward_share=backward_share, overlap=ctx.dp_overlap)
    bubble = 0.0
    frac = 0.0
    if pp > 1:
        bubble = bubble_overhead(pp, m, virtual_stages=v, interleave=ctx.interleave) * busy
        frac = bubble_fraction(pp, m, virtual_stages=v, interleave=ctx.interleave)
    total = compute + tp_comm + pp_comm + dp_comm + bubble + cp_comm + ep_comm
    time = TimeBreakdown(compute, tp_comm, pp_comm, dp_comm, bubble, total, cp_comm, ep_comm)
    return PlanResult(dp, tp, pp, mbs, m, zero, recompute, v, sp, memory, ctx.capacity,
                      total_mem <= ctx.capacity, time, ctx.tokens / total,
                      ctx.model_flops / (total * ctx.n_gpus * ctx.peak), frac,
                      cp, ep, None if etp == tp else etp, cp_mode)


def _shaped_compute(ctx: PlanContext, tp: int, pp: int, mbs: int, m: int, recompute: str, sp: bool) -> float:
    """Busy time of the last pipeline stage, the slowest: its layers and the
    output layer (Megatron-LM puts the head there), for m micro-batches."""
    model, key = ctx.model, (tp, mbs, recompute, sp, ctx.flash_attention)
    if key not in ctx.shaped:      # search() meets the same shard shapes many times
        layer = layer_time(ctx.seq_len, mbs, model.d_model, model.n_heads, tp=tp,
                           peak_flops=ctx.peak, hbm_bandwidth=ctx.cluster.hbm_bandwidth,
                           recompute=recompute, sequence_parallel=sp,
                           ffn_hidden=model.ffn_hidden,
                           flash_attention=ctx.flash_attention).total
        head = logits_time(ctx.seq_len, mbs, model.d_model, model.vocab_size, tp=tp,
                           peak_flops=ctx.peak)
        ctx.shaped[key] = (layer, head)
    layer, head = ctx.shaped[key]
    return m * (model.n_layers / pp * layer + head)
