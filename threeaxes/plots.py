"""Matplotlib drawings: one Gantt chart for every trace, memory bars, step-time bars. Each draws on a
``matplotlib.figure.Figure`` made here, never through pyplot, so it works with any backend,
headless included, and leaves no global figure state; ``threeaxes.display.show(fig)`` shows one."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Patch, Rectangle

from .cost.bubble import bubble_fraction
from .cost.memory import GB
from .pipeline.schedules import make_plan
from .pipeline.simulate import Simulation, simulate
from .trace import COMM, COMPUTE, Event

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .dims import ParallelDims
    from .pipeline.schedules import Plan

__all__ = ["draw_mesh", "gantt", "schedule_timeline", "measured_beside_predicted", "draw_memory_bars",
           "draw_measured_vs_predicted", "draw_time_breakdown", "MEMORY_TERMS", "TIME_TERMS"]

# compute: one shade per model chunk on a rank (darker = later chunk)
FORWARD = ["#9ecae1", "#6baed6", "#4292c6", "#2171b5"]     # blues
BACKWARD = ["#fdae6b", "#fd8d3c", "#f16913", "#d94801"]    # oranges
OPTIMIZER, OTHER_COMPUTE = "#8c8c8c", "#d0d0d0"            # greys
# communication: a colour family of its own per mesh axis
COMM_COLORS = {"dp": "#2ca02c", "tp": "#9467bd", "pp": "#8c564b"}   # green, purple, brown
OTHER_COMM = "#e377c2"                                     # pink: an axis not named above
TIME_SCALES = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6}
FB = ("forward", "backward")
LEGEND_ORDER = {"forward": 0, "backward": 1, "optimizer": 2, "other compute": 3,
                "dp comm": 0, "tp comm": 1, "pp comm": 2}

MEMORY_TERMS = (("params", "parameters", "#4c72b0"), ("grads", "gradients", "#55a868"),
                ("optimizer", "optimizer states", "#e1a21a"),
                ("activations", "activations", "#8172b2"))
TIME_TERMS = (("compute", "compute", "#4c72b0"), ("tp_comm", "TP comm", "#dd8452"),
              ("pp_comm", "PP comm", "#937860"), ("dp_comm", "DP comm", "#55a868"),
              ("bubble", "PP bubble", "#c7c7c7"))


def schedule_timeline(pp: int, micro_batches: int, schedule: str = "1f1b",
                      virtual_stages: int = 1) -> Simulation:
    """`simulate(make_plan(...))` with a micro-batch's forward costing 1 and its
    backward 2 on each rank: with v chunks per rank, a chunk's forward costs
    1/v and its backward 2/v, so the work per micro-batch per rank is the same
    for every v. 'interleaved', or '1f1b' with virtual_stages > 1, is
    Narayanan et al. 2021's interleaved 1F1B. The arguments are checked by
    `cost.bubble_fraction` first, so a bad combination raises a ValueError
    that says what to change. Draw the result with `gantt(sim.events)`.
    """
    bubble_fraction(pp, micro_batches, schedule=schedule, virtual_stages=virtual_stages)
    p, m, v = int(pp), int(micro_batches), int(virtual_stages)
    plan = make_plan("interleaved" if v > 1 else schedule, p, m, v)
    return simulate(plan, forward_cost=Fraction(1, v), backward_cost=Fraction(2, v))


def _as_events(events: Any) -> list[Event]:   # anything a student passes: checked here
    """A list of trace.Event from a list, a Trace or a Simulation (or its
    rank -> events mapping); a TypeError or ValueError says what to pass."""
    hint = ("pass a list of threeaxes.trace.Event: a Trace's .events (`with trace.record() "
            "as t:` ... `gantt(t.events)`) or a simulation's (`gantt(simulate(plan).events)`)")
    if hasattr(events, "events"):                 # a Trace or a Simulation
        events = events.events
    if isinstance(events, Mapping):               # rank -> [Event, ...]
        events = [e for r in sorted(events) for e in events[r]]
    if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
        raise TypeError(f"gantt got {type(events).__name__}; {hint}")
    events = list(events)
    if not events:
        raise ValueError(f"gantt got no events to draw; {hint}")
    for i, e in enumerate(events):
        if not isinstance(e, Event):
            raise TypeError(f"gantt: item {i} is a {type(e).__name__}, not an Event; {hint}")
        if e.end < e.start:
            raise ValueError(f"gantt: {e} ends before it starts; give it end >= start")
    return events


def _style(e: Event, chunk: int) -> tuple[str, str, str]:
    """(box colour, legend entry, legend colour) of one event."""
    if e.kind == COMM:
        color = COMM_COLORS.get(e.axis or "", OTHER_COMM)
        return color, f"{e.axis if e.axis in COMM_COLORS else 'other'} comm", color
    if e.op in ("forward", "backward"):
        shades = FORWARD if e.op == "forward" else BACKWARD
        return shades[chunk % len(shades)], e.op, shades[0]
    if e.op == "optimizer":
        return OPTIMIZER, "optimizer", OPTIMIZER
    return OTHER_COMPUTE, "other compute", OTHER_COMPUTE


def gantt(events: Any, *, ax: Axes | None = None, title: str | None = None, time_unit: str = "s") -> Figure:
    """One row per rank (rank 0 on top), time left to right, a box per Event.

    Compute boxes are coloured by op: forward blue, backward orange (darker
    for a rank's later model chunks), optimizer grey. Communication boxes
    take a colour family per mesh axis (dp green, tp purple, pp brown) and
    are drawn as thin bars in the lower part of the row, so a collective that
    overlaps compute never hides it. A box carries its `Event.label` ("2F0",
    "all_reduce dp") only where the text fits, so 8 ranks of many events stay
    readable; a legend lists what appears. Times are shifted so the earliest
    event starts at 0. `time_unit` is the unit of the x axis: "s", "ms" or
    "us" rescale measured seconds; any other text (e.g. "forward = 1" for a
    simulation) only labels the axis. Returns a matplotlib Figure.

    `gantt(events)` draws any list of `threeaxes.trace.Event`: measured on real
    ranks (compute spans and the collectives `threeaxes.comms` recorded) or
    predicted by `pipeline.simulate(plan)`, so predicted and measured timelines
    look the same and can be compared side by side.
    """
    events = _as_events(events)
    scale = TIME_SCALES.get(time_unit, 1.0)
    ranks = sorted({e.rank for e in events})
    row = {r: i for i, r in enumerate(ranks)}
    t0 = min(e.start for e in events)
    span = float(max(e.end for e in events) - t0) * scale or 1.0
    # a rank's model chunks (interleaved pipelines hold several stages) in order
    chunk = {(r, s): i for r in ranks for i, s in enumerate(
        sorted({e.stage for e in events if e.rank == r and e.stage is not None}))}
    has_comm = any(e.kind == COMM for e in events)
    # (offset from the row centre, height) in rows; compute fills the row when no comm is drawn
    lanes = {COMPUTE: (-0.42, 0.56) if has_comm else (-0.4, 0.8), COMM: (0.17, 0.25)}
    per_row = max(sum(e.rank == r for e in events) for r in ranks)
    if ax is None:
        fig: Figure | SubFigure = Figure(figsize=(min(14.0, max(7.0, 0.35 * per_row + 3)),
                                                 0.42 * len(ranks) + 1.4), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    if not isinstance(fig, Figure):
        raise TypeError("gantt draws on axes of a Figure, not of a SubFigure: the Figure's size decides "
                        "which labels fit; pass ax=Figure().subplots() or no ax")
    # the room in points (72 per inch) that the axes' share of the figure gives
    pts_per_unit = fig.get_figwidth() * 72 * ax.get_position().width / span
    pts_per_row = fig.get_figheight() * 72 * ax.get_position().height / len(ranks)
    # white edges separate boxes, but would wash out boxes only a few points wide
    edge = 0.5 if pts_per_unit * span / per_row >= 6 else 0
    boxes: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    legend: dict[tuple[bool, str], str] = {}
    for e in events:
        color, name, key_color = _style(e, chunk.get((e.rank, e.stage), 0))
        lane = COMM if e.kind == COMM else COMPUTE
        x = (float(e.start - t0) * scale, float(e.end - e.start) * scale)
        boxes.setdefault((lane, row[e.rank], color), []).append(x)
        legend.setdefault((lane == COMM, name), key_color)
    for (lane, y, color), spans in boxes.items():
        off, height = lanes[lane]
        ax.broken_barh(spans, (y + off, height), facecolors=color, gid=lane,
                       edgecolor="white" if lane == COMPUTE else "none", linewidth=edge,
                       zorder=3 if lane == COMM else 2)
    # labels only where they fit: a character is ~0.6 of the font size wide. Boxes in
    # one lane can overlap (collectives in flight together): a label that would run
    # into the previous label of its lane is left out
    label_end: dict[tuple[int, str], float] = {}   # (row, lane) -> where the last label drawn there ends, in x units
    for e in sorted(events, key=lambda e: e.start):
        lane = COMM if e.kind == COMM else COMPUTE
        off, height = lanes[lane]
        width = float(e.end - e.start) * scale * pts_per_unit
        size = next((f for f in (7, 6) if width >= 0.6 * f * len(e.label) + 3
                     and height * pts_per_row >= f + 2), None)
        centre = float(e.start - t0 + (e.end - e.start) / 2) * scale
        half = (0.6 * (size or 0) * len(e.label) / 2) / pts_per_unit
        if size is not None and centre - half >= label_end.get((row[e.rank], lane), -np.inf):
            ax.text(centre, row[e.rank] + off + height / 2, e.label, ha="center", va="center",
                    fontsize=size, clip_on=True, zorder=4)
            label_end[row[e.rank], lane] = centre + half
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.5, -0.5)           # rank 0 on top
    ax.set_xlim(0, span)
    ax.set_xlabel(f"time ({time_unit})")
    chunked = " (darker: later chunk)" if any(chunk.values()) else ""
    order = sorted(legend, key=lambda key: (key[0], LEGEND_ORDER.get(key[1], 9), key[1]))
    handles = [Patch(color=legend[key], label=key[1] + (chunked if key[1] in FB else ""))
               for key in order]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)
    n_comm = sum(e.kind == COMM for e in events)
    ax.set_title(title or f"{len(ranks)} ranks: {len(events) - n_comm} compute and "
                 f"{n_comm} communication events", fontsize=10)
    return fig


def measured_beside_predicted(events: Any, plan: Plan, forward_s: float, backward_s: float, *,
                              title: str = "") -> Figure:
    """One Figure: a measured pipeline step on top (`gantt` of its events), below it
    `simulate(plan)` with a stage's forward costing `forward_s` and its backward
    `backward_s` (seconds), both axes in milliseconds and the same span."""
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    predicted = simulate(plan, forward_s, backward_s)
    gantt(events, ax=top, title=f"measured: {title}", time_unit="ms")
    gantt(predicted.events, ax=bottom, title=f"predicted: {plan.name} plan simulated",
          time_unit="ms")
    span = max(top.get_xlim()[1], bottom.get_xlim()[1])
    for ax in (top, bottom):
        ax.set_xlim(0, span)
    return fig


# drawn on axes of their own, the drawings return that Figure; on `ax`, the figure `ax` is in
@overload
def draw_memory_bars(bars: Sequence[tuple[str, Any]], capacity: float, *, ax: None = None,
                     title: str | None = None) -> Figure: ...
# drawn on axes of their own, the drawings return that Figure; on `ax`, the figure `ax` is in
@overload
def draw_memory_bars(bars: Sequence[tuple[str, Any]], capacity: float, *, ax: Axes,
                     title: str | None = None) -> Figure | SubFigure: ...
def draw_memory_bars(bars: Sequence[tuple[str, Any]], capacity: float, *, ax: Axes | None = None,
                     title: str | None = None) -> Figure | SubFigure:
    """Stacked bars of bytes per GPU by term against the GPU's capacity.

    ``bars`` is a list of (label, terms) with terms a mapping (or an object
    with attributes) params, grads, optimizer, activations in bytes. What
    rises above the capacity line is outlined in red and hatched: it does not fit.
    """
    if ax is None:
        fig: Figure | SubFigure = Figure(figsize=(min(12.0, 3.0 + 0.7 * len(bars)), 3.8), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    cap = capacity / GB

    def value(terms: Any, key: str) -> float:
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


def draw_measured_vs_predicted(rows: Sequence[Sequence[Any]], *,
                               unit: float = 1e3, unit_name: str = "kB", ax: Axes | None = None,
                               title: str | None = None) -> Figure | SubFigure:
    """Pairs of stacked bars by memory term: what a rank measured (solid) beside what the
    cost model predicted (hatched), one pair per row.

    ``rows`` is a list of (label, measured terms, predicted terms), the terms as in
    `draw_memory_bars` (params, grads, optimizer, and activations if any) in bytes.
    """
    if ax is None:
        fig: Figure | SubFigure = Figure(figsize=(min(13.0, 2.5 + 0.75 * len(rows)), 3.8), layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    x = np.arange(len(rows))
    for offset, which, hatch in ((-0.2, 1, None), (0.2, 2, "//")):
        bottom = np.zeros(len(rows))
        for key, name, color in MEMORY_TERMS:   # one call per term, all bars at once
            heights = np.array([row[which].get(key, 0.0) for row in rows]) / unit
            ax.bar(x + offset, heights, bottom=bottom, width=0.38, color=color, hatch=hatch,
                   edgecolor="white" if hatch else None,
                   label=(name if which == 1 else None) if heights.any() else None)
            bottom += heights
    ax.bar([0], [0], color="white", edgecolor="#444444", hatch="//", label="predicted (right bar)")
    ax.set_xticks(x, [row[0] for row in rows], fontsize=8)
    ax.set_ylabel(f"{unit_name} per rank")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


@overload
def draw_time_breakdown(rows: Sequence[tuple[str, Any]], *, ax: None = None, title: str | None = None) -> Figure: ...
@overload
def draw_time_breakdown(rows: Sequence[tuple[str, Any]], *, ax: Axes,
                        title: str | None = None) -> Figure | SubFigure: ...
def draw_time_breakdown(rows: Sequence[tuple[str, Any]], *, ax: Axes | None = None,
                        title: str | None = None) -> Figure | SubFigure:
    """Horizontal stacked bars of step time by term (seconds).

    ``rows`` is a list of (label, time) with time a TimeBreakdown (or mapping).
    """
    if ax is None:
        fig: Figure | SubFigure = Figure(figsize=(8.0, 0.5 * len(rows) + 1.4), layout="constrained")
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


def draw_mesh(dims: ParallelDims, *, title: str | None = None) -> Figure:
    """The layout's ranks as a grid: one panel per pipeline stage, dp down, tp across,
    each box labelled with its global rank and (dp, tp, pp) coordinates. tp partners
    share a row, dp partners a column, pp partners the same box in every panel."""
    fig = Figure(figsize=(2.2 * dims.tp * dims.pp + 0.6, 1.1 * dims.dp + 1.0))
    axes = fig.subplots(1, dims.pp, squeeze=False)[0]
    colours = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9", "#fee391", "#ccebc5"]
    for pp_i, ax in enumerate(axes):
        for dp_i in range(dims.dp):
            for tp_i in range(dims.tp):
                rank = dims.rank_of(dp=dp_i, tp=tp_i, pp=pp_i)
                ax.add_patch(Rectangle((tp_i, dims.dp - 1 - dp_i), 0.92, 0.86,
                                       facecolor=colours[dp_i % len(colours)], edgecolor="#444444"))
                ax.text(tp_i + 0.46, dims.dp - 1 - dp_i + 0.43,
                        f"rank {rank}\n(dp {dp_i}, tp {tp_i}, pp {pp_i})", ha="center", va="center",
                        fontsize=8)
        ax.set_xlim(-0.05, dims.tp)
        ax.set_ylim(-0.05, dims.dp)
        ax.set_xticks([i + 0.46 for i in range(dims.tp)], [f"tp {i}" for i in range(dims.tp)])
        ax.set_yticks([dims.dp - 1 - i + 0.43 for i in range(dims.dp)], [f"dp {i}" for i in range(dims.dp)])
        ax.set_title(f"pipeline stage {pp_i}", fontsize=9)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
    fig.suptitle(title or f"dp={dims.dp} x tp={dims.tp} x pp={dims.pp} = {dims.world_size} ranks "
                 f"(tp fastest)", fontsize=10)
    return fig
