"""The 3D trainer: pipeline stages whose blocks are tensor-parallel, gradients over dp."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

from threeaxes import trace
from threeaxes.data_parallel import average_gradients, shard_batch
from threeaxes.dims import ParallelDims
from threeaxes.pipeline.executor import run_plan
from threeaxes.pipeline.schedules import Plan, make_plan
from threeaxes.pipeline.stages import StageModule, build_stages
from threeaxes.tensor_parallel import TPBlock, gather_model_state
from threeaxes.toy import ToyConfig, make_optimizer

__all__ = ["build_stages_3d", "train_step", "train_3d", "pipeline_train", "full_state"]


def build_stages_3d(cfg: ToyConfig, plan: Plan, dims: ParallelDims, *, seed: int = 0,
                    stage_layers: Sequence[Sequence[int]] | None = None) -> dict[int, StageModule]:
    """The stages this rank holds ({stage: module}), cut from ToyTransformer(cfg, seed),
    every block replaced by this rank's tensor-parallel shard of it."""
    mine = [s for s in range(plan.n_stages) if s % dims.pp == dims.coord("pp")]
    stages = build_stages(cfg, plan.n_stages, seed=seed, stage_layers=stage_layers, ranks=mine)
    for stage in stages.values():
        # keys stay the global layer indices, so names match the full model's
        stage.blocks = nn.ModuleDict({i: TPBlock.from_block(block, cfg, dims)
                                      for i, block in stage.blocks.items()})
    if dist.get_backend() == "nccl":    # one GPU per rank (launch set the device)
        device = torch.device("cuda", torch.cuda.current_device())
        stages = {s: module.to(device) for s, module in stages.items()}
    return stages


def train_step(plan: Plan, stages: dict, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
               targets: torch.Tensor, dims: ParallelDims) -> float | None:
    """One optimizer step on the global batch (inputs, targets); returns the mean loss
    on ranks that hold the last stage, None elsewhere."""
    # Data: this dp coordinate's slice of the global batch
    local_inputs, local_targets = shard_batch(inputs, targets, dims)
    optimizer.zero_grad()
    # Pipeline (with tensor-parallel blocks inside every stage)
    loss = run_plan(plan, stages, local_inputs, local_targets, dims)
    # communication: average every gradient over the dp group
    average_gradients(nn.ModuleList(stages.values()), dims)
    with trace.span("optimizer", module="this rank's shard"):
        optimizer.step()
    return loss


def train_3d(rank: int, world_size: int, cfg: ToyConfig, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
             dp: int = 1, tp: int = 1, pp: int = 1, schedule: str = "1f1b", m: int = 1, v: int = 1, lr: float = 1e-2,
             seed: int = 0, optimizer: str = "sgd", stage_layers: Sequence[Sequence[int]] | None = None) -> dict:
    """Train ToyTransformer(cfg, seed) on dp x tp x pp ranks; a `launch` target.

        launch(train_3d, 8, cfg, batches, dp=2, tp=2, pp=2, m=2)

    `batches` is a list of global (inputs, targets), one optimizer step each;
    the global batch must split into dp slices of m microbatches. `schedule`
    is 'gpipe', '1f1b', 'interleaved' (with v chunks per rank) or a Plan.
    Returns, per rank, {"coords": this rank's {dp, tp, pp}, "losses": the mean
    loss per step (ranks with the last stage; else []), "params": {name:
    this rank's shard}, "trace": every compute span and collective}.

    On dp x tp x pp ranks (one `ParallelDims`, tp fastest), one training step is:

    1. Data: each rank keeps its dp coordinate's slice of the global batch
       (ranks that differ only in tp or pp keep the same slice).
    2. Pipeline: the pp group runs the schedule's plan on that slice, in m
       microbatches; a stage's blocks are `TPBlock`s that all-reduce over the tp
       group inside every forward and backward (Megatron's f and g).
    3. Data-parallel reduction: every gradient is averaged over the dp group,
       so the dp replicas of a (tp, pp) shard stay identical.
    4. Optimizer step on this rank's shard.

    With dp = tp = pp = 1 this is single-process training, and every parameter
    after any number of steps equals `toy.train_steps` on the whole batch (the
    tests check that for every layout).

    The same function runs unchanged under torchrun (see README, "Beyond one
    machine"): `launch` hands it the real rank and world size there.
    """
    dims = ParallelDims.init(dp, tp, pp).check_model(cfg, v)
    plan = schedule if isinstance(schedule, Plan) else make_plan(schedule, pp, m, v)
    stages = build_stages_3d(cfg, plan, dims, seed=seed, stage_layers=stage_layers)
    opt = make_optimizer(nn.ModuleList(stages.values()), lr, optimizer)
    losses = []
    with trace.record() as recorded:
        for inputs, targets in batches:
            loss = train_step(plan, stages, opt, inputs, targets, dims)
            if loss is not None:
                losses.append(loss)
    params = {n: q.detach().cpu().clone() for mod in stages.values() for n, q in mod.named_parameters()}
    return {"coords": dims.coords(rank), "losses": losses, "params": params, "trace": recorded}


def pipeline_train(rank: int, world_size: int, cfg: ToyConfig, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                   schedule: str = "1f1b", m: int = 1, v: int = 1, lr: float = 1e-2, seed: int = 0,
                   optimizer: str = "sgd", stage_layers: Sequence[Sequence[int]] | None = None) -> dict:
    """Pure pipeline parallelism: `train_3d` with pp = world_size (dp = tp = 1)."""
    return train_3d(rank, world_size, cfg, batches, pp=world_size, schedule=schedule, m=m, v=v,
                    lr=lr, seed=seed, optimizer=optimizer, stage_layers=stage_layers)


def full_state(results: list[dict]) -> dict:
    """The whole model's parameters from every rank's `train_3d` result.

    Each (pp) stage's tensors are put back together from the tp shards of dp
    replica 0; the other dp replicas must hold exactly the same shards, else a
    ValueError names the first that differs.
    """
    by_coords = {tuple(r["coords"][a] for a in ("dp", "tp", "pp")): r["params"] for r in results}
    dp, tp, pp = (1 + max(c[i] for c in by_coords) for i in range(3))
    for (d, t, p), params in by_coords.items():
        base = by_coords[(0, t, p)]
        for name, value in params.items():
            if not torch.equal(value, base[name]):
                raise ValueError(f"dp replica {d} of (tp={t}, pp={p}) holds a different {name} "
                                 f"from replica 0; the gradients were not averaged over dp")
    full = {}
    for p in range(pp):
        full.update(gather_model_state([by_coords[(0, t, p)] for t in range(tp)]))
    return full
