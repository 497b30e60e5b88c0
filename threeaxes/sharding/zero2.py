"""ZeRO stage 2: gradients reduce-scattered during backward, each rank keeping its shard.

    opt = Zero2Optimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    loss.backward()   # hooks reduce-scatter each bucket as soon as its gradients are in
    opt.step()        # wait for them, step my shard, all-gather the updated shards"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from threeaxes import comms
from threeaxes.data_parallel.overlap import BucketHooks
from threeaxes.dims import ParallelDims
from threeaxes.sharding.zero1 import ShardedBucket, ZeroOptimizer

__all__ = ["GradientShardReducer", "Zero2Optimizer"]


class GradientShardReducer:
    """Reduce-scatter the gradients of `buckets` (ShardedBucket) over dp from hooks.

    `BucketHooks` (the data-parallel wrapper's machinery) launches each bucket,
    in bucket order, as soon as its gradients are in; here a launch flattens
    them (the optimizer bucket's `FlatLayout`), drops the whole gradients and
    starts an asynchronous reduce-scatter. `collect()` (after backward) waits
    for every one, divides by dp and leaves the mean gradient of each bucket's
    range in `bucket.shard.grad`, adding to it when several backwards ran
    (gradient accumulation).
    """

    def __init__(self, buckets: Iterable[ShardedBucket], dims: ParallelDims) -> None:
        self.buckets, self.dims = list(buckets), dims
        self._pending: list[tuple[int, comms.Pending]] = []
        self.hooks = BucketHooks([b.params for b in self.buckets], self._reduce_scatter,
                                 accumulate=True)

    def _reduce_scatter(self, index: int, grads: list[torch.Tensor]) -> None:
        bucket = self.buckets[index]
        flat = bucket.layout.flatten(grads)  # (padded_numel,)
        for p in bucket.params:
            p.grad = None   # ZeRO-2: the whole gradient is not kept
        # communication: reduce-scatter the bucket over dp; each rank gets the sum of its range
        self._pending.append((index, comms.reduce_scatter(flat, "dp", dims=self.dims, async_op=True)))

    def collect(self) -> None:
        """Wait for every reduce-scatter, put the mean over dp into the shards' gradients."""
        for index, pending in self._pending:
            shard = self.buckets[index].shard
            mean = pending.wait().div_(self.dims.size("dp"))
            shard.grad = mean if shard.grad is None else shard.grad.add_(mean)
        self._pending.clear()
        self.hooks.done()

    def remove(self) -> None:
        self.hooks.remove()


class Zero2Optimizer(ZeroOptimizer):
    """ZeRO-2: `ZeroOptimizer` whose gradients come sharded from backward's hooks.

    Do not all-reduce the gradients yourself: backward reduce-scatters them.
    `zero_grad()` drops the gradient shards as well. PyTorch has no ZeRO-2
    optimizer of its own: its numbers are ZeroRedundancyOptimizer's after DDP
    (tests/axes/test_sharding_pytorch.py). What it accepts (`process_group=` too), its
    state dict and where it differs from ZeroRedundancyOptimizer are
    `ZeroOptimizer`'s, and one more: backward's hooks reduce every bucket on
    every rank, so a bucket nothing used gets a zero gradient and is stepped (as
    `DataParallel` averages it), where ZeRO-1 and PyTorch skip it. Call
    `add_param_group` between steps (after `step()`, before the next backward).

    `GradientShardReducer` does it on the data-parallel wrapper's hooks
    (`data_parallel.overlap.BucketHooks`): when a bucket's last gradient is in,
    its gradients are flattened (the same `FlatLayout` as the optimizer's
    bucket), the whole gradients are dropped, and an asynchronous reduce-scatter
    gives each rank the sum of its range while backward goes on. That is DDP's
    bucket-ready-then-communicate pattern with a reduce-scatter instead of an
    all-reduce (Rajbhandari et al. 2020, Section 5.2, P_os+g).
    """

    def __init__(self, params: Any, optimizer_class: type[torch.optim.Optimizer], dims: ParallelDims | None = None,
                 **kwargs: Any) -> None:
        super().__init__(params, optimizer_class, dims, **kwargs)
        self.reducer = GradientShardReducer(self.buckets, self.dims)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "reducer"):   # added after construction: hook the new buckets too
            self.reducer.remove()
            self.reducer = GradientShardReducer(self.buckets, self.dims)

    def _shard_gradients(self) -> None:
        self.reducer.collect()

    def _after_step(self) -> None:
        pass   # the gradient shards are this rank's gradients: kept until zero_grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for bucket in self.buckets:
            if set_to_none or bucket.shard.grad is None:
                bucket.shard.grad = None
            else:
                bucket.shard.grad.zero_()
