"""The same training with PyTorch's own pipeline: torch.distributed.pipelining.

Each rank wraps our stage module in a `PipelineStage` and hands it to
`ScheduleGPipe` or `Schedule1F1B`. PyTorch splits the batch into
microbatches, sends activations and gradients itself (not through
threeaxes.comms) and, with its default scale_grads=True, divides the summed
gradients by m: the same mean-of-microbatch-means loss as our executor.
"""
from __future__ import annotations

import torch

from ..toy import ToyConfig, lm_loss, make_optimizer
from .stages import build_stage

__all__ = ["torch_pipeline_train"]


def torch_pipeline_train(rank: int, world_size: int, cfg: ToyConfig, batches, *,
                         schedule: str = "1f1b", m: int = 1, lr: float = 1e-2, seed: int = 0,
                         optimizer: str = "sgd") -> dict:
    """Launch on pp ranks, like executor.pipeline_train; returns the same keys
    (no events). Schedule1F1B needs m >= pp."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    if schedule not in classes:
        raise ValueError(f"schedule={schedule!r}; choose one of {sorted(classes)}")
    module = build_stage(cfg, rank, world_size, seed=seed)
    stage = PipelineStage(module, rank, world_size, torch.device("cpu"))
    pipe = classes[schedule](stage, n_microbatches=m, loss_fn=lm_loss)
    opt = make_optimizer(module, lr, optimizer)
    losses = []
    for inputs, targets in batches:
        opt.zero_grad()
        args = (inputs,) if module.is_first else ()
        if module.is_last:
            mb_losses: list = []
            pipe.step(*args, target=targets, losses=mb_losses)
            losses.append(torch.stack(mb_losses).mean().item())
        else:
            pipe.step(*args)
        opt.step()
    params = {n: q.detach().clone() for n, q in module.named_parameters()}
    grads = {n: q.grad.detach().clone() for n, q in module.named_parameters()}
    return {"losses": losses if module.is_last else [], "params": params, "grads": grads}
