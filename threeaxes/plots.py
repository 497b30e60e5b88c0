"""Matplotlib drawings for the calculators: schedule timelines, memory bars,
step-time bars.

Everything draws on a ``matplotlib.figure.Figure`` made here (never through
pyplot), so it works with any backend, headless included, and leaves no
global figure state behind. ``show(fig)`` displays a figure in a notebook.
"""
from __future__ import annotations

import io
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .cost.bubble import bubble_fraction
from .cost.memory import GB
from .cost.timeline import Event, simulate_schedule

__all__ = ["TimelineData", "schedule_timeline", "draw_timeline", "draw_memory_bars",
           "draw_time_breakdown", "plan_table_html", "FigureDisplay", "show", "MEMORY_TERMS",
           "TIME_TERMS"]

FORWARD = ["#9ecae1", "#6baed6", "#4292c6", "#2171b5"]    # one shade per model chunk
BACKWARD = ["#fdae6b", "#fd8d3c", "#f16913", "#d94801"]
IDLE = "#f0f0f0"

MEMORY_TERMS = (("params", "parameters", "#4c72b0"), ("grads", "gradients", "#55a868"),
                ("optimizer", "optimizer states", "#e1a21a"),
                ("activations", "activations", "#8172b2"))
TIME_TERMS = (("compute", "compute", "#4c72b0"), ("tp_comm", "TP comm", "#dd8452"),
              ("pp_comm", "PP comm", "#937860"), ("dp_comm", "DP comm", "#55a868"),
              ("bubble", "PP bubble", "#c7c7c7"))


class TimelineData(NamedTuple):
    pp: int
    micro_batches: int
    virtual_stages: int
    schedule: str
    events: tuple          # threeaxes.cost.timeline.Event, stage = GPU rank
    makespan: float
    idle_fraction: float
    source: str            # which code produced the plan


def _from_schedules_module(p, m, schedule, v):
    """The colleague's plans (threeaxes.pipeline.schedules), when present."""
    try:
        from .pipeline import schedules
    except ImportError:
        return None
    if v > 1:
        make = getattr(schedules, "interleaved_1f1b", None)
        args = (p, m, v)
    else:
        make = getattr(schedules, {"gpipe": "gpipe", "1f1b": "one_f_one_b"}[schedule], None)
        args = (p, m)
    simulate = getattr(schedules, "simulate", None)
    if make is None or simulate is None:
        return None
    # each chunk does 1/v of a micro-batch's work: F = 1/v, B = 2/v
    result = simulate(make(*args), forward_cost=Fraction(1, v), backward_cost=Fraction(2, v))
    events = []
    for rank in sorted(result.events):
        for e in result.events[rank]:
            events.append(Event(rank, e.kind, e.microbatch, e.stage // p,
                                float(e.start), float(e.end)))
    return TimelineData(p, m, v, schedule, tuple(events), float(result.makespan),
                        float(result.idle_fraction), "threeaxes.pipeline.schedules")


def schedule_timeline(pp: int, micro_batches: int, schedule: str = "1f1b",
                      virtual_stages: int = 1) -> TimelineData:
    """Timed events of a schedule with forward 1 and backward 2 per micro-batch.

    Uses the plans of ``threeaxes.pipeline.schedules`` (the ones the course
    runs for real) when that module provides them, and our own unit-cost
    simulation (``threeaxes.cost.timeline``) otherwise. Checks the arguments
    with ``bubble_fraction`` first, so a bad combination raises ValueError
    saying what to change.
    """
    if schedule == "interleaved":
        schedule = "1f1b"
    bubble_fraction(pp, micro_batches, schedule=schedule, virtual_stages=virtual_stages)
    p, m, v = int(pp), int(micro_batches), int(virtual_stages)
    try:
        data = _from_schedules_module(p, m, schedule, v)
    except (AttributeError, TypeError, KeyError):
        data = None      # the module's API moved: draw our own simulation instead
    if data is not None:
        return data
    sim = simulate_schedule(p, m, schedule, v)
    return TimelineData(p, m, v, schedule, sim.events, sim.makespan, sim.idle_fraction,
                        "threeaxes.cost.timeline")


