"""PyTorch's own pipeline schedules, read into the course's `Plan`."""
from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from .schedules import Action, Plan

__all__ = ["TORCH_SCHEDULES", "torch_schedule_class", "plan_from_torch_order", "torch_plan"]

TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                   "interleaved": "ScheduleInterleaved1F1B",
                   "zero_bubble": "ScheduleInterleavedZeroBubble"}


def torch_schedule_class(schedule: str) -> type:
    """PyTorch's schedule class for one of the course's names (TORCH_SCHEDULES)."""
    from torch.distributed.pipelining import schedules

    if schedule not in TORCH_SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; choose one of {sorted(TORCH_SCHEDULES)}")
    return getattr(schedules, TORCH_SCHEDULES[schedule])


def _kind(computation_type: object) -> str | None:
    """PyTorch's computation type -> the course's action kind (None: not compute)."""
    name = getattr(computation_type, "name", str(computation_type))
    return {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I",
            "BACKWARD_WEIGHT": "W"}.get(name)


def plan_from_torch_order(pipeline_order: Mapping[int, list], name: str = "PyTorch plan") -> Plan:
    """A `Plan` from a PyTorch schedule's `pipeline_order` (rank -> [action or
    None]): each rank's compute actions, in PyTorch's order."""
    orders = {}
    for rank, row in pipeline_order.items():
        acts = []
        for a in row:
            if a is None:
                continue
            kind = _kind(a.computation_type)
            if kind is None:
                raise ValueError(f"{a} is not a forward or backward; read a compute-only "
                                 f"pipeline_order (the schedule's, before communication is added)")
            acts.append(Action(int(a.stage_index), int(a.microbatch_index), kind))
        orders[int(rank)] = acts
    return Plan.from_orders(orders, name)


def torch_plan(schedule: str, p: int, m: int, v: int = 1) -> Plan:
    """PyTorch's plan for `schedule` on p ranks, m microbatches, v stages per
    rank, built by PyTorch's own class and read into a `Plan`. PyTorch's
    errors (an m its rule refuses) come through unchanged. ScheduleGPipe and
    Schedule1F1B keep no plan object; for them this returns the course's
    gpipe / one_f_one_b, which run each rank's work in the same order.

    `torch.distributed.pipelining` keeps each schedule as data too: after it is
    built, a schedule object holds `pipeline_order`, rank -> [action or None],
    each action a stage index, a computation type and a microbatch. This module
    turns that into the course's `Plan`, so PyTorch's plan is printed, simulated
    and counted for its bubble by the same engine as the course's own plans:

        plan = torch_plan("interleaved", p=8, m=13, v=2)     # PyTorch's plan, our Plan
        simulate(plan, Fraction(1, 2), Fraction(2, 2)).idle_fraction

    Only the order of each rank's work is taken; `Plan.from_orders` places it in
    slots by the dependency rules, so the counted bubble is what that order
    forces, whatever padding PyTorch's own grid carries.

    The names this course uses, and PyTorch's classes:

        "gpipe"        ScheduleGPipe                   one stage per rank
        "1f1b"         Schedule1F1B                    one stage per rank
        "interleaved"  ScheduleInterleaved1F1B         v stages per rank, r, r + p, ...
        "zero_bubble"  ScheduleInterleavedZeroBubble   Qi et al. 2024 (its docstring: "ZB1P");
                                                       with v = 1 its order idles as their
                                                       ZB-H1 (tests/axes/test_pipeline_torch_plans.py),
                                                       v > 1 interleaves it

    Building a multi-stage schedule needs only what each rank's stages say about
    themselves (how many stages, the group's size, this rank), so `torch_plan`
    hands it small stand-ins and never starts a process group; PyTorch's own
    schedule tests build their plans the same way. To read the plan a real run
    used, pass that schedule's `pipeline_order` to `plan_from_torch_order`.
    """
    import torch

    cls = torch_schedule_class(schedule)
    if schedule in ("gpipe", "1f1b"):
        if v != 1:
            raise ValueError(f"{cls.__name__} runs one stage per rank; use v=1 or 'interleaved'")
        # no stored plan: PyTorch's 1F1B runs min(m, p - s) forwards, then B/F pairs, as ours does
        from .schedules import gpipe, one_f_one_b
        return (gpipe if schedule == "gpipe" else one_f_one_b)(p, m)
    # stand-ins for the rank's PipelineStages: what the schedule reads from them
    stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, is_last=False,
                              stage_index=c * p, submod=torch.nn.Module()) for c in range(v)]
    built = cls(stages, n_microbatches=m)
    label = {"interleaved": "PyTorch interleaved 1F1B", "zero_bubble": "PyTorch zero bubble"}
    return plan_from_torch_order(built.pipeline_order, label[schedule])
