"""Evaluate one (dp, tp, pp, ...) configuration, or search them all."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .activations import RECOMPUTE
from .constraints import check_config, divisors, interleave_group, valid_tp
from .context import context_violations
from .evaluate import DEFAULT_COMPUTE_EFFICIENCY, SHAPES, PlanContext, PlanResult, TimeBreakdown, evaluate
from .experts import expert_violations

if TYPE_CHECKING:
    from .presets import Cluster, Model

__all__ = ["TimeBreakdown", "PlanResult", "plan", "search", "DEFAULT_COMPUTE_EFFICIENCY",
           "SHAPES"]


def plan(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *, dp: int,
         tp: int = 1, pp: int = 1, micro_batch: int | None = None,
         micro_batches: int | None = None, zero_stage: int = 0, recompute: str = "none",
         virtual_stages: int = 1, sequence_parallel: bool = False,
         precision: str = "mixed", compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
         dp_overlap: float = 0.0, usable_memory_fraction: float = 1.0,
         allow_tp_across_nodes: bool = False, pp_scatter_gather: bool = False,
         flash_attention: bool = True, allow_sharded_pp: bool = False,
         interleave: str = "flexible", cp: int = 1, cp_mode: str = "ring", ep: int = 1,
         etp: int | None = None, activation_count: str = "korthikanti") -> PlanResult:
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
    - ``dp_overlap``: fraction of the data-parallel exchange that hides, of
      what can: with m micro-batches a step, the gradient all-reduce runs
      beside the last micro-batch's backward only (DDP's bucketing, Li et al.
      2020, overlaps one backward; ``no_sync`` skips the others), so at most
      that backward's time hides, whatever the fraction (``evaluate``).
      Default 0, none.
    - ZeRO-2 and ZeRO-3 with m micro-batches: their shards are exchanged
      once per micro-batch (ZeRO-2 reduce-scatters every backward's
      gradients, ZeRO-3 also all-gathers the weights for every forward and
      backward), as DeepSpeed and FSDP2 do by default; keeping weights and
      gradients whole between micro-batches instead (FSDP2's
      ``set_reshard_after_backward(False)`` and
      ``set_requires_gradient_sync(False)``) costs ZeRO-1's memory for
      ZeRO-1's traffic, which the ZeRO-1 row prices (``evaluate``).
    - ``interleave``: which micro-batch counts the interleaved schedule runs
      (``constraints.interleave_group``): ``"flexible"`` (default), Megatron
      Core >= 0.10 with a micro-batch group N between p and m
      (``--microbatch-group-size-per-virtual-pipeline-stage``), any m >= p,
      the planner taking the smallest N (the fewest micro-batches in flight);
      ``"group_p"``, Megatron-LM's default group of p, its only one before
      Core 0.10 (Narayanan et al. 2021, Section 2.2.2): m a multiple of p.
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
      sharded exchanges repeated per micro-batch (``evaluate``'s docstring).
    - ``activation_count``: ``"korthikanti"`` (default) counts every layer's
      activations as Korthikanti et al. 2022 count a GPT layer (below);
      ``"as_built"`` counts a SwiGLU model's own layer tensor by tensor as
      Megatron Core builds it from Transformer Engine's fused modules, no
      dropout (``activations.activation_bytes``). A model whose first pipeline
      slot is its embedding (``Model.embedding_slot``, Llama 3's layout) keeps
      no layer activations there.
    - ``sequence_parallel``: activations as Korthikanti et al. 2022 count them
      (34 sbh/t, Table 2), which relies on Megatron-LM all-gathering each
      sublayer's input once more in the backward pass (Section 4.2.2, hidden
      behind compute there); that extra all-gather is charged no time or bytes.
    - link bandwidths, NICs per node and latencies come from ``cluster``; a
      group that crosses nodes drives up to as many NICs as it has members
      per node (``network.group_link``).

    - ``cp``: context parallelism, each sequence split over cp ranks (then
      dp*tp*cp*pp = GPUs), their keys and values exchanged ``cp_mode``'s way:
      ``"ring"`` (overlapped with attention), ``"all_gather"`` (Llama 3) or
      ``"all_to_all"`` (DeepSpeed-Ulysses); activations and the per-token work
      of each rank divided by cp (``context``, ``cp_ep_terms``).
    - ``ep``, ``etp``: a mixture-of-experts model's (``Model.moe``) experts split
      over ep ranks, each expert over etp (default tp), folded over the tp*cp*dp
      ranks as Megatron Core does; four all-to-alls per MoE layer and
      micro-batch (``experts``, ``cp_ep_terms``). Ranks are numbered in
      Megatron-LM's order tp-cp-ep-dp-pp (``placement.LAYOUT_ORDER``). FLOPs
      count the active parameters; activations keep Korthikanti et al.'s
      GPT-layer count (a 4h MLP per token, not k experts' widths), an
      approximation for a mixture of experts. ``compute_efficiency="shapes"``
      times dense layers of whole sequences only: give a fraction with cp > 1
      or experts.

    Raises ValueError, saying what to change, when the configuration breaks a
    constraint: dp*tp*pp (*cp) = GPUs, tp divides the heads, pp the layers, tp
    stays in a node, the batch splits evenly, and cp's and ep's rules
    (``constraints.violations``).

    ``plan`` checks one configuration against the rules (``constraints``) and
    turns it into memory per GPU by term, whether it fits, step time by term and
    throughput. ``search`` evaluates every valid configuration and ranks them:
    those that fit first, then by tokens per second, then by memory. The model
    both apply, and the papers behind each term, is in ``evaluate``: by default
    attention is memory-efficient (FlashAttention, never storing the s x s
    scores), a group that crosses nodes drives as many NICs as it has members
    per node, DeepSpeed's rule keeps ZeRO-2/3 away from pipelining unless
    ``allow_sharded_pp``, ZeRO-2/3 exchange their shards once per micro-batch
    (as DeepSpeed and FSDP2 do by default), and the interleaved schedule takes
    any m >= p (Megatron Core >= 0.10; ``interleave``).
    """
    ctx = PlanContext(model, cluster, global_batch, seq_len, precision, compute_efficiency,
                      dp_overlap, usable_memory_fraction, pp_scatter_gather, flash_attention,
                      interleave, activation_count)
    mbs = check_config(model, cluster, ctx.global_batch, dp=dp, tp=tp, pp=pp,
                       micro_batch=micro_batch, micro_batches=micro_batches,
                       zero_stage=zero_stage, recompute=recompute,
                       virtual_stages=virtual_stages,
                       allow_tp_across_nodes=allow_tp_across_nodes,
                       allow_sharded_pp=allow_sharded_pp, interleave=interleave, cp=cp, ep=ep,
                       etp=etp, cp_mode=cp_mode, seq_len=ctx.seq_len,
                       flash_attention=ctx.flash_attention,
                       sequence_parallel=bool(sequence_parallel) and tp > 1)
    return evaluate(ctx, int(dp), int(tp), int(pp), mbs, zero_stage, recompute,
                    int(virtual_stages), bool(sequence_parallel) and tp > 1, int(cp), int(ep),
                    None if etp is None else int(etp), cp_mode)


