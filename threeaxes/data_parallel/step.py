"""Data parallelism from scratch: split the batch, average the gradients."""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn

from threeaxes import comms, trace
from threeaxes.data_parallel.buckets import DEFAULT_BUCKET_BYTES, check_bucket_bytes, plan_buckets
from threeaxes.dims import ParallelDims, dp_layout
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_optimizer

__all__ = ["shard_batch", "average_gradients", "gradient_buckets", "average_gradients_bucketed",
           "train_data_parallel"]


# -- the batch ----------------------------------------------------------------------

def shard_batch(inputs: torch.Tensor, targets: torch.Tensor,
                dims: ParallelDims | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's contiguous slice of a global batch (dim 0 is the batch), by its
    dp coordinate in `dims` (None: the current layout, else every rank as dp).

    dp rank i gets examples [i * B/dp, (i+1) * B/dp). The global batch B must be
    a multiple of dp: with unequal slices the mean of local mean-losses would no
    longer be the global mean loss. Ranks that differ only in tp or pp get the
    same slice.
    """
    dims = dp_layout(dims)
    dp, dp_rank = dims.dp, dims.coord("dp")
    batch = inputs.shape[0]
    if targets.shape[0] != batch:
        raise ValueError(f"inputs hold {batch} examples but targets hold {targets.shape[0]}; "
                         f"pass matching (inputs, targets)")
    if batch % dp:
        raise ValueError(f"global batch {batch} does not split over dp={dp}; "
                         f"use a multiple of {dp}")
    per_rank = batch // dp
    rows = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    return inputs[rows], targets[rows]


# -- averaging gradients --------------------------------------------------------------

def _grads(model: nn.Module) -> list[torch.Tensor]:
    """The gradient of every trainable parameter, in registration order.

    A parameter that got no gradient this step gets zeros, so that every rank
    makes the same collectives in the same order."""
    grads = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    return grads


def average_gradients(model: nn.Module, dims: ParallelDims | None = None) -> None:
    """Replace each parameter's gradient by its mean over the dp ranks.

    One all-reduce per parameter tensor, in registration order, then a
    division by dp. Call it after `loss.backward()` and before
    `optimizer.step()`, on every rank of the layout (`dims`; None: the current
    one, else every rank as one dp axis on the default process group).
    """
    dims = dp_layout(dims)
    if dims.dp == 1:
        return  # one replica: its gradient is already the mean
    for grad in _grads(model):
        # communication: sum this parameter's gradient over the dp ranks (in place)
        comms.all_reduce(grad, "dp", dims=dims)
        grad.div_(dims.dp)


def gradient_buckets(model: nn.Module, bucket_bytes: int) -> list[list[torch.Tensor]]:
    """The gradients of `model` grouped as `average_gradients_bucketed` sends them.

    The order is the reverse of registration (head first, embeddings last),
    as in DDP: backward produces the last layers' gradients first, so a
    bucket fills up, and could be sent, while backward is still running.
    """
    check_bucket_bytes(bucket_bytes)
    grads = _grads(model)[::-1]
    dtypes = {g.dtype for g in grads}
    if len(dtypes) > 1:
        raise ValueError(f"the gradients have dtypes {sorted(map(str, dtypes))}; a bucket is one "
                         f"flat buffer, so give the model a single dtype (e.g. model.double())")
    plan = plan_buckets([g.numel() * g.element_size() for g in grads], bucket_bytes)
    return [[grads[i] for i in bucket] for bucket in plan]


def average_gradients_bucketed(model: nn.Module, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                               dims: ParallelDims | None = None) -> None:
    """Like `average_gradients`, but one all-reduce per bucket of gradients.

    For each bucket (see `gradient_buckets`): copy its gradients into one flat
    buffer, all-reduce the buffer, divide by dp, copy the slices back.

    Every dp rank holds the same full model. Each step, rank i takes the i-th
    equal slice of the global batch, runs forward and backward on it alone, and
    then the ranks all-reduce their gradients and divide by dp. Because every
    slice has the same size, the mean of the dp local mean-losses is the global
    mean loss, so the averaged gradient is exactly the gradient one process would
    get from the whole batch, and the identical optimizer step on every rank
    keeps the replicas identical.

    Two ways to average, same result, different number of messages:

    * `average_gradients`: one all-reduce per parameter tensor.
    * `average_gradients_bucketed`: gradients are copied into flat buffers of
      about `bucket_bytes` each (`plan_buckets` in buckets.py decides which go
      together), one all-reduce per buffer, then copied back. Fewer, larger messages, which is
      what `DistributedDataParallel` does (its default bucket is 25 MiB).

    Every function takes the run's layout as `dims`: None means the current
    layout, or with none made (no `ParallelDims.init`), every rank as one dp axis
    on the default process group, as PyTorch's DistributedDataParallel uses it
    (`threeaxes.dims.dp_layout`). Every collective goes through `threeaxes.comms`
    on the "dp" axis, so the trace sees it.
    """
    check_bucket_bytes(bucket_bytes)
    dims = dp_layout(dims)
    if dims.dp == 1:
        return  # one replica: its gradient is already the mean
    for bucket in gradient_buckets(model, bucket_bytes):
        flat = torch.cat([g.reshape(-1) for g in bucket])  # (sum of numels,)
        # communication: sum the whole bucket over the dp ranks in one message
        comms.all_reduce(flat, "dp", dims=dims)
        flat.div_(dims.dp)
        for grad, piece in zip(bucket, flat.split([g.numel() for g in bucket])):
            grad.copy_(piece.view_as(grad))


# -- a whole training run ---------------------------------------------------------------

def train_data_parallel(rank: int, world_size: int, cfg: ToyConfig,
                        batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *, variant: str = "per_param",
                        bucket_bytes: int = DEFAULT_BUCKET_BYTES, lr: float = 1e-2,
                        optimizer: str = "sgd", seed: int = 0) -> dict:
    """Train a fresh `ToyTransformer(cfg, seed)` with pure data parallelism
    (dp = world_size); a `launch` target.

    `batches` is a list of global (inputs, targets); every rank receives all
    of them and keeps its own slice of each. Returns a dict:

    * "state_dict": the final parameters, detached CPU copies (the same on every rank),
    * "losses": this rank's local loss per step (their mean over ranks is the
      single-process loss of the global batch),
    * "trace": the `trace.Trace` of every collective this rank made.
    """
    if variant not in ("per_param", "bucketed"):
        raise ValueError(f"variant={variant!r}; choose 'per_param' or 'bucketed'")
    if variant == "bucketed":
        check_bucket_bytes(bucket_bytes)
    dims = ParallelDims.init(dp=world_size)
    model = ToyTransformer(cfg, seed)  # same seed on every rank: identical replicas
    opt = make_optimizer(model, lr, optimizer)
    losses = []
    with trace.record() as recorded:
        for inputs, targets in batches:
            local_inputs, local_targets = shard_batch(inputs, targets, dims)
            opt.zero_grad()
            loss = lm_loss(model(local_inputs), local_targets)
            loss.backward()
            if variant == "per_param":
                average_gradients(model, dims)
            else:
                average_gradients_bucketed(model, bucket_bytes, dims)
            opt.step()
            losses.append(loss.item())
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return {"state_dict": state, "losses": losses, "trace": recorded}
