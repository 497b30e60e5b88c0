"""The data-parallel exchange of one step, by ZeRO stage, and how much of it hides."""
from __future__ import annotations

from collections.abc import Iterable

from .network import Link, all_gather_time, all_reduce_time, reduce_scatter_time

__all__ = ["dp_exchange_time"]


def dp_exchange_time(groups: Iterable[tuple[float, int, Link]], *, zero: int, m: int, grad_bytes: float,
                     weight_bytes: float, busy: float, backward_share: float, overlap: float) -> float:
    """Seconds of data-parallel exchange left on the critical path of one step.

    ``groups``: [(weights per GPU, group size, Link)], one per reduction the step runs
    (``cp_ep_terms.gradient_groups``). ``busy``: this stage's compute and the
    communication inside its passes, all m micro-batches; ``backward_share``: the
    backward's part of that work (4N of 6N per token, plus what recomputation re-runs).

    With m micro-batches per replica and step (gradient accumulation), each stage
    is priced as DeepSpeed and PyTorch's FSDP2 run it by default:

    - ZeRO-0 accumulates whole gradients locally and all-reduces them once per step.
    - ZeRO-1 does the same and then reduce-scatters them and all-gathers the updated
      weights: the same 2 Psi as an all-reduce when both have the same bytes
      (Rajbhandari et al. 2020, Section 7.2.1). Megatron-LM's distributed optimizer
      is ZeRO-1 of this kind.
    - ZeRO-2 keeps only a shard of the gradients, so it reduce-scatters after every
      micro-batch's backward ("we cannot wait till grad accumulation boundary",
      DeepSpeed maintainers, deepspeedai/DeepSpeed#2252) and all-gathers the updated
      weights once: m RS + AG.
    - ZeRO-3/FSDP frees each unit's weights after its forward and backward, so every
      micro-batch all-gathers them twice and reduce-scatters its gradients (Section
      7.2.2's 3 Psi per forward and backward): m (RS + 2 AG). That is FSDP2's default;
      keeping the weights and gradients whole between micro-batches
      (``set_reshard_after_backward(False)``, ``set_requires_gradient_sync(False)``,
      pytorch/pytorch#126166; what ``torch.distributed.pipelining`` does for non-last
      micro-batches) holds ZeRO-1's bytes and moves ZeRO-1's traffic, so the
      planner's ZeRO-1 row prices that choice. The same holds with or without a
      pipeline.

    Gradients move at their own bytes and gathered weights at theirs: with
    Megatron-LM's bf16 (``precision="megatron-bf16"``) gradients are reduced in fp32
    and the weights gathered in bf16, half the bytes (Megatron-LM's arguments.py:
    "bfloat16 requires gradient accumulation and all-reduce to be done in fp32").

    Overlap: ``overlap`` (``plan``'s ``dp_overlap``) is the fraction of what *can*
    hide that does. An exchange overlaps only the passes it runs beside: ZeRO-0/1's
    reduction only the last micro-batch's backward (DDP's ``no_sync`` for the others,
    Li et al. 2020, Section 3.2.4; Megatron-LM disables grad sync for every
    micro-batch but the last), ZeRO-2's reduce-scatters every micro-batch's
    backward, ZeRO-3's prefetched gathers every forward and backward. Hidden =
    overlap * min(exchange, that window).
    """
    if not groups:
        return 0.0
    rs = sum(reduce_scatter_time(w * grad_bytes, n, ln.bandwidth, ln.latency).total
             for w, n, ln in groups)
    ag = sum(all_gather_time(w * weight_bytes, n, ln.bandwidth, ln.latency).total
             for w, n, ln in groups)
    backward_mb = busy / m * backward_share        # one micro-batch's backward on this stage
    if zero == 3:
        # communication: every micro-batch all-gathers the weights for its forward and again
        # for its backward and reduce-scatters its gradients, prefetched beside every pass
        t, window = m * (rs + 2 * ag), busy
    elif zero == 2:
        # communication: sharded gradients reduce-scattered after every micro-batch's
        # backward, then one all-gather of the updated weights
        t, window = m * rs + ag, m * backward_mb
    elif zero == 1:
        # communication: the accumulated gradients reduce-scattered after the last
        # micro-batch and the updated weights all-gathered, beside its backward only
        t, window = rs + ag, backward_mb
    else:
        # communication: one all-reduce of the accumulated gradients after the last
        # micro-batch, beside its backward only
        t = sum(all_reduce_time(w * grad_bytes, n, ln.bandwidth, ln.latency).total
                for w, n, ln in groups)
        window = backward_mb
    return t - overlap * min(t, window)
