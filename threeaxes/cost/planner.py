"""Evaluate one (dp, tp, pp, ...) configuration, or search them all.

``plan`` turns a model, a cluster, a global batch and one configuration into
memory per GPU by term, whether it fits, step time by term and throughput.
``search`` evaluates every valid configuration and ranks them: those that
fit first, then by tokens per second, then by memory.

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
- DP communication: a gradient all-reduce per step (ZeRO stages 1 and 2 move
  the same 2 Psi, stage 3 moves 3 Psi; Rajbhandari et al. 2020, Section 7);
  ``dp_overlap`` of it hides behind the backward pass. With pipelining
  (only when ``allow_sharded_pp``) sharded gradients are reduce-scattered
  after every micro-batch and, at stage 3, the weights all-gathered for
  every micro-batch's forward and backward: m times the traffic.
- bubble: ``bubble_overhead`` (Narayanan et al. 2021, Section 2.2) times the
  pipeline's busy time (compute + TP communication).
"""
from __future__ import annotations

from typing import NamedTuple

from .activations import RECOMPUTE, first_stage_activation_bytes
from .bubble import bubble_fraction, bubble_overhead
from .constraints import check_config, divisors, valid_tp
from .memory import PRECISIONS, MemoryBreakdown, model_state_bytes
from .network import (all_gather_time, all_reduce_time, group_link, group_strides, p2p_time,
                      reduce_scatter_time)
from .kernel_time import layer_time, logits_time
from .stage_memory import ACTIVATION_SCALE

__all__ = ["TimeBreakdown", "PlanResult", "plan", "search", "DEFAULT_COMPUTE_EFFICIENCY",
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

    @property
    def label(self) -> str:
        extras = [f"zero{self.zero_stage}" if self.zero_stage else "",
                  f"rc={self.recompute}" if self.recompute != "none" else "",
                  f"v={self.virtual_stages}" if self.virtual_stages > 1 else "",
                  "sp" if self.sequence_parallel else ""]
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} mbs={self.micro_batch} "
                f"m={self.micro_batches} " + " ".join(e for e in extras if e)).strip()


class _Context:
    """What stays fixed across configurations: model, cluster, batch, assumptions."""

    def __init__(self, model, cluster, global_batch, seq_len, precision,
                 compute_efficiency, dp_overlap, usable_memory_fraction,
                 pp_scatter_gather=False, flash_attention=True):
        if precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r}; choose precision in {set(PRECISIONS)}")
        self.shapes = isinstance(compute_efficiency, str)
        if self.shapes and compute_efficiency != SHAPES:
            raise ValueError(f"compute_efficiency={compute_efficiency!r}; give a fraction "
                             f"in (0, 1] or {SHAPES!r}")
        if not self.shapes and not 0 < compute_efficiency <= 1:
            raise ValueError(f"compute_efficiency={compute_efficiency} must be in (0, 1] "
                             f"(or {SHAPES!r} to time each layer from its shapes)")
        self.pp_scatter_gather = bool(pp_scatter_gather)
        self.flash_attention = bool(flash_attention)
        self.shaped = {}               # (tp, mbs, recompute, sp) -> (layer s, head s)
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
        self.grad_dtype_bytes = PRECISIONS[precision][1]
        self.efficiency = compute_efficiency
        self.dp_overlap = dp_overlap
        self.capacity = cluster.hbm_bytes * usable_memory_fraction
        l, h, s = model.n_layers, model.d_model, self.seq_len
        self.tokens = self.global_batch * s
        attention_per_token = 12.0 * l * h * s            # PaLM App. B
        self.model_flops = self.tokens * (6.0 * model.n_params + attention_per_token)
        # extra work per token that recomputation re-runs (Korthikanti App. A:
        # eq. 8 for selective, a second forward of the layers for full, eq. 3)
        self.recompute_flops = {
            "none": 0.0,
            "selective": self.tokens * 12.0 * l * h * s,
            "full": self.tokens * (2.0 * model.layer_params + 4.0 * l * h * s),
        }
        self.n_gpus = cluster.n_gpus
        self.peak = cluster.peak_flops


