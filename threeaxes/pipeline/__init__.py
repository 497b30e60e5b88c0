"""Pipeline parallelism: schedules as data, stages cut from the toy model,
and an executor that runs any plan on real ranks.

    schedules.py  Action, Plan, gpipe, one_f_one_b, interleaved_1f1b
    simulate.py   dependency rules, simulate(plan), peak_in_flight, text timelines
    stages.py     split_stages(n_layers, p), StageModule built from full toy weights
    executor.py   run_plan on ranks (send/recv through threeaxes.comms), pipeline training
    reference.py  the same training with torch.distributed.pipelining
"""
from .schedules import (SCHEDULES, Action, Event, Plan, Simulation, gpipe, interleaved_1f1b,
                        one_f_one_b, peak_in_flight, simulate)
from .simulate import format_timeline

__all__ = ["Action", "Plan", "Event", "Simulation", "gpipe", "one_f_one_b",
           "interleaved_1f1b", "simulate", "peak_in_flight", "format_timeline", "SCHEDULES"]
