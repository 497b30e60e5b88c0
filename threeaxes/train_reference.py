"""The 3D run again, built only from PyTorch's own pieces on one DeviceMesh."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn as nn

from threeaxes.data_parallel import shard_batch
from threeaxes.dims import ParallelDims
from threeaxes.pipeline.stages import build_stage
from threeaxes.toy import ToyConfig, lm_loss, make_optimizer

if TYPE_CHECKING:  # for the hints only: torch.distributed.tensor is imported where it is used
    from torch.distributed.tensor.parallel import ParallelStyle

__all__ = ["torch_train_3d", "tp_plan", "tp_local", "DP_APIS", "DDP_PIPELINING_ERROR"]

COLWISE = ("attn.q", "attn.k", "attn.v", "mlp.fc1")  # weight and bias cut on dim 0
ROWWISE = ("attn.proj", "mlp.fc2")                   # weight cut on dim 1, bias whole
DP_APIS = ("replicate", "fully_shard", "ddp")
# the schedules this reference run builds with PyTorch (torch_plans.TORCH_SCHEDULES maps
# every course schedule to PyTorch's class; this run takes only these two)
REFERENCE_RUN_SCHEDULES = ("gpipe", "1f1b")

# The first line of what PyTorch 2.13 raises for DistributedDataParallel under pipelining
# (2.10 does not raise it).
DDP_PIPELINING_ERROR = ("RuntimeError: params_.size() == rebuilt_param_indices_.size() INTERNAL "
                        "ASSERT FAILED ... rebuilt parameter indices size is not same as original "
                        "model parameters size")


def tp_plan(layers: Iterable[int]) -> dict[str, ParallelStyle]:
    """parallelize_module's plan for the blocks `layers` of a stage (keys are the
    full model's names, which StageModule keeps)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, ParallelStyle] = {}
    for i in layers:
        plan.update({f"blocks.{i}.{name}": ColwiseParallel() for name in COLWISE})
        plan.update({f"blocks.{i}.{name}": RowwiseParallel() for name in ROWWISE})
    return plan


def tp_local(param: torch.Tensor) -> torch.Tensor:
    """This rank's tp shard of a parameter as a plain CPU tensor: the layout of
    our TP (see tensor_parallel.shard). A DTensor keeps its tp placement and is
    made whole along every other mesh axis (fully_shard cuts it along dp too)."""
    from torch.distributed.tensor import DTensor, Replicate

    param = param.detach()
    if isinstance(param, DTensor):
        names = param.device_mesh.mesh_dim_names
        assert names is not None   # the meshes here are ParallelDims.init's, their axes named
        placements = [p if names[i] == "tp" else Replicate() for i, p in enumerate(param.placements)]
        # communication: all-gather over dp where fully_shard sharded it (a no-op for replicate)
        param = param.redistribute(placements=placements).to_local()
    return param.cpu().clone()


def _check_args(dp: int, m: int, schedule: str, dp_api: str,
                batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    if schedule not in REFERENCE_RUN_SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; torch.distributed.pipelining here runs "
                         f"one of {REFERENCE_RUN_SCHEDULES}")
    if dp_api not in DP_APIS:
        raise ValueError(f"dp_api={dp_api!r}; choose one of {DP_APIS}")
    if dp_api == "ddp" and dp > 1:
        raise NotImplementedError(
            f"DistributedDataParallel does not compose with torch.distributed.pipelining: on torch "
            f"2.13 a stage that runs two microbatch forwards before their backwards fails with "
            f"'{DDP_PIPELINING_ERROR}', and with tp its gradients are not scaled by m. "
            f"What composes: dp_api='replicate' or 'fully_shard' with tp and pp "
            f"(dp x tp x pp = 2 x 2 x 2); DDP(device_mesh=...) with tp only without pipelining. "
            f"Pass dp_api='replicate'.")
    for inputs, _ in batches:
        if inputs.shape[0] % (dp * m):
            raise ValueError(f"a global batch of {inputs.shape[0]} does not split into dp={dp} "
                             f"slices of m={m} microbatches; use a multiple of {dp * m}")


def _data_parallel(module: nn.Module, dims: ParallelDims, dp_api: str) -> nn.Module:
    """Wrap a (tp-parallel) stage so its gradients are averaged over the dp group."""
    if dims.dp == 1:
        return module
    assert dims.mesh is not None   # ParallelDims.init builds it
    if dp_api == "replicate":
        from torch.distributed._composable.replicate_with_fsdp import replicate

        # the module itself comes back, its class mixed with ReplicateModule (the stubs name only the mixin)
        return replicate(module, mesh=dims.mesh["dp"])  # type: ignore[return-value]
    from torch.distributed.fsdp import fully_shard

    return fully_shard(module, mesh=dims.mesh["dp"])  # type: ignore[return-value]  # as replicate: FSDPModule


