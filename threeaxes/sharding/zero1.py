"""ZeRO stage 1: each dp rank keeps the optimizer state of its shard only.

    opt = ZeroOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    loss.backward()
    average_gradients(model)   # plain DP: every rank holds the whole mean gradient
    opt.step()                 # step my shard, all-gather the updated shards

The signature is `torch.distributed.optim.ZeroRedundancyOptimizer`'s
(params, optimizer_class, **defaults), with the layout `dims` instead of a
process group. It shards differently: ZeroRedundancyOptimizer gives each rank
whole parameters (so its shards are uneven and a rank may hold nothing);
here each parameter group is cut into buckets of about `bucket_bytes`, and
each bucket is one flat buffer cut into dp equal ranges (`flat.FlatLayout`,
padded to a multiple of dp), so every rank holds exactly 1/dp of the
optimizer state, as ZeRO's P_os does (Rajbhandari et al. 2020, Section 5.1).

The parameters themselves become views into the buckets' flat buffers, so
the all-gather after the step writes straight into them. The inner optimizer
(`optimizer_class`) sees one tensor per bucket: this rank's range of it.
"""
from __future__ import annotations

import torch

from threeaxes import comms
from threeaxes.data_parallel.buckets import DEFAULT_BUCKET_BYTES, plan_buckets
from threeaxes.dims import resolve
from threeaxes.sharding.flat import FlatLayout, check_shardable, shard_of

__all__ = ["ZeroOptimizer", "ShardedBucket"]


class ShardedBucket:
    """Some parameters laid end to end in one flat buffer, and this rank's range of it.

    After construction each parameter's data is a view into `flat`; `shard` is a
    view of this rank's range, the tensor the inner optimizer updates in place.
    """

    def __init__(self, params, n: int, index: int):
        self.params = list(params)
        self.layout = FlatLayout([p.shape for p in self.params], n)
        self.index = index   # this rank's dp coordinate: which range it owns
        with torch.no_grad():
            self.flat = self.layout.flatten(self.params)  # (padded_numel,)
            for p, view in zip(self.params, self.layout.views(self.flat)):
                p.data = view
        start, stop = self.layout.shard_range(index)
        self.shard = self.flat[start:stop]  # (shard_numel,), shares memory with flat

    def gradient_shard(self) -> torch.Tensor | None:
        """This rank's range of the bucket's (whole, already averaged) gradients."""
        grads = [p.grad for p in self.params]
        if all(g is None for g in grads):
            return None
        return shard_of(self.layout, grads, self.index)


def _check_optimizer_class(optimizer_class):
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
        raise TypeError(f"optimizer_class={optimizer_class!r} is not a torch.optim.Optimizer "
                        f"subclass; pass the class itself, e.g. torch.optim.Adam, and its "
                        f"arguments as keywords (lr=...)")


class ZeroOptimizer(torch.optim.Optimizer):
    """ZeRO-1: optimizer state sharded over the dp ranks, gradients all-reduced before.

    Call `step()` on every dp rank after the gradients have been averaged
    (e.g. `data_parallel.average_gradients`). Hyperparameters changed in
    `param_groups` (an LR scheduler) reach the inner optimizer at each step.
    """

    def __init__(self, params, optimizer_class, dims=None, *,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, **defaults):
        _check_optimizer_class(optimizer_class)
        super().__init__(params, defaults)
        self.dims = resolve(dims)
        n, index = self.dims.size("dp"), self.dims.coord("dp")
        self.buckets: list[ShardedBucket] = []
        inner_groups = []
        for number, group in enumerate(self.param_groups):
            check_shardable(group["params"], what=f"parameter group {number}")
            # backward makes the last parameters' gradients first: lay buckets out in that order
            ordered = group["params"][::-1]
            plan = plan_buckets([p.numel() * p.element_size() for p in ordered], bucket_bytes)
            buckets = [ShardedBucket([ordered[i] for i in bucket], n, index) for bucket in plan]
            self.buckets += buckets
            inner_groups.append({**_hyperparameters(group), "params": [b.shard for b in buckets]})
        self.optim = optimizer_class(inner_groups, **defaults)

    def add_param_group(self, param_group):
        if hasattr(self, "optim"):
            raise NotImplementedError("a ZeroOptimizer's buckets are fixed when it is made; "
                                      "make a new ZeroOptimizer with every parameter group")
        super().add_param_group(param_group)

    def _shard_gradients(self) -> None:
        """Give each bucket's shard its gradient (ZeRO-1: cut from the whole gradients)."""
        for bucket in self.buckets:
            bucket.shard.grad = bucket.gradient_shard()

    def _after_step(self) -> None:
        # ZeRO-1 keeps the whole gradients; the shard's copy was only for the step
        for bucket in self.buckets:
            bucket.shard.grad = None

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for outer, inner in zip(self.param_groups, self.optim.param_groups):
            inner.update(_hyperparameters(outer))
        self._shard_gradients()
        self.optim.step()   # updates this rank's ranges in place, and their state only
        # communication: all-gather every bucket's updated shards over dp, all started at once
        pending = [comms.all_gather(b.shard, "dp", dims=self.dims, async_op=True)
                   for b in self.buckets]
        for bucket, gathered in zip(self.buckets, pending):
            bucket.flat.copy_(gathered.wait())   # the parameters are views of flat
        self._after_step()
        return loss

    def state_dict(self):
        raise NotImplementedError(
            "each rank holds only its shard of the optimizer state; save "
            "opt.optim.state_dict() on every rank (consolidating it on one rank is not built)")

    def load_state_dict(self, state_dict):
        raise NotImplementedError("load each rank's own shard with opt.optim.load_state_dict(...)")


def _hyperparameters(group: dict) -> dict:
    return {k: v for k, v in group.items() if k != "params"}
