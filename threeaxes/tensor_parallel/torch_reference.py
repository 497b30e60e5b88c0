"""The same TP and TP+SP toy from PyTorch's own API, to prove ours against."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import torch

from threeaxes.dims import ParallelDims
from threeaxes.toy import Block, ToyConfig, ToyTransformer, lm_loss

if TYPE_CHECKING:  # for the hints only: torch.distributed.tensor is imported where it is used
    from torch.distributed.tensor.parallel import ParallelStyle

__all__ = ["torch_tp_plan", "torch_tp_step"]


def torch_tp_plan(n_layers: int, *, sequence_parallel: bool) -> dict[str, ParallelStyle]:
    """parallelize_module's plan for the whole toy (keys are submodule names)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    row = RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
    plan: dict[str, ParallelStyle] = {}
    for i in range(n_layers):
        b = f"blocks.{i}"
        plan.update({f"{b}.attn.{n}": ColwiseParallel() for n in "qkv"})
        plan.update({f"{b}.mlp.fc1": ColwiseParallel(), f"{b}.attn.proj": row, f"{b}.mlp.fc2": row})
        if sequence_parallel:
            plan.update({f"{b}.ln1": SequenceParallel(), f"{b}.ln2": SequenceParallel()})
            gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
            plan.update({f"{b}.attn": gather, f"{b}.mlp": gather})
    if sequence_parallel:
        plan["blocks.0"] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                              use_local_output=True)
        plan["ln_f"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                          use_local_output=True)
    return plan


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor: this rank's shard of a DTensor (a pending sum, Partial, is summed first)."""
    from torch.distributed.tensor import DTensor, Replicate

    tensor = tensor.detach()
    if isinstance(tensor, DTensor):
        placements = [Replicate() if p.is_partial() else p for p in tensor.placements]
        tensor = tensor.redistribute(placements=placements).to_local()
    return tensor.clone()


def torch_tp_step(rank: int, world_size: int, cfg: ToyConfig, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                  sequence_parallel: bool = False, lr: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """Train the toy with PyTorch's tensor (and sequence) parallelism on tp = world_size;
    one SGD step (p <- p - lr * grad) per batch. Returns "losses", the first step's
    "grads" and the final "state", as plain tensors in our shard layout, and the
    local shape of the first LayerNorm's input ("ln1_local_input").

    `torch_tp_step` parallelizes the whole toy with `parallelize_module` on
    `dims.mesh["tp"]`, the plan of torchtitan's Llama:

        q, k, v, fc1       ColwiseParallel()
        proj, fc2          RowwiseParallel()                        plain TP: all-reduce
                           RowwiseParallel(output_layouts=Shard(1)) with SP: reduce-scatter
        ln1, ln2           SequenceParallel()                       with SP: LayerNorm on Shard(1)
        attn, mlp          PrepareModuleInput(Shard(1) -> Replicate())   with SP: all-gather
        blocks.0           PrepareModuleInput(Replicate() -> Shard(1))   with SP: enter the region
        ln_f               PrepareModuleInput(Shard(1) -> Replicate())   with SP: leave it

    and returns what `measure.tp_step` returns ("losses", "grads", "state"), each
    parameter as this rank's shard in our layout (tensor_parallel.shard), so the
    two compare tensor by tensor.
    """
    from torch.distributed.tensor.parallel import parallelize_module

    dims = ParallelDims.init(tp=world_size)
    model = ToyTransformer(cfg, seed=seed)
    assert dims.mesh is not None   # ParallelDims.init builds it
    # communication (inside every forward and backward): over dims.mesh["tp"]
    parallelize_module(model, dims.mesh["tp"], torch_tp_plan(cfg.n_layers, sequence_parallel=sequence_parallel))
    out: dict[str, Any] = {"losses": [], "grads": None, "state": None, "ln1_local_input": None}

    def note_shape(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:  # what one rank's LayerNorm really runs on
        x = args[0]
        out["ln1_local_input"] = tuple((x.to_local() if hasattr(x, "to_local") else x).shape)

    cast(Block, model.blocks[0]).ln1.register_forward_pre_hook(note_shape)   # a ModuleList's items are Modules
    for inputs, targets in batches:
        model.zero_grad(set_to_none=True)
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        if out["grads"] is None:
            # every parameter has a gradient after the backward just run
            out["grads"] = {n: _local(cast(torch.Tensor, p.grad)) for n, p in model.named_parameters()}
        with torch.no_grad():
            for p in model.parameters():
                p.add_(cast(torch.Tensor, p.grad), alpha=-lr)
        out["losses"].append(loss.item())
    out["state"] = {n: _local(p) for n, p in model.named_parameters()}
    return out