def torch_train_3d(rank: int, world_size: int, cfg: ToyConfig, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                   *, dp: int = 1, tp: int = 1, pp: int = 1, schedule: str = "1f1b", m: int = 1,
                   lr: float = 1e-2, seed: int = 0, optimizer: str = "sgd",
                   dp_api: str = "replicate") -> dict[str, Any]:
    """`train.train_3d` from PyTorch's pieces; a `launch` target on dp x tp x pp ranks.

        launch(torch_train_3d, 8, cfg, batches, dp=2, tp=2, pp=2, m=2)

    Returns, per rank, {"coords": {dp, tp, pp}, "losses": the mean loss per step
    of this dp slice (last stage; else []), "params": {full-model name: this
    rank's tp shard, a plain CPU tensor}}, which `train.full_state` reassembles.
    Schedule1F1B needs m >= pp.

    `torch_train_3d` trains the same model on the same data as `train.train_3d`
    and returns the same keys, so `train.full_state` reassembles either. Every
    axis is PyTorch's, on the mesh that `ParallelDims.init` builds:

    * tp: `parallelize_module` on `dims.mesh["tp"]`, ColwiseParallel for q, k, v,
      fc1 and RowwiseParallel for proj, fc2 (Megatron's split; the parameters
      become DTensors).
    * pp: `torch.distributed.pipelining`: a `PipelineStage` on `dims.group("pp")`
      driven by ScheduleGPipe or Schedule1F1B with m microbatches.
    * dp: the FSDP-based `replicate` (torch.distributed._composable.replicate_with_fsdp)
      on `dims.mesh["dp"]` by default, or `fully_shard` on the same mesh. Both turn
      the tp DTensors into DTensors on the 2-D (dp, tp) mesh, and
      `PipelineStage` knows both (it defers their gradient reduction to the last
      microbatch).

    What composes on CPU gloo, torch 2.13, float64 (tests/core/test_train_reference.py):
    dp x tp x pp = 2 x 2 x 2 with `replicate` and with `fully_shard` equals one
    process and our `train_3d` to within 1e-16.

    What does not: `DistributedDataParallel` next to pipelining. A stage that runs
    two microbatch forwards before their backwards (every stage under GPipe, every
    stage but the last under 1F1B, for m >= 2) fails at the next step's first
    forward, inside DDP's bucket rebuild, with

        RuntimeError: params_.size() == rebuilt_param_indices_.size() INTERNAL ASSERT
        FAILED at "/__w/pytorch/pytorch/torch/csrc/distributed/c10d/reducer.cpp":2003,
        please report a bug to PyTorch. rebuilt parameter indices size is not same as
        original model parameters size.Original model param size is: 34 versus rebuilt
        params size of: 68

    (wrapped by pipelining in "RuntimeError: [Stage 0] failed to run forward").
    With tp as well, DDP(device_mesh=dims.mesh["dp"]) runs but is silently wrong
    for m >= 2 (1.2e-2 off one process): its DDP+TP workaround turns the tp
    parameters into plain DTensor attributes at the first forward, so
    `PipelineStage.scale_grads`, which walks `submod.parameters()`, never divides
    their gradients by m. DDP(process_group=dims.group("dp")) refuses DTensor
    parameters outright ("RuntimeError: aten.cat.default got mixed torch.Tensor
    and DTensor, need to convert all torch.Tensor to DTensor before calling
    distributed operators!"). Without pipelining, DDP(device_mesh=...) with tp is
    exact. So `dp_api="ddp"` raises NotImplementedError.
    """
    _check_args(dp, m, schedule, dp_api, batches)  # before any import or process group (a Sequence: read twice)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.tensor.parallel import parallelize_module

    dims = ParallelDims.init(dp, tp, pp).check_model(cfg)
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    stage_module = build_stage(cfg, dims.coord("pp"), pp, seed=seed).to(device)
    if tp > 1:
        assert dims.mesh is not None   # ParallelDims.init builds it
        # communication (inside every forward and backward): all-reduce over the tp group
        parallelize_module(stage_module, dims.mesh["tp"], tp_plan(stage_module.layers))
    module = _data_parallel(stage_module, dims, dp_api)
    # communication: activations forward and gradients back between pp neighbours
    stage = PipelineStage(module, dims.coord("pp"), pp, device, group=dims.group("pp"))
    pipe = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](
        stage, n_microbatches=m, loss_fn=lm_loss)
    opt = make_optimizer(module, lr, optimizer)  # the parameters as wrapped: DTensors
    losses: list[float] = []
    for inputs, targets in batches:
        # Data: this dp coordinate's slice, rows [d * B/dp, (d+1) * B/dp)
        inputs, targets = (t.to(device) for t in shard_batch(inputs, targets, dims))
        opt.zero_grad()
        args = (inputs,) if stage.is_first else ()
        if stage.is_last:
            microbatch_losses: list[torch.Tensor] = []
            # scale_grads=True divides the summed gradients by m; replicate averages over dp
            pipe.step(*args, target=targets, losses=microbatch_losses)
            losses.append(torch.stack(microbatch_losses).mean().item())
        else:
            pipe.step(*args)
        opt.step()
    params = {name: tp_local(p) for name, p in module.named_parameters()}
    return {"coords": dims.coords(rank), "losses": losses, "params": params}