def draw_timeline(timeline: TimelineData, *, ax=None, title: str | None = None,
                  max_labels: int = 200):
    """One lane per GPU, time left to right: forwards blue, backwards orange
    (darker for later model chunks), idle time hatched grey."""
    p, span = timeline.pp, timeline.makespan
    if ax is None:
        fig = Figure(figsize=(min(14.0, max(6.0, 0.35 * span + 2)), 0.45 * p + 1.4),
                     layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    groups = {}
    for e in timeline.events:
        groups.setdefault((e.stage, e.kind, e.chunk), []).append((e.start, e.end - e.start))
    for r in range(p):
        # the whole lane is idle first; work is drawn over it
        ax.broken_barh([(0, span)], (r - 0.4, 0.8), facecolors=IDLE, edgecolor="#bdbdbd",
                       hatch="///", linewidth=0)
    for (r, kind, chunk), spans in groups.items():
        colors = FORWARD if kind == "F" else BACKWARD
        ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=colors[chunk % len(colors)],
                       edgecolor="white", linewidth=0.6)
    if len(timeline.events) <= max_labels:
        points_per_unit = fig.get_figwidth() * 72 * 0.8 / span
        for e in timeline.events:
            if (e.end - e.start) * points_per_unit >= 15:    # room for "F12"
                ax.text((e.start + e.end) / 2, e.stage, f"{e.kind}{e.microbatch}",
                        ha="center", va="center", fontsize=7)
    ax.set_yticks(range(p), [f"GPU {r}" for r in range(p)])
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.set_xlabel("time (one micro-batch's forward = 1, backward = 2)")
    ax.legend(handles=[Patch(color=FORWARD[0], label="forward"),
                       Patch(color=BACKWARD[0], label="backward"),
                       Patch(facecolor=IDLE, edgecolor="#bdbdbd", hatch="///", label="idle")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    name = "interleaved 1F1B" if timeline.virtual_stages > 1 else \
        {"gpipe": "GPipe", "1f1b": "1F1B"}[timeline.schedule]
    ax.set_title(title or f"{name}, p={p}, m={timeline.micro_batches}"
                 + (f", v={timeline.virtual_stages}" if timeline.virtual_stages > 1 else "")
                 + f": each GPU idles {timeline.idle_fraction:.1%} of the step", fontsize=10)
    return fig


def draw_memory_bars(bars, capacity: float, *, ax=None, title: str | None = None):
    """Stacked bars of bytes per GPU by term against the GPU's capacity.

    ``bars`` is a list of (label, terms) with terms a mapping (or an object
    with attributes) params, grads, optimizer, activations in bytes. What
    rises above the capacity line is outlined in red and hatched: it does not fit.
    """
    if ax is None:
        fig = Figure(figsize=(min(12.0, 3.0 + 0.7 * len(bars)), 3.8), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    cap = capacity / GB

    def value(terms, key):
        return (terms[key] if isinstance(terms, dict) else getattr(terms, key)) / GB

    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for key, name, color in MEMORY_TERMS:      # one call per term, all bars at once
        heights = np.array([value(terms, key) for _, terms in bars])
        ax.bar(x, heights, bottom=bottom, color=color, width=0.6, label=name)
        bottom += heights
    over = bottom > cap
    if over.any():
        # the part above the capacity line: outlined in red, hatched
        ax.bar(x[over], bottom[over] - cap, bottom=cap, width=0.6, facecolor="none",
               edgecolor="red", hatch="xx", linewidth=1.2, label="does not fit")
    ax.axhline(cap, color="black", linestyle="--", linewidth=1,
               label=f"GPU memory ({cap:.0f} GB)")
    ax.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
    ax.set_ylabel("GB per GPU")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def draw_time_breakdown(rows, *, ax=None, title: str | None = None):
    """Horizontal stacked bars of step time by term (seconds).

    ``rows`` is a list of (label, time) with time a TimeBreakdown (or mapping).
    """
    if ax is None:
        fig = Figure(figsize=(8.0, 0.5 * len(rows) + 1.4), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    for key, name, color in TIME_TERMS:        # one call per term, all rows at once
        widths = np.array([time[key] if isinstance(time, dict) else getattr(time, key)
                           for _, time in rows])
        ax.barh(y, widths, left=left, color=color, height=0.6, label=name)
        left += widths
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("seconds per step")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def plan_table_html(rows, chosen=None) -> str:
    """An HTML table of ranked PlanResults, the chosen one highlighted."""
    head = ("rank", "dp", "tp", "pp", "mbs", "m", "ZeRO", "recompute", "v", "SP",
            "GB/GPU", "s/step", "tokens/s", "MFU", "bubble")
    cells = "".join(f"<th style='padding:2px 6px'>{h}</th>" for h in head)
    lines = [f"<tr>{cells}</tr>"]
    for i, r in enumerate(rows, 1):
        values = (i, r.dp, r.tp, r.pp, r.micro_batch, r.micro_batches, r.zero_stage,
                  r.recompute, r.virtual_stages, "yes" if r.sequence_parallel else "",
                  f"{r.memory.total / GB:.1f}", f"{r.time.total:.2f}",
                  f"{r.tokens_per_second:,.0f}", f"{r.mfu:.1%}", f"{r.bubble_fraction:.1%}")
        style = " style='background:#e8f0fe'" if r is chosen else ""
        row = "".join(f"<td style='padding:2px 6px;text-align:right'>{x}</td>" for x in values)
        lines.append(f"<tr{style}>{row}</tr>")
    return "<table style='font-size:12px'>" + "".join(lines) + "</table>"


class FigureDisplay:
    """Shows a Figure as PNG in a notebook, rasterising only when displayed."""

    def __init__(self, figure, dpi: int = 90):
        self.figure, self.dpi = figure, dpi

    def _repr_png_(self):
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.dpi)
        return buffer.getvalue()

    def __repr__(self):
        return f"<figure: {self.figure.axes[0].get_title() if self.figure.axes else ''}>"


def show(figure):
    """Display a figure from these functions in a notebook cell."""
    from IPython.display import display
    display(FigureDisplay(figure))
