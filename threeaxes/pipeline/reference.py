"""The same training with PyTorch's own pipeline: torch.distributed.pipelining.

Each rank builds the layout (`ParallelDims.init(pp=world_size)`), wraps our
stage module in a `PipelineStage` on the layout's pp group and hands it to
`ScheduleGPipe` or `Schedule1F1B`. PyTorch splits the batch into
microbatches, sends activations and gradients itself (not through
threeaxes.comms) and, with its default scale_grads=True, divides the summed
gradients by m: the same mean-of-microbatch-means loss as our executor.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..dims import ParallelDims
from ..toy import ToyConfig, lm_loss, make_optimizer
from .stages import build_stage

__all__ = ["torch_pipeline_train"]


def torch_pipeline_train(rank: int, world_size: int, cfg: ToyConfig, batches, *,
                         schedule: str = "1f1b", m: int = 1, lr: float = 1e-2, seed: int = 0,
                         optimizer: str = "sgd") -> dict:
    """Launch on pp ranks, like `threeaxes.train.pipeline_train`; returns
    {"losses", "params", "grads"} (no trace). Schedule1F1B needs m >= pp."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    if schedule not in classes:
        raise ValueError(f"schedule={schedule!r}; choose one of {sorted(classes)}")
    dims = ParallelDims.init(pp=world_size).check_model(cfg)
    stage_index = dims.coord("pp")
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    module = build_stage(cfg, stage_index, dims.pp, seed=seed).to(device)
    # communication: PyTorch's stage sends and receives on the layout's pp group
    stage = PipelineStage(module, stage_index, dims.pp, device, group=dims.group("pp"))
    pipe = classes[schedule](stage, n_microbatches=m, loss_fn=lm_loss)
    opt = make_optimizer(module, lr, optimizer)
    losses = []
    for inputs, targets in batches:
        opt.zero_grad()
        args = (inputs.to(device),) if module.is_first else ()
        if module.is_last:
            mb_losses: list = []
            pipe.step(*args, target=targets.to(device), losses=mb_losses)
            losses.append(torch.stack(mb_losses).mean().item())
        else:
            pipe.step(*args)
        opt.step()
    params = {n: q.detach().cpu().clone() for n, q in module.named_parameters()}
    grads = {n: q.grad.detach().cpu().clone() for n, q in module.named_parameters()}
    return {"losses": losses if module.is_last else [], "params": params, "grads": grads}
