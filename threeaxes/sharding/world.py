"""Which ranks shard: the layout's dp axis, or the whole default process group.

    dims = dp_layout(None)   # the current ParallelDims, else the world as one dp axis

PyTorch's `ZeroRedundancyOptimizer`, `DistributedDataParallel` and
`fully_shard` shard over the default process group (every rank) when given no
group. The sharding classes here do the same when they are given no `dims` and
no layout has been made current with `ParallelDims.init`: the world becomes a
one-axis layout, dp = world size, whose "dp" group is the default group
itself (a DeviceMesh built on it with `DeviceMesh.from_group`, so no new
process group is created and nothing needs freeing).

The world is used only when no layout exists at all: with one current, its
dp axis is used, so a 3D run never shards over the whole world by accident.
"""
from __future__ import annotations

from threeaxes.dims import ParallelDims, current, resolve

__all__ = ["dp_layout", "world_layout"]


def world_layout() -> ParallelDims:
    """The default process group as one data-parallel axis (dp = world size)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("no parallel layout and torch.distributed is not running; shard "
                           "inside a launched function (threeaxes.launch.launch(fn, n)), where the "
                           "default process group is used, or pass dims=ParallelDims.init(dp=...)")
    world = dist.group.WORLD
    device = "cuda" if dist.get_backend(world) == "nccl" else "cpu"
    mesh = DeviceMesh.from_group(world, device, mesh_dim_names=("dp",))
    return ParallelDims(dp=dist.get_world_size(), rank=dist.get_rank(), mesh=mesh)


def dp_layout(dims: ParallelDims | None) -> ParallelDims:
    """`dims` if given, else the current layout if there is one, else `world_layout()`."""
    if dims is not None:
        return resolve(dims)
    try:
        return current()
    except RuntimeError:   # no layout made current on this rank: the world, as PyTorch does
        return world_layout()
