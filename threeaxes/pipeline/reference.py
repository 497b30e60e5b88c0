"""The same training with PyTorch's own pipeline: torch.distributed.pipelining."""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

from ..dims import ParallelDims
from ..toy import ToyConfig, lm_loss, make_optimizer
from .stages import build_stage
from .torch_plans import plan_from_torch_order, torch_schedule_class

__all__ = ["torch_pipeline_train"]


def torch_pipeline_train(rank: int, world_size: int, cfg: ToyConfig,
                         batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                         schedule: str = "1f1b", m: int = 1, v: int = 1, lr: float = 1e-2,
                         seed: int = 0, optimizer: str = "sgd") -> dict:
    """Launch on pp ranks, like `threeaxes.train.pipeline_train`; returns
    {"losses", "params", "grads", "plan"} (no trace). Schedule1F1B needs
    m >= pp. "interleaved" and "zero_bubble" take v stages per rank; "plan" is
    the plan PyTorch ran, read into a `Plan` (None for the single-stage
    schedules, which keep no plan).

    Each rank builds the layout (`ParallelDims.init(pp=world_size)`), wraps our
    stage module in a `PipelineStage` on the layout's pp group and hands it to
    `ScheduleGPipe` or `Schedule1F1B`; with v > 1 stages per rank (rank r holds
    stages r, r + p, ...) it hands the v `PipelineStage`s to
    `ScheduleInterleaved1F1B` or `ScheduleInterleavedZeroBubble`
    (`torch_plans.TORCH_SCHEDULES`; the zero-bubble one also runs with v = 1).
    PyTorch splits the batch into
    microbatches, sends activations and gradients itself (not through
    threeaxes.comms) and, with its default scale_grads=True, divides the summed
    gradients by m: the same mean-of-microbatch-means loss as our executor.
    """
    from torch.distributed.pipelining import PipelineStage

    cls = torch_schedule_class(schedule)
    multi = schedule in ("interleaved", "zero_bubble")
    if v != 1 and not multi:
        raise ValueError(f"v={v} stages per rank needs schedule='interleaved' or 'zero_bubble'")
    dims = ParallelDims.init(pp=world_size).check_model(cfg, v)
    rank_in_pp, n_stages = dims.coord("pp"), dims.pp * v
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    # this rank's stages: r, r + p, ..., r + (v - 1) p
    modules = [build_stage(cfg, rank_in_pp + c * dims.pp, n_stages, seed=seed).to(device)
               for c in range(v)]
    # communication: PyTorch's stages send and receive on the layout's pp group
    stages = [PipelineStage(mod, rank_in_pp + c * dims.pp, n_stages, device, group=dims.group("pp"))
              for c, mod in enumerate(modules)]
    pipe = cls(stages if multi else stages[0], n_microbatches=m, loss_fn=lm_loss)
    params_of = torch.nn.ModuleList(modules)
    opt = make_optimizer(params_of, lr, optimizer)
    first = any(mod.is_first for mod in modules)
    last = any(mod.is_last for mod in modules)
    losses = []
    for inputs, targets in batches:
        opt.zero_grad()
        args = (inputs.to(device),) if first else ()
        if last:
            mb_losses: list = []
            pipe.step(*args, target=targets.to(device), losses=mb_losses)
            losses.append(torch.stack(mb_losses).mean().item())
        else:
            pipe.step(*args)
        opt.step()
    named = [(n, q) for mod in modules for n, q in mod.named_parameters()]
    params = {n: q.detach().cpu().clone() for n, q in named}
    grads = {n: q.grad.detach().cpu().clone() for n, q in named}  # type: ignore[union-attr]  # after a step
    plan = plan_from_torch_order(pipe.pipeline_order, cls.__name__) if multi else None
    return {"losses": losses if last else [], "params": params, "grads": grads, "plan": plan}
