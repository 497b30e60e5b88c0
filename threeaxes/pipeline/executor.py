"""Running a pipeline plan for real, on ranks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .. import comms, trace
from ..dims import ParallelDims, resolve
from ..toy import lm_loss
from .schedules import Plan

__all__ = ["run_plan", "split_microbatches"]


def split_microbatches(batch: torch.Tensor, m: int) -> list[torch.Tensor]:
    """Cut a global batch into m equal microbatches along dim 0."""
    if type(m) is not int or m < 1:
        raise ValueError(f"m={m!r}; the number of microbatches must be an int >= 1")
    n = batch.shape[0]
    if n % m:
        options = "{" + ", ".join(str(d) for d in range(1, n + 1) if n % d == 0) + "}"
        raise ValueError(f"global batch {n} is not divisible by m={m}; choose m in {options}")
    return list(batch.chunk(m))


def _tag(stage: int, microbatch: int, kind: str, m: int) -> int:
    """One tag per message: the stage it goes to, the microbatch, and F or B."""
    return (stage * m + microbatch) * 2 + (kind == "B")


def run_plan(plan: Plan, stages: dict, inputs: torch.Tensor, targets: torch.Tensor,
             dims: ParallelDims | None = None, *,
             loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lm_loss) -> float | None:
    """Run one training step's forwards and backwards as `plan` orders them.

    The pipeline is this rank's pp group in `dims` (the run's current layout
    when None): this rank runs row `dims.coord("pp")` of the plan, and stage s
    lives on the pp group's rank s % p. stages: {stage index: module} for the
    stages this rank holds (tensor-parallel ones included). inputs, targets:
    this pipeline's batch (batch, seq); every rank of the pipeline passes it
    (only the first stage reads the tokens and the last the targets; the
    others take the microbatch shape from it). Gradients accumulate in the
    modules' .grad; each microbatch's loss is scaled by 1/m, so they equal
    the gradients of the mean loss over the whole batch. Returns that mean
    loss on the rank holding the last stage, None elsewhere. Every action is
    a compute span in the trace being recorded.

    `run_plan` walks this rank's row of a `Plan` in order. A forward receives
    its stage's input activation from the previous stage, runs the stage module
    and sends the output on; a backward receives the gradient of that output
    from the next stage, runs autograd and sends the input's gradient back.

    Why it cannot deadlock: sends are posted without waiting (`comms.isend`), and
    each message carries a tag naming its stage, microbatch and direction, so a
    rank blocks only in `recv`, for an action the plan orders before this one
    on the sending rank. A `Plan` is only made when its slot grid is a valid
    timing of every action (schedules.Plan._check), so that order exists and
    every recv is eventually matched. All sends are waited for before returning.

    Every compute action is a `trace.span` (op forward/backward, stage,
    microbatch) and every send/recv a comms event, in the one trace;
    `plots.gantt` draws them.
    """
    split = sorted({a.kind for r in plan for a in plan.actions(r)} - {"F", "B"})
    if split:
        raise ValueError(f"the plan splits backwards into {' and '.join(split)} (a zero-bubble "
                         f"plan); this executor runs F and B only: run it with PyTorch's "
                         f"ScheduleInterleavedZeroBubble (pipeline.reference.torch_pipeline_train"
                         f"(..., schedule='zero_bubble'))")
    dims = resolve(dims)
    p, m = plan.p, plan.m
    if p != dims.pp:
        raise ValueError(f"the plan is for p={p} pipeline ranks but the layout has pp={dims.pp}; "
                         f"make the plan with p={dims.pp}")
    r, pp_ranks = dims.coord("pp"), dims.ranks("pp")
    mine = {s for s in range(plan.n_stages) if s % p == r}
    if set(stages) != mine:
        raise ValueError(f"pipeline rank {r} must hold stages {sorted(mine)} for this plan, "
                         f"got {sorted(stages)}")
    if dist.get_backend() == "nccl":
        _check_fifo(plan)
    last = plan.n_stages - 1
    some = next(iter(stages.values()))
    device, dtype = next(some.parameters()).device, some.cfg.dtype
    tokens = split_microbatches(inputs.to(device), m)
    labels = split_microbatches(targets.to(device), m)
    # (micro_batch, seq, d_model): what crosses between stages, both ways
    shape = (tokens[0].shape[0], tokens[0].shape[1], some.cfg.d_model)

    def peer(stage: int) -> int:
        return pp_ranks[stage % p]

    sends: list[Any] = []
    saved: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    local: dict[tuple[int, int, str], torch.Tensor] = {}
    loss = 0.0

    def hand_over(tensor: torch.Tensor, to_stage: int, k: int, kind: str) -> None:
        if peer(to_stage) == dims.rank:   # the next stage lives on this rank too (interleaved, p=1)
            local[(to_stage, k, kind)] = tensor
        else:
            # communication: send to the pp rank that holds `to_stage`, do not wait
            sends.append(comms.isend(tensor, dst=peer(to_stage), axis="pp", dims=dims,
                                     tag=_tag(to_stage, k, kind, m)))

    def take(stage: int, from_stage: int, k: int, kind: str) -> torch.Tensor:
        if (stage, k, kind) in local:
            return local.pop((stage, k, kind))
        # communication: receive from the pp rank that holds `from_stage`
        buf = torch.empty(shape, dtype=dtype, device=device)
        return comms.recv(buf, src=peer(from_stage), axis="pp", dims=dims,
                          tag=_tag(stage, k, kind, m))

    for a in plan.actions(r):
        s, k, module = a.stage, a.microbatch, stages[a.stage]
        if a.kind == "F":
            x = tokens[k] if s == 0 else take(s, s - 1, k, "F").requires_grad_()
            with trace.span("forward", module=f"stage {s}", stage=s, microbatch=k):
                y = module(x)
                if s == last:
                    y = loss_fn(y, labels[k]) / m   # mean over microbatches of each one's mean loss
                    loss += y.item()
            saved[(s, k)] = (x, y)
            if s != last:
                hand_over(y.detach(), s + 1, k, "F")
        else:
            x, y = saved.pop((s, k))
            grad = None if s == last else take(s, s + 1, k, "B")
            with trace.span("backward", module=f"stage {s}", stage=s, microbatch=k):
                torch.autograd.backward(y, grad)
            if s != 0:
                hand_over(x.grad, s - 1, k, "B")  # type: ignore[arg-type]  # set by the backward above
    for work in sends:
        work.wait()
    return loss if last in stages else None


def _check_fifo(plan: Plan) -> None:
    """NCCL ignores tags and matches messages between two ranks in order, so
    every receiver must take its messages in the order its sender sends them
    (true of GPipe, 1F1B and interleaved 1F1B; not of every valid plan)."""
    sent: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    received: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for r in plan:
        for a in plan.actions(r):
            to = a.stage + 1 if a.kind == "F" else a.stage - 1
            if 0 <= to < plan.n_stages and to % plan.p != r:
                sent.setdefault((r, to % plan.p), []).append((to, a.microbatch, a.kind))
            frm = a.stage - 1 if a.kind == "F" else a.stage + 1
            if 0 <= frm < plan.n_stages and frm % plan.p != r:
                received.setdefault((frm % plan.p, r), []).append((a.stage, a.microbatch, a.kind))
    for pair, order in sent.items():
        if received.get(pair) != order:
            raise ValueError(f"rank {pair[1]} receives from rank {pair[0]} in another order than it "
                             f"is sent; NCCL cannot match that (it has no tags): run this plan on "
                             f"gloo, or reorder it so microbatches cross in the same order")
