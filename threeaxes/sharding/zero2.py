"""ZeRO stage 2: gradients reduce-scattered during backward, each rank keeping its shard.

    opt = Zero2Optimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    loss.backward()   # hooks reduce-scatter each bucket as soon as its gradients are in
    opt.step()        # wait for them, step my shard, all-gather the updated shards

`GradientShardReducer` is the hook machinery: a post-accumulate-grad hook on
every parameter counts the gradients of its bucket; when the last one is in,
the bucket's gradients are flattened (the same `FlatLayout` as the
optimizer's bucket), the whole gradients are dropped, and an asynchronous
reduce-scatter gives each rank the sum of its range while backward goes on.
That is the bucket-ready-then-communicate pattern of DDP, with a
reduce-scatter instead of an all-reduce (Rajbhandari et al. 2020,
Section 5.2, P_os+g).
"""
from __future__ import annotations

import torch

from threeaxes import comms
from threeaxes.sharding.zero1 import ZeroOptimizer

__all__ = ["GradientShardReducer", "Zero2Optimizer"]


class GradientShardReducer:
    """Reduce-scatter the gradients of `buckets` (ShardedBucket) over dp from hooks.

    `collect()` (after backward) waits for every reduce-scatter, divides by dp
    and leaves the mean gradient of each bucket's range in `bucket.shard.grad`
    (adding to it when several backwards ran: gradient accumulation).
    """

    def __init__(self, buckets, dims):
        self.buckets, self.dims = list(buckets), dims
        self._expected = [len(b.params) for b in self.buckets]
        self._filled = [0] * len(self.buckets)   # gradients of each bucket ready in this backward
        self._next = 0                            # the first bucket not launched yet
        self._pending: list[tuple[int, comms.Pending]] = []
        self._bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b.params}
        self.handles = [p.register_post_accumulate_grad_hook(self._on_gradient_ready)
                        for b in self.buckets for p in b.params]

    def _on_gradient_ready(self, param) -> None:
        """Hook: `param.grad` is final for this backward. Launch every full bucket whose
        turn has come: strictly in bucket order, so every rank starts the same
        collectives in the same order whatever order its hooks fire in."""
        self._filled[self._bucket_of[id(param)]] += 1
        while self._next < len(self.buckets) and self._filled[self._next] == self._expected[self._next]:
            self._reduce_scatter(self._next)
        if self._next == len(self.buckets):   # all sent: a further backward starts afresh
            self._next, self._filled = 0, [0] * len(self.buckets)

    def _reduce_scatter(self, index: int) -> None:
        bucket = self.buckets[index]
        # a parameter that got no gradient counts as zeros, so every rank sends the same sizes
        flat = bucket.layout.flatten([p.grad if p.grad is not None else torch.zeros_like(p)
                                      for p in bucket.params])  # (padded_numel,)
        for p in bucket.params:
            p.grad = None   # ZeRO-2: the whole gradient is not kept
        # communication: reduce-scatter the bucket over dp; each rank gets the sum of its range
        self._pending.append((index, comms.reduce_scatter(flat, "dp", dims=self.dims,
                                                          async_op=True)))
        self._next = index + 1

    def collect(self) -> None:
        """Launch the buckets still waiting (some parameter got no gradient), wait for every
        reduce-scatter, put the mean over dp into the shards' gradients."""
        if any(self._filled):
            while self._next < len(self.buckets):
                self._reduce_scatter(self._next)
        self._next, self._filled = 0, [0] * len(self.buckets)
        for index, pending in self._pending:
            shard = self.buckets[index].shard
            mean = pending.wait().div_(self.dims.size("dp"))
            shard.grad = mean if shard.grad is None else shard.grad.add_(mean)
        self._pending.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class Zero2Optimizer(ZeroOptimizer):
    """ZeRO-2: `ZeroOptimizer` whose gradients come sharded from backward's hooks.

    Do not all-reduce the gradients yourself: backward reduce-scatters them.
    `zero_grad()` drops the gradient shards as well.
    """

    def __init__(self, params, optimizer_class, dims=None, **kwargs):
        super().__init__(params, optimizer_class, dims, **kwargs)
        self.reducer = GradientShardReducer(self.buckets, self.dims)

    def _shard_gradients(self) -> None:
        self.reducer.collect()

    def _after_step(self) -> None:
        pass   # the gradient shards are this rank's gradients: kept until zero_grad

    def zero_grad(self, set_to_none: bool = True):
        super().zero_grad(set_to_none)
        for bucket in self.buckets:
            if set_to_none or bucket.shard.grad is None:
                bucket.shard.grad = None
            else:
                bucket.shard.grad.zero_()
