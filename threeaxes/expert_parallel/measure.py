"""One traced expert-parallel training step on launched ranks, and what its trace says.

    results = launch(ep_step, 2, cfg, moe, inputs, targets)
    bytes_per_rank(results)        # all-to-all bytes (comms' S) each rank sent, per layer
    load_by_expert(results)        # each layer's token choices per expert, kept and dropped"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch
import torch.nn as nn

from threeaxes import trace as trace_module
from threeaxes.expert_parallel.config import MoEConfig
from threeaxes.expert_parallel.experts import MoEToy, skew_router_
from threeaxes.expert_parallel.layer import (
    ExpertParallelMoE,
    expert_parallel_toy,
    shard_batch_ep,
    sum_replicated_grads,
)
from threeaxes.expert_parallel.routing import Routing
from threeaxes.extra_axes import axis_layout
from threeaxes.toy import ToyConfig, lm_loss

__all__ = ["ep_step", "ep_steps", "bytes_per_rank", "load_by_expert"]


def ep_step(rank: int, world_size: int, cfg: ToyConfig, moe: MoEConfig, inputs: torch.Tensor, targets: torch.Tensor,
            *, seed: int = 0, skew: float = 0.0) -> dict[str, Any]:
    """`ep_step` (a `launch` target) builds the MoE toy from its seed on every rank, makes it
    expert-parallel over all the ranks, runs forward and backward on this rank's rows of the
    batch under `trace.record()` (a forward and a backward span per layer), sums the copied
    weights' gradients over ep, and returns raw values: logits, the loss, every gradient, the
    trace, each layer's routing counts.
    """
    ep = axis_layout("ep")
    reference = MoEToy(cfg, moe, seed)
    if skew:
        skew_router_(reference, expert=0, strength=skew)
    model = expert_parallel_toy(reference, ep)
    x, y = shard_batch_ep(inputs, ep), shard_batch_ep(targets, ep)
    with trace_module.record() as t, trace_module.module_spans(model):
        logits = model(x)
        # this rank's share of the mean over every rank's tokens (equal shares)
        loss = lm_loss(logits, y) / world_size
        loss.backward()
        sum_replicated_grads(model, ep)
    layers = [_routing(block) for block in model.blocks]
    return {"logits": logits.detach(), "loss": loss.item(), "trace": t,
            # every parameter has a gradient after the backward just run
            "grads": {name: cast(torch.Tensor, p.grad).clone() for name, p in model.named_parameters()},
            "routing": [{"load": r.load(), "kept": r.kept_per_expert(), "dropped": r.dropped(),
                         "capacity": r.capacity} for r in layers]}


def _routing(block: nn.Module) -> Routing:
    """This rank's Routing in a block of the expert-parallel toy, after its forward."""
    routing = cast(ExpertParallelMoE, block.mlp).routing   # nn.Module types its attributes Tensor | Module
    assert routing is not None   # set by the forward just run
    return routing


def ep_steps(rank: int, world_size: int, cfg: ToyConfig, runs: Iterable[dict[str, Any]], inputs: torch.Tensor,
             targets: torch.Tensor, *, seed: int = 0) -> list[dict[str, Any]]:
    """`ep_step` once per run of `runs` ({"moe": MoEConfig, "skew": float}), in one launch."""
    return [ep_step(rank, world_size, cfg, run["moe"], inputs, targets, seed=seed,
                    skew=run.get("skew", 0.0)) for run in runs]


def bytes_per_rank(results: Sequence[dict[str, Any]], n_layers: int | None = None) -> list[int]:
    """Each rank's all-to-all bytes in its trace (comms' convention, S per all-to-all),
    divided by the number of MoE layers when `n_layers` is given."""
    out: list[int] = []
    for r, result in enumerate(results):
        total = result["trace"].total_bytes(op="all_to_all", axis="ep", rank=r)
        out.append(total // n_layers if n_layers else total)
    return out


def load_by_expert(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer, summed over ranks: choices per expert (`load`), those kept, those dropped."""
    layers = []
    for i in range(len(results[0]["routing"])):
        rows = [result["routing"][i] for result in results]
        layers.append({key: [sum(v) for v in zip(*(row[key] for row in rows))]
                       for key in ("load", "kept")} | {"dropped": sum(row["dropped"] for row in rows)})
    return layers
