"""ZeRO stage 1: each dp rank keeps the optimizer state of its shard only.

    opt = ZeroOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    loss.backward()
    average_gradients(model)   # plain DP: every rank holds the whole mean gradient
    opt.step()                 # step my shard, all-gather the updated shards"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from threeaxes import comms
from threeaxes.data_parallel.buckets import DEFAULT_BUCKET_BYTES, plan_buckets
from threeaxes.data_parallel.torch_options import check_options
from threeaxes.dims import ParallelDims, dp_layout
from threeaxes.sharding.flat import FlatLayout, check_shardable, shard_of
from threeaxes.sharding.state import consolidate, load

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["ZeroOptimizer", "ShardedBucket"]


class ShardedBucket:
    """Some parameters laid end to end in one flat buffer, and this rank's range of it.

    After construction each parameter's data is a view into `flat`; `shard` is a
    view of this rank's range, the tensor the inner optimizer updates in place.
    """

    def __init__(self, params: Iterable[torch.Tensor], n: int, index: int) -> None:
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


# ZeroRedundancyOptimizer's options (PyTorch 2.13) -> (values that behave as here, what instead)
ZERO_OPTIONS = {
    "parameters_as_bucket_view": ((True,), "the parameters here are always views of the flat "
                                           "buckets (the all-gather writes straight into them), "
                                           "as with True; leave it out"),
    "overlap_with_ddp": ((False,), "the step is not run from DDP's communication hook; "
                                   "Zero2Optimizer is the stage whose gradient communication "
                                   "overlaps backward (no DataParallel wrapper needed): use it "
                                   "and leave this out"),
}


def _check_optimizer_class(optimizer_class: object) -> None:
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
        raise TypeError(f"optimizer_class={optimizer_class!r} is not a torch.optim.Optimizer "
                        f"subclass; pass the class itself, e.g. torch.optim.Adam, and its "
                        f"arguments as keywords (lr=...)")


class ZeroOptimizer(torch.optim.Optimizer):
    """ZeRO-1: optimizer state sharded over the dp ranks, gradients all-reduced before.

    Takes what `torch.distributed.optim.ZeroRedundancyOptimizer` takes: an
    iterable of tensors or of parameter-group dicts with their own
    hyperparameters, any `torch.optim.Optimizer` subclass and its keywords,
    frozen parameters (`requires_grad=False`: kept out of the buckets, never
    stepped, no state) and `add_param_group` later (every rank, same order).
    With no `dims` and no current layout it shards over the default process
    group, as ZeroRedundancyOptimizer does (`threeaxes.dims.dp_layout`);
    `process_group=` takes a group of every rank or the current layout's dp
    group, as ZeroRedundancyOptimizer's does.

    Call `step()` on every dp rank after the gradients have been averaged
    (e.g. `data_parallel.average_gradients`). Hyperparameters changed in
    `param_groups` (an LR scheduler) reach the inner optimizer at each step.
    `consolidate_state_dict(to=r)` on every rank, then `state_dict()` on rank
    r (r a rank of the dp group, as ZeroRedundancyOptimizer's `to` is a rank of
    its group), gives PyTorch's layout (state.py); `load_state_dict` on every
    rank takes it back, from here or from ZeroRedundancyOptimizer.

    Where it differs from ZeroRedundancyOptimizer on purpose:
    * it cuts flat buckets into equal ranges instead of giving each rank whole
      parameters (below), so the inner optimizer must be
      elementwise (SGD, Adam, AdamW...: not LAMB or Adafactor), and the
      parameters of one group share one dtype;
    * a bucket is stepped as one tensor: a trainable parameter that gets no
      gradient in a step while others of its bucket do counts as a zero
      gradient (as in `data_parallel.DataParallel`, DeepSpeed and FSDP1's
      flat parameters), so Adam's momentum and weight decay still move it;
      PyTorch's optimizers skip it. A bucket with no gradient at all is
      skipped, so a parameter group of parameters used together behaves
      exactly as in PyTorch;
    * a parameter frozen when it is added stays out of the shards: unfreezing
      it later raises at `step()` (make a new optimizer with it trainable);
      ZeroRedundancyOptimizer rebuilds its buckets;
    * the parameters are always views of the flat buckets (its
      `parameters_as_bucket_view=True`; False is refused, saying so), and
      `overlap_with_ddp=True` is refused: Zero2Optimizer is the overlapped
      stage here (ZERO_OPTIONS); `bucket_bytes` is ours (its buckets hold
      whole parameters per rank).

    The signature is `torch.distributed.optim.ZeroRedundancyOptimizer`'s
    (params, optimizer_class, **defaults), with the layout `dims` in the place of
    its process group (none: the current layout, else the default process group;
    `process_group=` is taken too). It shards differently: ZeroRedundancyOptimizer
    gives each rank whole parameters (so its shards are uneven and a rank may hold
    nothing); here each parameter group is cut into buckets of about `bucket_bytes`, and
    each bucket is one flat buffer cut into dp equal ranges (`flat.FlatLayout`,
    padded to a multiple of dp), so every rank holds exactly 1/dp of the
    optimizer state, as ZeRO's P_os does (Rajbhandari et al. 2020, Section 5.1).

    The parameters themselves become views into the buckets' flat buffers, so
    the all-gather after the step writes straight into them. The inner optimizer
    (`optimizer_class`) sees one tensor per bucket: this rank's range of it.
    """

    def __init__(self, params: Any, optimizer_class: type[torch.optim.Optimizer], dims: ParallelDims | None = None,
                 *, bucket_bytes: int = DEFAULT_BUCKET_BYTES, process_group: ProcessGroup | None = None,
                 **defaults: Any) -> None:
        _check_optimizer_class(optimizer_class)
        # ZeroRedundancyOptimizer's own options are not the inner optimizer's: take them out
        check_options(type(self).__name__, {k: defaults.pop(k) for k in list(defaults)
                                            if k in ZERO_OPTIONS}, ZERO_OPTIONS)
        self.dims = dp_layout(dims, process_group)
        self.bucket_bytes = bucket_bytes
        self.buckets: list[ShardedBucket] = []
        self.frozen: list[torch.Tensor] = []
        self._inner_groups: list[dict] = []
        self._consolidated: dict | None = None
        super().__init__(params, defaults)   # calls add_param_group for every group
        self.optim = optimizer_class(self._inner_groups, **defaults)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)   # the inner defaults too

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (its own buckets); a collective in effect: every dp rank, same order."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        number = len(self.param_groups) - 1
        trainable = [p for p in group["params"] if p.requires_grad]
        self.frozen += [p for p in group["params"] if not p.requires_grad]
        buckets: list[ShardedBucket] = []
        if trainable:
            check_shardable(trainable, what=f"parameter group {number}")
            # backward makes the last parameters' gradients first: lay buckets out in that order
            ordered = trainable[::-1]
            plan = plan_buckets([p.numel() * p.element_size() for p in ordered], self.bucket_bytes)
            n, index = self.dims.size("dp"), self.dims.coord("dp")
            buckets = [ShardedBucket([ordered[i] for i in bucket], n, index) for bucket in plan]
        self.buckets += buckets
        inner_group = {**_hyperparameters(group), "params": [b.shard for b in buckets]}
        if hasattr(self, "optim"):
            self.optim.add_param_group(inner_group)
            _copy_hyperparameters(self.optim.param_groups[-1:], self.param_groups[-1:])
        else:
            self._inner_groups.append(inner_group)

    def _shard_gradients(self) -> None:
        """Give each bucket's shard its gradient (ZeRO-1: cut from the whole gradients)."""
        for bucket in self.buckets:
            bucket.shard.grad = bucket.gradient_shard()

    def _after_step(self) -> None:
        # ZeRO-1 keeps the whole gradients; the shard's copy was only for the step
        for bucket in self.buckets:
            bucket.shard.grad = None

    # Optimizer.step is two overloads (a closure returning a float, or none); one signature here
    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        unfrozen = sum(p.requires_grad for p in self.frozen)
        if unfrozen:
            raise RuntimeError(f"{unfrozen} parameter(s) were frozen (requires_grad=False) when "
                               f"they were given to this optimizer and are trainable now; they are "
                               f"in no shard, so make a new optimizer with them")
        loss: float | None = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        self._shard_gradients()
        self.optim.step()   # updates this rank's ranges in place, and their state only
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        # communication: all-gather every bucket's updated shards over dp, all started at once
        pending = [comms.all_gather(b.shard, "dp", dims=self.dims, async_op=True)
                   for b in self.buckets]
        for bucket, gathered in zip(self.buckets, pending):
            bucket.flat.copy_(gathered.wait())   # the parameters are views of flat
        self._after_step()
        return loss

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect the whole optimizer state on dp rank `to` (its coordinate on the dp axis,
        as ZeroRedundancyOptimizer's `to` is a rank of its group). Every dp rank calls it."""
        if type(to) is not int or not 0 <= to < self.dims.size("dp"):
            raise ValueError(f"to={to!r}; choose a dp rank 0..{self.dims.size('dp') - 1}")
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        self._consolidated = consolidate(self, to)

    def state_dict(self) -> dict[str, Any]:
        """The state collected by the last `consolidate_state_dict(to=this rank)`, in the
        wrapped optimizer's own layout; the hyperparameters as they are now."""
        if self._consolidated is None:
            raise RuntimeError(
                f"the optimizer state has not been consolidated on this rank; call "
                f"consolidate_state_dict(to={self.dims.coord('dp')}) on every dp rank first "
                f"(each rank holds only its shard of the state)")
        packed = torch.optim.Optimizer.state_dict(self)
        packed["state"] = self._consolidated["state"]
        return packed

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the hyperparameters and this rank's range of every parameter's state from a
        state dict in PyTorch's layout. Call it on every dp rank with the whole dict."""
        load(self, state_dict)


def _copy_hyperparameters(source_groups: Iterable[dict], target_groups: Iterable[dict]) -> None:
    for source, target in zip(source_groups, target_groups):
        target.update(_hyperparameters(source))


def _hyperparameters(group: dict) -> dict:
    return {k: v for k, v in group.items() if k != "params"}
