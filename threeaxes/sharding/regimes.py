"""One training step of the toy under each memory regime, and what each rank then holds.

    held = launch(measure_regimes, 4, cfg, batch)          # measured, per rank
    predicted = predicted_bytes(cfg, "zero2", 4)           # the cost model, for rank 0"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from threeaxes.cost.memory import ZERO_REGIMES

if TYPE_CHECKING:
    from threeaxes.cost.placement import RankParams
    from threeaxes.dims import ParallelDims
    from threeaxes.toy import ToyConfig

__all__ = ["REGIMES", "build_regime", "step_regime", "measure_regimes", "predicted_bytes", "predicted_gathered_peak",
           "predicted_wire_bytes"]

REGIMES = ("dp", "zero1", "zero2", "zero3", "tp", "pp")
STEP_COUNTER_BYTES = 4   # torch.optim.Adam's `step`: a float32 tensor of one number per tensor


def build_regime(regime: str, cfg: ToyConfig, world_size: int, lr: float = 1e-3,
                 prefetch: bool = False) -> tuple[ParallelDims, nn.Module, torch.optim.Optimizer]:
    """(dims, model, optimizer) of this rank under `regime`: the model is the rank's
    toy, tensor-parallel shard or pipeline stage; ZeRO-3 prefetches if asked."""
    from threeaxes import sharding
    from threeaxes.dims import ParallelDims
    from threeaxes.tensor_parallel import tensor_parallel_toy
    from threeaxes.toy import ToyTransformer

    model: nn.Module   # the rank's toy, its tensor-parallel shard or its pipeline stage
    if regime == "tp":
        dims = ParallelDims.init(tp=world_size)
        model = tensor_parallel_toy(ToyTransformer(cfg, seed=0), dims)
        return dims, model, torch.optim.Adam(model.parameters(), lr=lr)
    if regime == "pp":
        from threeaxes.pipeline.stages import build_stage

        dims = ParallelDims.init(pp=world_size)
        model = build_stage(cfg, dims.coord("pp"), world_size)
        return dims, model, torch.optim.Adam(model.parameters(), lr=lr)
    dims = ParallelDims.init(dp=world_size)
    model = ToyTransformer(cfg, seed=0)
    if regime == "zero1":
        return dims, model, sharding.ZeroOptimizer(model.parameters(), torch.optim.Adam, dims, lr=lr)
    if regime == "zero2":
        return dims, model, sharding.Zero2Optimizer(model.parameters(), torch.optim.Adam, dims, lr=lr)
    if regime == "zero3":
        for block in model.blocks:
            sharding.fully_shard(block, dims, prefetch)   # one unit per block
        sharding.fully_shard(model, dims, prefetch)       # the root: embeddings, final norm, head
    return dims, model, torch.optim.Adam(model.parameters(), lr=lr)


def step_regime(regime: str, dims: ParallelDims, model: nn.Module, optimizer: torch.optim.Optimizer,
                inputs: torch.Tensor, targets: torch.Tensor) -> None:
    """One optimizer step on the global batch (inputs, targets) under `regime`."""
    from threeaxes.data_parallel import average_gradients, shard_batch
    from threeaxes.pipeline import make_plan
    from threeaxes.pipeline.executor import run_plan
    from threeaxes.toy import lm_loss

    optimizer.zero_grad()
    if regime == "pp":
        # phase: one 1F1B step over the pipeline, one microbatch per stage
        run_plan(make_plan("1f1b", dims.pp, dims.pp), {dims.coord("pp"): model}, inputs, targets, dims)
    else:
        if regime != "tp":
            inputs, targets = shard_batch(inputs, targets, dims)
        lm_loss(model(inputs), targets).backward()
        if regime in ("dp", "zero1"):
            # communication: all-reduce every gradient over dp (ZeRO-2/3 reduce-scatter in hooks)
            average_gradients(model, dims)
    optimizer.step()


def measure_regimes(rank: int, world_size: int, cfg: ToyConfig, batch: tuple[torch.Tensor, torch.Tensor],
                    regimes: Iterable[str] = REGIMES, lr: float = 1e-3) -> dict:
    """A `launch` target: one step under each regime; per regime this rank's
    {"held": (params, grads, optimizer, total) bytes, "gathered_peak": bytes,
     "wire": bytes this rank sent in the step, "coords": its (dp, tp, pp) coordinates}.

    The regimes, each on `world_size` ranks (Adam, in the toy's dtype):

        dp      plain data parallelism: every rank the whole model and optimizer
        zero1   ZeroOptimizer: the optimizer state sharded, gradients all-reduced first
        zero2   Zero2Optimizer: the gradients reduce-scattered and sharded too
        zero3   fully_shard on every block and the root: the parameters sharded too
        tp      tensor parallelism over all ranks (tp = world_size)
        pp      pipeline parallelism over all ranks (pp = world_size), one stage each

    Measured: `held_bytes` counts the tensors a rank keeps after the step;
    `GATHERED.peak` the most whole ZeRO-3 parameters alive at once; the trace
    the bytes each rank put on the wire (`cost.network.bytes_sent_per_gpu`).

    Predicted: `cost.placement.rank_params` says how many parameters the rank's
    (tp, pp) position holds and `rank_state_bytes` applies ZeRO's accounting to
    them (4 + 4 bytes per fp32 parameter and gradient, 8 for Adam's two moments).
    One term is PyTorch's, not the paper's: Adam keeps a one-number float32
    `step` counter for every tensor it updates, 4 bytes each, so the optimizer
    term adds 4 bytes per tensor stepped (every parameter tensor; or one per
    bucket under ZeRO-1/2, one per unit under ZeRO-3, which step flat shards).
    The toy's flat buffers need no padding on 2 or 4 ranks; with padding the
    measured shards would be larger by under dp numbers per bucket or unit.
    """
    from threeaxes import sharding, trace
    from threeaxes.cost.network import bytes_sent_per_gpu

    bad = sorted(set(regimes) - set(REGIMES))
    if bad:
        raise ValueError(f"unknown regime(s) {bad}; choose from {list(REGIMES)}")
    out = {}
    for regime in regimes:
        dims, model, optimizer = build_regime(regime, cfg, world_size, lr)
        sharding.GATHERED.reset_peak()
        with trace.record() as recorded:
            step_regime(regime, dims, model, optimizer, *batch)
        wire = sum(bytes_sent_per_gpu(e.op, e.bytes, len(e.group)) for e in recorded.comms())
        out[regime] = {"held": tuple(sharding.held_bytes(model, optimizer)),
                       "gathered_peak": sharding.GATHERED.peak, "wire": wire,
                       "coords": {a: dims.coord(a) for a in ("dp", "tp", "pp")}}
    return out


# -- what the cost model says ------------------------------------------------------------

def _rank_params(cfg: ToyConfig, *, tp: int = 1, pp: int = 1, stage: int = 0) -> RankParams:
    from threeaxes.cost.placement import rank_params

    return rank_params(cfg.n_layers, cfg.d_model, cfg.vocab_size, cfg.seq_len, tp=tp, pp=pp,
                       stage=stage, ffn_hidden=cfg.d_mlp, tied_embeddings=False, final_norm=True)


def _tensors_stepped(cfg: ToyConfig, regime: str, stage: int, world_size: int) -> int:
    """How many tensors Adam updates on the rank: each has its own step counter."""
    from threeaxes.data_parallel.buckets import DEFAULT_BUCKET_BYTES, plan_buckets
    from threeaxes.toy import ToyTransformer

    model = ToyTransformer(cfg)
    if regime == "zero3":
        return cfg.n_layers + 1                          # one flat shard per block, one for the root
    if regime in ("zero1", "zero2"):
        sizes = [p.numel() * p.element_size() for p in model.parameters()][::-1]
        return len(plan_buckets(sizes, DEFAULT_BUCKET_BYTES))   # one flat shard per bucket
    if regime == "pp":
        from threeaxes.pipeline.stages import build_stage

        return len(list(build_stage(cfg, stage, world_size).parameters()))
    return len(list(model.parameters()))                # dp and tp: every tensor (tp shards keep the count)


def predicted_bytes(cfg: ToyConfig, regime: str, world_size: int, stage: int = 0) -> dict:
    """{"params", "grads", "optimizer", "total"} bytes for a rank (a pp rank: of `stage`)."""
    from threeaxes.cost.placement import rank_state_bytes

    if regime not in REGIMES:
        raise ValueError(f"regime={regime!r}; choose from {list(REGIMES)}")
    held = _rank_params(cfg, tp=world_size if regime == "tp" else 1,
                        pp=world_size if regime == "pp" else 1, stage=stage).total
    element = torch.finfo(cfg.dtype).bits // 8
    states = rank_state_bytes(held, dp=world_size if regime in ZERO_REGIMES else 1,
                              zero_stage=ZERO_REGIMES.get(regime, 0),
                              precision="fp32", optimizer_bytes=2 * element)
    scale = element / 4   # rank_state_bytes' "fp32" counts 4-byte parameters and gradients
    optimizer = states.optimizer + STEP_COUNTER_BYTES * _tensors_stepped(cfg, regime, stage, world_size)
    params, grads = states.params * scale, states.grads * scale
    return {"params": params, "grads": grads, "optimizer": optimizer,
            "total": params + grads + optimizer}


def predicted_gathered_peak(cfg: ToyConfig, prefetch: bool = False) -> float:
    """ZeRO-3's most whole parameters alive at once: the root unit (embeddings, final norm,
    head), gathered while the blocks inside it run, plus one block (two when prefetching)."""
    r = _rank_params(cfg)
    element = torch.finfo(cfg.dtype).bits // 8
    block = r.layers // cfg.n_layers
    return element * (r.embeddings + r.final_norm + r.head + (2 if prefetch else 1) * block)


def predicted_wire_bytes(cfg: ToyConfig, regime: str, world_size: int) -> float:
    """Bytes a rank sends per step under a ZeRO regime, by Rajbhandari et al. 2020, Section 7:
    2 Psi for DP and stages 1-2 (reduce-scatter + all-gather), 3 Psi for stage 3, each
    collective of S bytes costing (n - 1) / n S per rank on a ring."""
    if regime not in ZERO_REGIMES:
        raise ValueError(f"regime={regime!r}; the ZeRO volumes are for {list(ZERO_REGIMES)}")
    psi = _rank_params(cfg).total * (torch.finfo(cfg.dtype).bits // 8)
    return (3 if regime == "zero3" else 2) * psi * (world_size - 1) / world_size