def _evaluate(ctx: _Context, dp, tp, pp, mbs, zero, recompute, v, sp) -> PlanResult:
    model, cluster = ctx.model, ctx.cluster
    m = ctx.global_batch // (dp * mbs)
    s, h = ctx.seq_len, model.d_model

    # memory per GPU (first pipeline stage, the fullest one)
    states = model_state_bytes(model.n_params, dp=dp, tp=tp, pp=pp, zero_stage=zero,
                               precision=ctx.precision)
    acts = first_stage_activation_bytes(
        s, mbs, h, model.n_heads, n_layers=model.n_layers, tp=tp, pp=pp, micro_batches=m,
        virtual_stages=v, sequence_parallel=sp, recompute=recompute,
        vocab_size=model.vocab_size, flash_attention=ctx.flash_attention).total * ctx.act_scale
    total_mem = states.total + acts
    memory = MemoryBreakdown(states.params, states.grads, states.optimizer, acts, total_mem)

    # time per step
    if ctx.shapes:
        compute = _shaped_compute(ctx, tp, pp, mbs, m, recompute, sp)
    else:
        compute = (ctx.model_flops + ctx.recompute_flops[recompute]) / (
            ctx.n_gpus * ctx.peak * ctx.efficiency)
    act_bytes = ctx.act_dtype_bytes * mbs * s * h          # one micro-batch's b s h
    layers_here = model.n_layers / pp
    groups = group_strides(dp, tp, pp)   # (stride, size) per axis, tp fastest
    tp_comm = 0.0
    if tp > 1:
        link = group_link(cluster, *groups["tp"])
        per_layer = 6 if recompute == "full" else 4
        # communication: all-reduce (or reduce-scatter + all-gather) of b s h per TP region
        tp_comm = layers_here * m * per_layer * all_reduce_time(
            act_bytes, tp, link.bandwidth, link.latency).total
    pp_comm = 0.0
    if pp > 1:
        link = group_link(cluster, *groups["pp"])
        if ctx.pp_scatter_gather and tp > 1 and not link.inside_node:
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
    dp_comm = 0.0
    if dp > 1:
        link = group_link(cluster, *groups["dp"])
        grad_bytes = ctx.grad_dtype_bytes * model.n_params / (tp * pp)
        rs = reduce_scatter_time(grad_bytes, dp, link.bandwidth, link.latency).total
        ag = all_gather_time(grad_bytes, dp, link.bandwidth, link.latency).total
        # with pipelining (allow_sharded_pp), sharded state is exchanged per micro-batch
        per_mb = m if pp > 1 else 1
        if zero == 3:
            # reduce-scatter the gradients, all-gather the parameters twice (3 Psi)
            t = per_mb * (rs + 2 * ag)
        elif zero == 2 and pp > 1:
            # sharded gradients reduce-scattered after every micro-batch, one all-gather
            t = per_mb * rs + ag
        else:
            # all-reduce, or reduce-scatter + all-gather (ZeRO-1/2): the same 2 Psi
            t = all_reduce_time(grad_bytes, dp, link.bandwidth, link.latency).total
        dp_comm = (1.0 - ctx.dp_overlap) * t
    bubble = 0.0
    frac = 0.0
    if pp > 1:
        bubble = bubble_overhead(pp, m, virtual_stages=v) * (compute + tp_comm)
        frac = bubble_fraction(pp, m, virtual_stages=v)
    total = compute + tp_comm + pp_comm + dp_comm + bubble
    time = TimeBreakdown(compute, tp_comm, pp_comm, dp_comm, bubble, total)
    return PlanResult(dp, tp, pp, mbs, m, zero, recompute, v, sp, memory, ctx.capacity,
                      total_mem <= ctx.capacity, time, ctx.tokens / total,
                      ctx.model_flops / (total * ctx.n_gpus * ctx.peak), frac)


def _shaped_compute(ctx: _Context, tp, pp, mbs, m, recompute, sp) -> float:
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


