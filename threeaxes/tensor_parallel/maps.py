"""The autograd maps that put tensor parallelism's collectives into the graph.

Megatron-LM names each map by what it does going forward; its backward is the
conjugate (Shoeybi et al. 2020, section 3, the f and g operators of figure 3):

    copy_to_tp_region        forward: identity      backward: all-reduce   ("f")
    reduce_from_tp_region    forward: all-reduce    backward: identity     ("g")
    gather_from_tp_region    forward: all-gather    backward: keep own slice
    scatter_to_tp_region     forward: keep own slice backward: all-gather

Why the pairs are conjugate: when every tp rank feeds the same input x into
its own shard of a column-parallel matmul, x's gradient is the sum of the
partial gradients from every shard, so the identity forward needs an
all-reduce backward. When the ranks' partial outputs are summed forward, each
partial output's gradient is the full output gradient, which every rank
already holds, so the all-reduce forward needs only an identity backward.

Every collective goes through `threeaxes.comms` with axis="tp", so
`comms.trace()` counts it. With a single tp rank every map is the identity
and nothing is sent, which also lets the maps run in a plain process
without torch.distributed.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from threeaxes import comms


def tp_size(group=None) -> int:
    """Ranks in the tp group; 1 when torch.distributed is not running."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def tp_rank_in(group=None) -> int:
    """This process's position in the tp group; 0 when torch.distributed is not running."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    return dist.get_rank(group)


def _all_reduce(x, group):
    if tp_size(group) == 1:
        return x
    # copy first: the collective works in place and x may be needed elsewhere
    x = x.clone(memory_format=torch.contiguous_format)
    # communication: sum this tensor over the tp ranks; every rank gets the sum
    return comms.all_reduce(x, group=group, axis="tp")


def _all_gather_last_dim(x, group):
    if tp_size(group) == 1:
        return x
    # communication: every tp rank's slice, concatenated along the last dim in rank order
    return comms.all_gather(x, group=group, axis="tp", dim=-1)


def _own_slice_last_dim(x, group):
    n = tp_size(group)
    if n == 1:
        return x
    width = x.shape[-1]
    if width % n:
        raise ValueError(f"the last dim ({width}) does not split over tp={n}; "
                         f"make it a multiple of {n}")
    return x.chunk(n, dim=-1)[tp_rank_in(group)].contiguous()


class _CopyToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        # communication: all-reduce the input's gradient (each rank holds one part of it)
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        # communication: all-reduce the partial outputs into the full sum
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        # communication: all-gather every rank's slice of the last dim
        return _all_gather_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _own_slice_last_dim(grad, ctx.group), None


class _ScatterToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _own_slice_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad):
        # communication: all-gather the gradient slices back to the full width
        return _all_gather_last_dim(grad, ctx.group), None


def copy_to_tp_region(x, group=None):
    """Forward: x unchanged. Backward: all-reduce x's gradient over the tp group.

    Put it where a replicated activation enters column-parallel layers."""
    return _CopyToTPRegion.apply(x, group)


def reduce_from_tp_region(x, group=None):
    """Forward: all-reduce (sum) the tp ranks' partial results. Backward: identity.

    Put it where the partial outputs of a row-parallel layer leave the region."""
    return _ReduceFromTPRegion.apply(x, group)


def gather_from_tp_region(x, group=None):
    """Forward: all-gather the last dim (each rank's column slice -> the full
    width). Backward: keep this rank's slice of the gradient."""
    return _GatherFromTPRegion.apply(x, group)


def scatter_to_tp_region(x, group=None):
    """Forward: keep this rank's slice of the last dim. Backward: all-gather
    the gradient slices back to the full width."""
    return _ScatterToTPRegion.apply(x, group)


__all__ = ["copy_to_tp_region", "reduce_from_tp_region", "gather_from_tp_region",
           "scatter_to_tp_region", "tp_size", "tp_rank_in"]
