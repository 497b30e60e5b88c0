"""The autograd maps that put tensor parallelism's collectives into the graph."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from threeaxes import comms
from threeaxes.dims import ParallelDims, resolve


def _tp(dims: ParallelDims | None) -> ParallelDims:
    """The layout whose tp group the maps use: `dims`, or the run's current layout."""
    return resolve(dims)


def _all_reduce(x: Tensor, dims: ParallelDims) -> Tensor:
    if dims.tp == 1:
        return x
    # copy first: the collective works in place and x may be needed elsewhere
    x = x.clone(memory_format=torch.contiguous_format)
    # communication: sum this tensor over the tp ranks; every rank gets the sum
    return comms.all_reduce(x, "tp", dims=dims)


def _all_gather_last_dim(x: Tensor, dims: ParallelDims) -> Tensor:
    if dims.tp == 1:
        return x
    # communication: every tp rank's slice, concatenated along the last dim in rank order
    return comms.all_gather(x, "tp", dims=dims, dim=-1)


def _own_slice_last_dim(x: Tensor, dims: ParallelDims) -> Tensor:
    n = dims.tp
    if n == 1:
        return x
    width = x.shape[-1]
    if width % n:
        raise ValueError(f"the last dim ({width}) does not split over tp={n}; "
                         f"make it a multiple of {n}")
    return x.chunk(n, dim=-1)[dims.coord("tp")].contiguous()


class _CopyToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        ctx.dims = dims
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # communication: all-reduce the input's gradient (each rank holds one part of it)
        return _all_reduce(grad, ctx.dims), None


class _ReduceFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        # communication: all-reduce the partial outputs into the full sum
        return _all_reduce(x, dims)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _GatherFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        ctx.dims = dims
        # communication: all-gather every rank's slice of the last dim
        return _all_gather_last_dim(x, dims)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _own_slice_last_dim(grad, ctx.dims), None


class _ScatterToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        ctx.dims = dims
        return _own_slice_last_dim(x, dims)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # communication: all-gather the gradient slices back to the full width
        return _all_gather_last_dim(grad, ctx.dims), None


def copy_to_tp_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: x unchanged. Backward: all-reduce x's gradient over the tp group of `dims`
    (the current layout when None).

    Put it where a replicated activation enters column-parallel layers.

    Megatron-LM names each map by what it does going forward; its backward is the
    conjugate (Shoeybi et al. 2019, section 3, the f and g operators of figure 3). The
    course shortens Megatron's names (``copy_to_tensor_model_parallel_region`` and so on,
    ``megatron/core/tensor_parallel/mappings.py``):

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

    Every collective goes through `threeaxes.comms` on the "tp" axis of the
    layout (`dims`, or the run's current one), so the trace counts it. With
    tp=1 every map is the identity and nothing is sent, so the maps also run in
    a plain process: pass `dims=ParallelDims().at(0)`.
    """
    return _CopyToTPRegion.apply(x, _tp(dims))


def reduce_from_tp_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: all-reduce (sum) the tp ranks' partial results. Backward: identity.

    Put it where the partial outputs of a row-parallel layer leave the region."""
    return _ReduceFromTPRegion.apply(x, _tp(dims))


def gather_from_tp_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: all-gather the last dim (each rank's column slice -> the full
    width). Backward: keep this rank's slice of the gradient."""
    return _GatherFromTPRegion.apply(x, _tp(dims))


def scatter_to_tp_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: keep this rank's slice of the last dim. Backward: all-gather
    the gradient slices back to the full width."""
    return _ScatterToTPRegion.apply(x, _tp(dims))


__all__ = ["copy_to_tp_region", "reduce_from_tp_region", "gather_from_tp_region",
           "scatter_to_tp_region"]
