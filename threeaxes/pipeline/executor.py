"""Running a pipeline plan for real, on ranks.

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

Every compute action is recorded as an Event (stage, microbatch, kind, start,
end) with wall-clock times (time.time(), comparable across the processes of
one machine); simulate.format_timeline draws them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .. import comms
from ..toy import ToyConfig, lm_loss, make_optimizer
from .schedules import SCHEDULES, Event, Plan, interleaved_1f1b
from .stages import build_stages

__all__ = ["StepResult", "run_plan", "split_microbatches", "pipeline_train", "make_plan"]


@dataclass
class StepResult:
    loss: float | None                   # mean loss over microbatches (on the rank with the last stage)
    events: list[Event] = field(default_factory=list)


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


def run_plan(plan: Plan, stages: dict, inputs: torch.Tensor, targets: torch.Tensor, *,
             pp_ranks=None, loss_fn=lm_loss, axis: str = "pp") -> StepResult:
    """Run one training step's forwards and backwards as `plan` orders them.

    stages: {stage index: module} for the stages this rank holds.
    inputs, targets: the global batch (batch, seq); every rank passes it
    (only the first stage reads the tokens and the last the targets; the
    others take the microbatch shape from it). pp_ranks: the global ranks of
    this pipeline, in stage order (default 0..p-1). Gradients accumulate in
    the modules' .grad; each microbatch's loss is scaled by 1/m, so they
    equal the gradients of the mean loss over the whole batch.
    """
    p, m = plan.p, plan.m
    pp_ranks = list(range(p)) if pp_ranks is None else list(pp_ranks)
    if len(pp_ranks) != p:
        raise ValueError(f"the plan has p={p} ranks but pp_ranks has {len(pp_ranks)}")
    me = dist.get_rank()
    if me not in pp_ranks:
        raise ValueError(f"rank {me} is not in pp_ranks={pp_ranks}")
    r = pp_ranks.index(me)
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

    def peer(stage):
        return pp_ranks[stage % p]

    sends, saved, local, events, loss = [], {}, {}, [], 0.0

    def hand_over(tensor, to_stage, k, kind):
        if peer(to_stage) == me:   # the next stage lives on this rank too (interleaved, p=1)
            local[(to_stage, k, kind)] = tensor
        else:
            # communication: send to the rank that holds `to_stage`, do not wait
            sends.append(comms.isend(tensor, dst=peer(to_stage), axis=axis,
                                     tag=_tag(to_stage, k, kind, m)))

    def take(stage, from_stage, k, kind):
        if (stage, k, kind) in local:
            return local.pop((stage, k, kind))
        # communication: receive from the rank that holds `from_stage`
        buf = torch.empty(shape, dtype=dtype, device=device)
        return comms.recv(buf, src=peer(from_stage), axis=axis, tag=_tag(stage, k, kind, m))

    for a in plan.actions(r):
        s, k, module = a.stage, a.microbatch, stages[a.stage]
        if a.kind == "F":
            x = tokens[k] if s == 0 else take(s, s - 1, k, "F").requires_grad_()
            start = time.time()
            y = module(x)
            if s == last:
                y = loss_fn(y, labels[k]) / m   # mean over microbatches of each one's mean loss
                loss += y.item()
            end = time.time()
            saved[(s, k)] = (x, y)
            if s != last:
                hand_over(y.detach(), s + 1, k, "F")
        else:
            x, y = saved.pop((s, k))
            grad = None if s == last else take(s, s + 1, k, "B")
            start = time.time()
            torch.autograd.backward(y, grad)
            end = time.time()
            if s != 0:
                hand_over(x.grad, s - 1, k, "B")
        events.append(Event(s, k, a.kind, start, end))
    for work in sends:
        work.wait()
    return StepResult(loss if last in stages else None, events)


def _check_fifo(plan: Plan) -> None:
    """NCCL ignores tags and matches messages between two ranks in order, so
    every receiver must take its messages in the order its sender sends them
    (true of GPipe, 1F1B and interleaved 1F1B; not of every valid plan)."""
    sent, received = {}, {}
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


def make_plan(schedule: str, p: int, m: int, v: int = 1) -> Plan:
    """A plan by name: 'gpipe', '1f1b', or 'interleaved' (with v chunks per rank)."""
    if schedule == "interleaved":
        return interleaved_1f1b(p, m, v)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; choose one of {sorted(SCHEDULES) + ['interleaved']}")
    if v != 1:
        raise ValueError(f"v={v} needs schedule='interleaved'")
    return SCHEDULES[schedule](p, m)


def pipeline_train(rank: int, world_size: int, cfg: ToyConfig, batches, *, pp: int | None = None,
                   schedule="1f1b", m: int = 1, v: int = 1, lr: float = 1e-2, seed: int = 0,
                   optimizer: str = "sgd", stage_layers=None) -> dict:
    """Pipeline-parallel training on ranks, one optimizer step per batch.

    Launch on pp ranks: `launch(pipeline_train, 2, cfg, batches, m=4)`.
    `schedule` is a name (see make_plan) or a Plan. Returns, per rank, plain
    values: {"losses": [...] (last stage only, else []), "params": {name:
    tensor}, "events": [[Event, ...] per step]}.
    """
    pp = world_size if pp is None else pp
    if world_size != pp:
        raise ValueError(f"world_size={world_size} but pp={pp}: pure pipeline parallelism runs "
                         f"one pipeline rank per process; launch {pp} ranks or set pp={world_size}")
    plan = schedule if isinstance(schedule, Plan) else make_plan(schedule, pp, m, v)
    if plan.p != pp:
        raise ValueError(f"the plan is for p={plan.p} ranks but pp={pp}")
    if plan.v > 1 and cfg.n_layers % plan.n_stages:
        raise ValueError(f"pp={pp} ranks x v={plan.v} chunks = {plan.n_stages} stages do not divide "
                         f"n_layers={cfg.n_layers}; choose pp * v among the divisors of {cfg.n_layers}")
    mine = [s for s in range(plan.n_stages) if s % pp == rank]
    stages = build_stages(cfg, plan.n_stages, seed=seed, stage_layers=stage_layers, ranks=mine)
    if dist.get_backend() == "nccl":    # one GPU per rank (launch set the device)
        device = torch.device("cuda", torch.cuda.current_device())
        stages = {s: module.to(device) for s, module in stages.items()}
    params = [q for mod in stages.values() for q in mod.parameters()]
    opt = make_optimizer(torch.nn.ParameterList(params), lr, optimizer)
    losses, events = [], []
    for inputs, targets in batches:
        opt.zero_grad()
        result = run_plan(plan, stages, inputs, targets)
        opt.step()
        if result.loss is not None:
            losses.append(result.loss)
        events.append(result.events)
    named = {n: q.detach().clone() for mod in stages.values() for n, q in mod.named_parameters()}
    return {"losses": losses, "params": named, "events": events}