def search(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *,
           micro_batch_sizes: Iterable[int] | None = None, zero_stages: Iterable[int] = (0, 1, 2, 3),
           recomputes: Iterable[str] = RECOMPUTE,
           max_virtual_stages: int | None = None, sequence_parallel: Iterable[bool] = (False, True),
           only_fitting: bool = False, top: int | None = None,
           allow_tp_across_nodes: bool = False, precision: str = "mixed",
           compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY, dp_overlap: float = 0.0,
           usable_memory_fraction: float = 1.0, pp_scatter_gather: bool = False,
           flash_attention: bool = True, allow_sharded_pp: bool = False,
           interleave: str = "flexible", cps: Iterable[int] = (1,), cp_modes: Iterable[str] = ("ring",),
           eps: Iterable[int] = (1,), etps: Iterable[int] | None = None,
           activation_count: str = "korthikanti") -> list[PlanResult]:
    """Evaluate every valid configuration and rank them.

    Enumerates tp (dividing the heads and, unless allowed, the node), pp
    (dividing the layers), dp = GPUs / (tp * pp) (dividing the global
    batch), every micro-batch size that divides a replica's batch (or those
    in ``micro_batch_sizes``), ZeRO stages (only 0 and 1 with pp > 1, unless
    ``allow_sharded_pp``: see ``plan``),
    recomputation, virtual stages (dividing the layers per stage, with a
    micro-batch count ``interleave`` accepts) and sequence parallelism (tp > 1);
    with ``cps``, ``cp_modes``, ``eps`` and ``etps`` (None: etp = tp) also every
    context- and expert-parallel split among them that follows the rules
    (``plan``); the defaults search the three axes alone.
    Returns PlanResults, those that fit first, then fastest first, then
    lightest first; ``only_fitting`` drops the rest, ``top`` keeps the best.
    """
    ctx = PlanContext(model, cluster, global_batch, seq_len, precision, compute_efficiency,
                      dp_overlap, usable_memory_fraction, pp_scatter_gather, flash_attention,
                      interleave, activation_count)
    results = []
    for tp, cp, cp_mode, pp, dp, ep, etp in _layouts(ctx, valid_tp(model, cluster,
                                                                   allow_tp_across_nodes),
                                                     cps, cp_modes, eps, etps):
        per_replica = ctx.global_batch // dp
        sizes = [b for b in divisors(per_replica)
                 if micro_batch_sizes is None or b in micro_batch_sizes]
        zeros = [z for z in zero_stages if pp == 1 or z < 2 or allow_sharded_pp]
        sps = [sp for sp in dict.fromkeys(bool(x) for x in sequence_parallel)
               if (tp > 1 or not sp) and (sp or ep == 1 or tp == 1)]
        for mbs in sizes:
            m = per_replica // mbs
            vs = [1]
            if pp > 1 and interleave_group(pp, m, interleave) is not None:
                vs += [v for v in divisors(model.n_layers // pp)[1:]
                       if max_virtual_stages is None or v <= max_virtual_stages]
            for v in vs:
                for recompute in recomputes:
                    for sp in sps:
                        for zero in zeros:
                            results.append(evaluate(ctx, dp, tp, pp, mbs, zero,
                                                    recompute, v, sp, cp, ep, etp,
                                                    cp_mode))
    if only_fitting:
        results = [r for r in results if r.fits]
    results.sort(key=lambda r: (not r.fits, -r.tokens_per_second, r.memory.total))
    return results[:top] if top is not None else results


def _layouts(ctx: PlanContext, tps: Iterable[int], cps: Iterable[int], cp_modes: Iterable[str], eps: Iterable[int],
             etps: Iterable[int] | None) -> Iterator[tuple[int, int, str, int, int, int, int | None]]:
    """(tp, cp, cp_mode, pp, dp, ep, etp) of every layout the rules allow, in the
    three-axis search's order when cp = ep = 1 (so its ties rank as the three-axis search ranks them)."""
    model, n = ctx.model, ctx.n_gpus
    for tp in tps:
        for cp in cps:
            if n % (tp * cp):
                continue
            # cp = 1 exchanges nothing: one mode; cp > 1 needs fused attention (cp_flash)
            modes = ["ring"] if cp == 1 else [
                c for c in cp_modes if ctx.flash_attention and not context_violations(
                    model.n_heads, model.kv_heads, ctx.seq_len, cp=cp, tp=tp, mode=c)]
            for cp_mode in modes:
                for pp in divisors(n // (tp * cp)):
                    if model.n_layers % pp:
                        continue
                    dp = n // (tp * cp * pp)
                    if ctx.global_batch % dp:
                        continue
                    for ep in eps:
                        for etp in (tp,) if etps is None else etps:
                            if expert_violations(getattr(model, "moe", None), ep=ep, etp=etp,
                                                 tp=tp, cp=cp, dp=dp):
                                continue
                            yield tp, cp, cp_mode, pp, dp, ep, (None if etp == tp else etp)
