"""Pipeline parallelism: schedules as data, stages cut from the toy model,
and an executor that runs any plan on real ranks.

    schedules.py  Action, Plan, gpipe, one_f_one_b, interleaved_1f1b (Megatron's rule on m,
                  or PyTorch's relaxed one), SCHEDULES, make_plan
    simulate.py   dependency rules, simulate(plan) -> trace.Events, peak_in_flight,
                  text timelines (plots.gantt draws the same events)
    stages.py     split_stages(n_layers, p), StageModule built from full toy weights
    executor.py   run_plan on ranks (send/recv through threeaxes.comms), pipeline training
    reference.py  the same training with torch.distributed.pipelining (GPipe, 1F1B,
                  interleaved and zero-bubble schedules)
    torch_plans.py  PyTorch's schedules read into a Plan (torch_plan), so the same
                  engine prints, simulates and counts them
    measure.py    a step measured: bubble from the trace, saved activation bytes
                  (saved.py), stages of known duration (delay.py)
"""
from .schedules import (
    SCHEDULES,
    Action,
    Plan,
    Simulation,
    gpipe,
    interleaved_1f1b,
    make_plan,
    one_f_one_b,
    peak_in_flight,
    simulate,
)
from .simulate import format_timeline

__all__ = ["Action", "Plan", "Simulation", "gpipe", "one_f_one_b", "interleaved_1f1b",
           "make_plan", "simulate", "peak_in_flight", "format_timeline", "SCHEDULES"]
