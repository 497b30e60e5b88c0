"""A ZeroOptimizer's state in PyTorch's own layout: consolidated on one rank, loaded on every rank."""
from __future__ import annotations

import itertools
from typing import Any

import torch

from threeaxes import comms
from threeaxes.sharding.flat import shard_of

# zero1's ZeroOptimizer and ShardedBucket: zero1 imports this module, so their names cannot come here
_ZeroOptimizer = Any
_ShardedBucket = Any

__all__ = ["consolidate", "load"]


def _all_params(opt: _ZeroOptimizer) -> list[torch.Tensor]:
    return list(itertools.chain.from_iterable(g["params"] for g in opt.param_groups))


def _is_range_state(value: object, shard: torch.Tensor) -> bool:
    """Inner state that holds one number per element of the shard (not a scalar)."""
    return isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape == shard.shape


def _copy(value: Any) -> Any:
    return value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value


def consolidate(opt: _ZeroOptimizer, to: int) -> dict | None:
    """PyTorch's state dict of the whole optimizer on the rank whose dp coordinate is `to`
    (None elsewhere). A collective: every dp rank calls it.

    PyTorch's layout is `torch.optim.Optimizer.state_dict()`'s, which is also what
    `ZeroRedundancyOptimizer.state_dict()` returns after `consolidate_state_dict`:

        {"state": {index: {"step": tensor(3.), "exp_avg": <parameter-shaped>, ...}},
         "param_groups": [{"lr": 0.01, ..., "params": [index, ...]}, ...]}

    `index` counts every parameter of every group in order, frozen ones too (they
    never have state). So a state dict saved here loads into the plain optimizer,
    into ZeroRedundancyOptimizer or into a ZeroOptimizer on another dp size.

    Each rank's inner optimizer holds, per bucket, one state tensor of its range
    ("elementwise" state: Adam's exp_avg and exp_avg_sq, SGD's momentum_buffer)
    and the scalars the whole bucket shares (Adam's `step`). Consolidating
    all-gathers each elementwise tensor over dp, cuts it into the bucket's
    parameters (`FlatLayout.views`) and gives each parameter a copy of the
    bucket's scalars. Loading is the reverse and needs no communication: each rank
    cuts its own range out of every parameter's state (`shard_of`).
    """
    dims, inner = opt.dims, opt.optim.state
    if opt.buckets:
        counts = torch.tensor([sum(_is_range_state(v, b.shard) for v in inner.get(b.shard, {}).values())
                               for b in opt.buckets], device=opt.buckets[0].flat.device)
        # communication: all-reduce over dp how many state tensors each bucket has, so that
        # every rank refuses together (instead of hanging) if the ranks disagree
        total = comms.all_reduce(counts.clone(), "dp", dims=dims)
        if not torch.equal(total, counts * dims.size("dp")):
            raise RuntimeError("the dp ranks' optimizer states differ in shape (a bucket stepped on "
                               "some ranks only); call step() on every dp rank")
    keep = dims.coord("dp") == to
    by_param = {}
    for bucket in opt.buckets:
        state = inner.get(bucket.shard)
        if not state:
            continue   # never stepped: no state, as in PyTorch
        whole = {}
        for key, value in state.items():
            if _is_range_state(value, bucket.shard):
                # communication: all-gather every rank's range of this state over dp (only `to` keeps it)
                whole[key] = bucket.layout.views(comms.all_gather(value, "dp", dims=dims))
            else:
                whole[key] = [value] * len(bucket.params)   # a scalar the bucket shares
        if keep:
            for i, p in enumerate(bucket.params):
                by_param[id(p)] = {key: _copy(values[i]) for key, values in whole.items()}
    if not keep:
        return None
    packed = torch.optim.Optimizer.state_dict(opt)   # param_groups with indices; the outer state is empty
    packed["state"] = {index: by_param[id(p)] for index, p in enumerate(_all_params(opt))
                       if id(p) in by_param}
    return packed


def _is_elementwise(key: str, value: object, param: torch.Tensor) -> bool:
    # a 0-dim parameter's elementwise state is 0-dim too, like Adam's step: tell them by name
    return (isinstance(value, torch.Tensor) and value.shape == param.shape
            and (param.dim() > 0 or key != "step"))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def _bucket_state(bucket: _ShardedBucket, saved: list, index: int) -> dict:
    """The inner state of this rank's range of `bucket`, from its parameters' saved states."""
    at = next(i for i, s in enumerate(saved) if s)   # the first parameter with saved state
    state = {}
    for key, value in saved[at].items():
        values = [s.get(key) if s else None for s in saved]
        param = bucket.params[at]
        if _is_elementwise(key, value, param):
            for v, p in zip(values, bucket.params):
                if v is not None and v.numel() != p.numel():
                    raise ValueError(f"state {key!r} has {v.numel()} numbers for a parameter of "
                                     f"{p.numel()}; the state dict is of another model")
            # a parameter with no saved state starts from zeros, as a zero gradient leaves it
            state[key] = shard_of(bucket.layout, values, index).to(bucket.shard)
        else:
            for v in values:
                if v is not None and not _same(v, value):
                    raise ValueError(
                        f"the parameters of one bucket have different {key!r} ({v} and {value}); "
                        f"a bucket is stepped as one tensor and shares it. Put parameters that "
                        f"were stepped differently in their own parameter group")
            state[key] = value.clone() if isinstance(value, torch.Tensor) else value
    return state


def load(opt: _ZeroOptimizer, state_dict: dict) -> None:
    """Set the hyperparameters and this rank's range of the state from PyTorch's layout.
    No communication: call it on every rank with the same (whole) state dict."""
    # the outer optimizer checks the groups' sizes and takes their hyperparameters
    torch.optim.Optimizer.load_state_dict(opt, {"state": {},
                                                "param_groups": state_dict["param_groups"]})
    index_of = {id(p): i for i, p in enumerate(_all_params(opt))}
    saved_state = state_dict["state"]
    inner_state = {}
    shard_index = {id(s): i for i, s in enumerate(
        itertools.chain.from_iterable(g["params"] for g in opt.optim.param_groups))}
    for bucket in opt.buckets:
        saved = [saved_state.get(index_of[id(p)]) for p in bucket.params]
        if any(saved):
            inner_state[shard_index[id(bucket.shard)]] = _bucket_state(bucket, saved, bucket.index)
    inner = opt.optim.state_dict()
    groups = [{**{k: v for k, v in outer.items() if k != "params"}, "params": g["params"]}
              for outer, g in zip(opt.param_groups, inner["param_groups"])]
    opt.optim.load_state_dict({"state": inner_state, "param_groups": groups})
