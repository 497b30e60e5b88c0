"""Pipeline parallelism: schedules as data (schedules.py), simulated (simulate.py), stages cut from
the toy model (stages.py), an executor that runs any plan on real ranks (executor.py), the same
training with torch.distributed.pipelining (reference.py) and its schedules read into a Plan
(torch_plans.py), a step measured (measure.py, saved.py, delay.py)."""
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
