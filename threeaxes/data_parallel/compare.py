"""Naive against overlapped data parallelism, step by step: a `launch` target.

    results = launch(naive_vs_overlapped, 4, cfg, batch, bucket_bytes=65536)"""
from __future__ import annotations

import statistics
import time
from collections.abc import Iterable

import torch
import torch.nn as nn

from threeaxes import comms, trace
from threeaxes.data_parallel.overlap import DataParallel
from threeaxes.data_parallel.step import average_gradients_bucketed, shard_batch
from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss

__all__ = ["VARIANTS", "naive_vs_overlapped", "step_seconds"]

VARIANTS = ("naive", "overlapped")


def _one_step(variant: str, model: nn.Module, wrapped: nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor,
              targets: torch.Tensor, bucket_bytes: int, dims: ParallelDims) -> None:
    opt.zero_grad()
    loss = lm_loss(wrapped(inputs), targets)
    loss.backward()  # overlapped: the buckets' all-reduces start in here
    if variant == "naive":
        # communication: every bucket all-reduced now, after backward
        average_gradients_bucketed(model, bucket_bytes, dims)
    else:
        # communication: wait for the all-reduces backward started
        wrapped.finish_gradient_synchronization()  # type: ignore[operator]  # a DataParallel in this variant
    with trace.span("optimizer", module="model"):
        opt.step()


def naive_vs_overlapped(rank: int, world_size: int, cfg: ToyConfig, batch: tuple[torch.Tensor, torch.Tensor],
                        bucket_bytes: int, *, steps: int = 5, warmup: int = 2, lr: float = 0.1,
                        seed: int = 0) -> dict[str, dict]:
    """Per variant: {"seconds": [time of each timed step on this rank],
    "trace": the traced last step, "state": the final parameters}.

    On every rank, from the same model and the same slice of `batch`:

    * "naive": forward, backward, then `average_gradients_bucketed` (every bucket
      all-reduced after backward has finished), optimizer step;
    * "overlapped": the same through `DataParallel`, whose buckets start their
      all-reduce from gradient hooks while backward is still running.

    Each variant runs `warmup` untimed steps, `steps` timed steps (the two variants
    take turns step by step, and the ranks are lined up before each one, so a
    step's time is the same window on every rank), then one traced step: per-layer forward and backward spans
    (`trace.module_spans`), the optimizer, and each all-reduce.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps={steps}, warmup={warmup}; time at least one step (steps >= 1)")
    dims = ParallelDims.init(dp=world_size)
    inputs, targets = shard_batch(*batch, dims)
    setups: dict[str, tuple[ToyTransformer, nn.Module, torch.optim.Optimizer]] = {}
    for variant in VARIANTS:
        model = ToyTransformer(cfg, seed)
        wrapped = DataParallel(model, bucket_bytes, dims) if variant == "overlapped" else model
        setups[variant] = (model, wrapped, torch.optim.SGD(model.parameters(), lr=lr))
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for step in range(warmup + steps):
        # the two variants take turns, first one then the other, so a slow spell
        # of the machine does not land on one of them only
        for variant in (VARIANTS if step % 2 == 0 else VARIANTS[::-1]):
            # communication: line the ranks up, so each step's clock starts together
            comms.all_reduce(torch.zeros(1), "dp", dims=dims)
            start = time.perf_counter()
            _one_step(variant, *setups[variant], inputs, targets, bucket_bytes, dims)
            if step >= warmup:
                seconds[variant].append(time.perf_counter() - start)
    out: dict[str, dict] = {}
    for variant in VARIANTS:
        model = setups[variant][0]
        comms.all_reduce(torch.zeros(1), "dp", dims=dims)  # communication: line up again
        with trace.record() as recorded, trace.module_spans(model):
            _one_step(variant, *setups[variant], inputs, targets, bucket_bytes, dims)
        out[variant] = {"seconds": seconds[variant], "trace": recorded,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    return out


def step_seconds(results: Iterable[dict[str, dict]], variant: str) -> float:
    """The median over steps of the slowest rank's time: one step of the whole
    group lasts as long as its slowest rank."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}; choose one of {VARIANTS}")
    per_step = [max(step) for step in zip(*(r[variant]["seconds"] for r in results))]
    return statistics.median(per_step)
