"""Showing things in a notebook: figures as PNG, ranked plans as an HTML table.

    from threeaxes.display import show
    show(plots.gantt(trace.events))

`threeaxes.plots` draws (matplotlib Figures, no display); this module shows
them, and the widgets use it too.
"""
from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TYPE_CHECKING

from threeaxes.cost.memory import GB

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from threeaxes.cost.planner import PlanResult

__all__ = ["show", "FigureDisplay", "plan_table_html"]


def plan_table_html(rows: Iterable[PlanResult], chosen: PlanResult | None = None) -> str:
    """An HTML table of ranked PlanResults, the chosen one highlighted.

    The SP column says "yes" or "no" for every plan with tp > 1, and "n/a" where
    tp = 1: sequence parallelism splits along the tp group, so with one tp rank
    there is nothing to split (the planner never turns it on there).
    """

    def sequence_parallel(r: PlanResult) -> str:
        if r.tp == 1:
            return "n/a"
        return "yes" if r.sequence_parallel else "no"

    head = ("rank", "dp", "tp", "pp", "mbs", "m", "ZeRO", "recompute", "v", "SP",
            "GB/GPU", "s/step", "tokens/s", "MFU", "bubble")
    cells = "".join(f"<th style='padding:2px 6px'>{h}</th>" for h in head)
    lines = [f"<tr>{cells}</tr>"]
    for i, r in enumerate(rows, 1):
        values = (i, r.dp, r.tp, r.pp, r.micro_batch, r.micro_batches, r.zero_stage,
                  r.recompute, r.virtual_stages, sequence_parallel(r),
                  f"{r.memory.total / GB:.1f}", f"{r.time.total:.2f}",
                  f"{r.tokens_per_second:,.0f}", f"{r.mfu:.1%}", f"{r.bubble_fraction:.1%}")
        style = " style='background:#e8f0fe'" if r is chosen else ""
        row = "".join(f"<td style='padding:2px 6px;text-align:right'>{x}</td>" for x in values)
        lines.append(f"<tr{style}>{row}</tr>")
    return "<table style='font-size:12px'>" + "".join(lines) + "</table>"


class FigureDisplay:
    """Shows a Figure as PNG in a notebook, rasterising only when displayed."""

    def __init__(self, figure: Figure, dpi: int = 90) -> None:
        self.figure, self.dpi = figure, dpi

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.dpi)
        return buffer.getvalue()

    def __repr__(self) -> str:
        return f"<figure: {self.figure.axes[0].get_title() if self.figure.axes else ''}>"


def show(figure: Figure) -> None:
    """Display a matplotlib Figure (one from `threeaxes.plots`) in a notebook cell."""
    from IPython.display import display
    display(FigureDisplay(figure))
