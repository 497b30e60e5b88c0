"""Bubble explorer: p, m, v and the schedule -> bubble fraction, overhead, Gantt chart."""
from __future__ import annotations

from typing import Any, NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import bubble_fraction, bubble_overhead
from ..pipeline import Simulation
from ..plots import gantt, schedule_timeline
from .base import _WIDE, _Explorer


class BubbleData(NamedTuple):
    pp: int
    micro_batches: int
    virtual_stages: int
    schedule: str
    fraction: float      # idle share of the step's wall time
    overhead: float      # idle time over ideal compute time (Megatron's ratio)
    timeline: Simulation  # the plan simulated with forward 1, backward 2 per micro-batch


class BubbleExplorer(_Explorer[BubbleData]):
    """p, m, v and the schedule -> bubble fraction, overhead and the simulated plan."""

    title = "Pipeline bubble explorer"

    def __init__(self, **initial: Any) -> None:
        c = {
            "pp": widgets.IntSlider(4, min=1, max=16, description="p (stages)", style=_WIDE),
            "micro_batches": widgets.IntSlider(8, min=1, max=64, description="m (micro-batches)",
                                               style=_WIDE),
            "virtual_stages": widgets.IntSlider(1, min=1, max=4, description="v (chunks per GPU)",
                                                style=_WIDE),
            "schedule": widgets.Dropdown(options=[("1F1B", "1f1b"), ("GPipe", "gpipe")],
                                         value="1f1b", description="schedule"),
        }
        rows = [widgets.HBox([c["pp"], c["micro_batches"]]),
                widgets.HBox([c["virtual_stages"], c["schedule"]])]
        super().__init__(c, rows, initial)

    def compute(self) -> BubbleData:
        v = self.values()
        p, m, chunks, schedule = v["pp"], v["micro_batches"], v["virtual_stages"], v["schedule"]
        fraction = bubble_fraction(p, m, schedule=schedule, virtual_stages=chunks)
        overhead = bubble_overhead(p, m, schedule=schedule, virtual_stages=chunks)
        timeline = schedule_timeline(p, m, schedule, chunks)
        return BubbleData(p, m, chunks, schedule, fraction, overhead, timeline)

    def summary(self, d: BubbleData) -> str:
        vm = f"{d.virtual_stages}&middot;{d.micro_batches}" if d.virtual_stages > 1 \
            else f"{d.micro_batches}"
        return (f"<b>bubble fraction</b> (share of the step each GPU sits idle) "
                f"(p-1)/(v&middot;m+p-1) = {d.pp - 1}/({vm}+{d.pp - 1}) = "
                f"<b>{d.fraction:.1%}</b><br><b>bubble overhead</b> (idle time over compute "
                f"time, Megatron's (p-1)/(v&middot;m)) = {d.pp - 1}/({vm}) = "
                f"<b>{d.overhead:.1%}</b> &nbsp; <small>the plan simulated: idle "
                f"{float(d.timeline.idle_fraction):.1%}</small>")

    def draw(self, d: BubbleData) -> Figure:
        name = "interleaved 1F1B" if d.virtual_stages > 1 else \
            {"gpipe": "GPipe", "1f1b": "1F1B"}[d.schedule]
        title = (f"{name}, p={d.pp}, m={d.micro_batches}"
                 + (f", v={d.virtual_stages}" if d.virtual_stages > 1 else "")
                 + f": each GPU idles {float(d.timeline.idle_fraction):.1%} of the step")
        return gantt(d.timeline.events, title=title,
                     time_unit="one micro-batch's forward = 1, backward = 2")