def plan(model, cluster, global_batch: int, seq_len: int | None = None, *, dp: int,
         tp: int = 1, pp: int = 1, micro_batch: int | None = None,
         micro_batches: int | None = None, zero_stage: int = 0, recompute: str = "none",
         virtual_stages: int = 1, sequence_parallel: bool = False,
         precision: str = "mixed", compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
         dp_overlap: float = 0.0, usable_memory_fraction: float = 1.0,
         allow_tp_across_nodes: bool = False, pp_scatter_gather: bool = False,
         flash_attention: bool = True, allow_sharded_pp: bool = False) -> PlanResult:
    """Evaluate one configuration of ``model`` on ``cluster``.

    ``global_batch`` counts sequences of ``seq_len`` tokens (default: the
    model's context) per optimizer step; each of the dp replicas splits its
    share into micro-batches of ``micro_batch`` sequences (or give their
    count, ``micro_batches``). Assumptions, all visible:

    - ``compute_efficiency``: fraction of peak the matmuls reach (0.6;
      see ``DEFAULT_COMPUTE_EFFICIENCY`` for the published figures behind it),
      or ``"shapes"``: each layer timed from its shard's shapes
      (``kernel_time``), the model that reproduces published runs.
    - ``pp_scatter_gather``: pipeline sends split over the TP ranks'
      InfiniBand cards (Narayanan et al. 2021, Section 4.1; off by default).
    - ``dp_overlap``: fraction of the gradient communication hidden behind
      the backward pass (0, none; PyTorch DDP's bucketing, Li et al. 2020,
      hides most of it in practice).
    - ``usable_memory_fraction``: share of the GPU's memory the states and
      activations may fill (1.0; the 80 GB vs 80 GiB gap is the headroom).
    - ``flash_attention``: memory-efficient attention that never stores the
      s x s scores (FlashAttention, Dao et al. 2022). Default True, what a
      Llama-style run uses today; False counts Korthikanti et al.'s 5as^2b/t
      per layer. Charged no extra time in the FLOP-count model (its backward
      recomputes the scores, yet it runs faster than the attention it
      replaces, Dao et al. 2022, Section 4); ``"shapes"`` timing charges the
      recomputed attention products and saves the scores' memory traffic.
    - ``allow_sharded_pp``: allow ZeRO-2/3 with pp > 1 (FSDP with pipelining,
      as Llama 3 was trained, Dubey et al. 2024, Section 3.3.2, and as
      torchtitan composes FSDP2 with PyTorch's pipelining). Default False
      keeps DeepSpeed's rule (ZeRO-1 at most with a pipeline). Priced with the
      sharded exchanges repeated per micro-batch (module docstring).
    - link bandwidths, NICs per node and latencies come from ``cluster``.

    Raises ValueError, saying what to change, when the configuration breaks a
    constraint: dp*tp*pp = GPUs, tp divides the heads, pp the layers, tp
    stays in a node, the batch splits evenly.
    """
    ctx = _Context(model, cluster, global_batch, seq_len, precision, compute_efficiency,
                   dp_overlap, usable_memory_fraction, pp_scatter_gather, flash_attention)
    mbs = check_config(model, cluster, ctx.global_batch, dp=dp, tp=tp, pp=pp,
                       micro_batch=micro_batch, micro_batches=micro_batches,
                       zero_stage=zero_stage, recompute=recompute,
                       virtual_stages=virtual_stages,
                       allow_tp_across_nodes=allow_tp_across_nodes,
                       allow_sharded_pp=allow_sharded_pp)
    return _evaluate(ctx, int(dp), int(tp), int(pp), mbs, zero_stage, recompute,
                     int(virtual_stages), bool(sequence_parallel) and tp > 1)


def search(model, cluster, global_batch: int, seq_len: int | None = None, *,
           micro_batch_sizes=None, zero_stages=(0, 1, 2, 3), recomputes=RECOMPUTE,
           max_virtual_stages: int | None = None, sequence_parallel=(False, True),
           only_fitting: bool = False, top: int | None = None,
           allow_tp_across_nodes: bool = False, precision: str = "mixed",
           compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY, dp_overlap: float = 0.0,
           usable_memory_fraction: float = 1.0, pp_scatter_gather: bool = False,
           flash_attention: bool = True, allow_sharded_pp: bool = False) -> list:
    """Evaluate every valid configuration and rank them.

    Enumerates tp (dividing the heads and, unless allowed, the node), pp
    (dividing the layers), dp = GPUs / (tp * pp) (dividing the global
    batch), every micro-batch size that divides a replica's batch (or those
    in ``micro_batch_sizes``), ZeRO stages (only 0 and 1 with pp > 1, unless
    ``allow_sharded_pp``: see ``plan``),
    recomputation, virtual stages (dividing the layers per stage, with the
    micro-batch count a multiple of pp) and sequence parallelism (tp > 1).
    Returns PlanResults, those that fit first, then fastest first, then
    lightest first; ``only_fitting`` drops the rest, ``top`` keeps the best.
    """
    ctx = _Context(model, cluster, global_batch, seq_len, precision, compute_efficiency,
                   dp_overlap, usable_memory_fraction, pp_scatter_gather, flash_attention)
    n = cluster.n_gpus
    results = []
    for tp in valid_tp(model, cluster, allow_tp_across_nodes):
        for pp in divisors(n // tp):
            if model.n_layers % pp:
                continue
            dp = n // (tp * pp)
            if ctx.global_batch % dp:
                continue
            per_replica = ctx.global_batch // dp
            sizes = [b for b in divisors(per_replica)
                     if micro_batch_sizes is None or b in micro_batch_sizes]
            zeros = [z for z in zero_stages if pp == 1 or z < 2 or allow_sharded_pp]
            sps = [sp for sp in dict.fromkeys(bool(x) for x in sequence_parallel)
                   if tp > 1 or not sp]
            for mbs in sizes:
                m = per_replica // mbs
                vs = [1]
                if pp > 1 and m % pp == 0:
                    vs += [v for v in divisors(model.n_layers // pp)[1:]
                           if max_virtual_stages is None or v <= max_virtual_stages]
                for v in vs:
                    for recompute in recomputes:
                        for sp in sps:
                            for zero in zeros:
                                results.append(_evaluate(ctx, dp, tp, pp, mbs, zero,
                                                         recompute, v, sp))
    if only_fitting:
        results = [r for r in results if r.fits]
    results.sort(key=lambda r: (not r.fits, -r.tokens_per_second, r.memory.total))
    return results[:top] if top is not None else results
