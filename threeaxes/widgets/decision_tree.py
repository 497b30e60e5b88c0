"""The cheatsheet's decision tree as a widget, and the cheatsheet on one printable page.

    DecisionTreeExplorer(billions=30, gpus_per_node=8, nodes=1)   # walks the tree, draws it
    print_cheatsheet("cheatsheet.pdf")                             # the table and the tree

The walk is `threeaxes.cost.decide.walk_tree` (16N rule, the cost model's memory, the
planner's evaluation of where the tree ends); this module only draws it.
"""
from __future__ import annotations

import html
import textwrap
from os import PathLike
from typing import IO, Any, overload

import ipywidgets as widgets
from matplotlib.axes import Axes
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure, SubFigure

from ..cost import GB, MODELS, a100_cluster
from ..cost.decide import SCHEMES, Decision, TreeWalk, model_of_size, walk_tree
from .base import _MODEL_OPTIONS, _WIDE, _Explorer

__all__ = ["DecisionTreeExplorer", "draw_tree", "print_cheatsheet", "CHEATSHEET_TABLE"]

TAKEN, IDLE = "#c0392b", "#b0b0b0"
# where each box of the tree sits (axes fraction) and what it says
_QUESTIONS = {
    "one GPU": ((0.66, 0.90), "Do the model states (16N)\nfit one GPU?"),
    "split layers": ((0.66, 0.66), "Will the team split layers\n(TP or PP)?"),
    "one node": ((0.66, 0.42), "Do the model states fit\none node (16N / GPUs per node)?"),
}
_LEAVES = {
    "dp": ((0.16, 0.90), "DP alone"),
    "fsdp": ((0.16, 0.66), "FSDP / ZeRO-3\nover every GPU"),
    "tp": ((0.16, 0.42), "TP inside the node\n+ DP across nodes"),
    "3d": ((0.66, 0.12), "3D: TP inside nodes,\nPP across nodes, DP on top"),
}
# (from, to, label, (decision key, answer) that takes this edge)
_EDGES = (("one GPU", "dp", "yes", ("one GPU", True)),
          ("one GPU", "split layers", "no", ("one GPU", False)),
          ("split layers", "fsdp", "no", ("split layers", False)),
          ("split layers", "one node", "yes", ("split layers", True)),
          ("one node", "tp", "yes", ("one node", True)),
          ("one node", "3d", "no", ("one node", False)),
          ("tp", "3d", "no tp fits:\nadd stages", ("tp", False)))

CHEATSHEET_TABLE = (
    ("scheme", "what it splits", "what it sends", "where it fits"),
    ("data (DP)", "the batch; every GPU has the whole model", "gradients, all-reduced once a step",
     "anywhere the model fits one GPU"),
    ("tensor (TP)", "each layer's matrices (MLP width, heads)", "partial results, every layer",
     "inside a node (NVLink)"),
    ("pipeline (PP)", "the stack of layers, into stages", "activations at stage edges",
     "across nodes (it sends least per step)"),
    ("ZeRO / FSDP", "over DP: optimizer states (stage 1), + gradients (2), + weights (3 = FSDP)",
     "stage 3 gathers a layer's weights on demand", "where DP's code is wanted with less memory"),
)


def _key(decision: Decision) -> str:
    return decision.question.split(":")[0]


# on axes of its own, the tree returns that Figure; on `ax`, the figure `ax` is in
@overload
def draw_tree(walk: TreeWalk | None = None, ax: None = None, *, numbers: bool = True) -> Figure: ...
@overload
def draw_tree(walk: TreeWalk | None, ax: Axes, *, numbers: bool = True) -> Figure | SubFigure: ...
def draw_tree(walk: TreeWalk | None = None, ax: Axes | None = None, *, numbers: bool = True) -> Figure | SubFigure:
    """Draw the tree; with a walk, the branch taken in red with the numbers behind each
    decision beside its box and the configuration the planner evaluated under the leaf."""
    if ax is None:
        fig = Figure(figsize=(10.0, 6.4), layout="constrained")
        ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    answers = {} if walk is None else {_key(d): d for d in walk.decisions}
    boxes = {**{k: v for k, v in _QUESTIONS.items()}, **_LEAVES}
    for start, stop, label, (key, answer) in _EDGES:
        taken = key in answers and answers[key].answer == answer
        (x0, y0), (x1, y1) = boxes[start][0], boxes[stop][0]
        ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(
            arrowstyle="-|>", color=TAKEN if taken else IDLE, lw=2.4 if taken else 1.0,
            linestyle="-" if start != "tp" else "--", shrinkA=26, shrinkB=26))
        vertical = x0 == x1
        ax.text((x0 + x1) / 2 + (0.012 if vertical else 0), (y0 + y1) / 2 + 0.015, label,
                ha="left" if vertical else "center", fontsize=8, color=TAKEN if taken else "#666")
    for key, ((x, y), text) in _QUESTIONS.items():
        asked = key in answers
        ax.text(x, y, text, ha="center", va="center", fontsize=9, bbox=dict(
            boxstyle="round", fc="#fdf2f0" if asked else "white",
            ec=TAKEN if asked else IDLE, lw=2 if asked else 1))
        if asked and numbers:
            ax.text(x - 0.03, y - 0.06, "\n".join(textwrap.wrap(answers[key].numbers, 56)),
                    ha="right", va="top", fontsize=7, color=TAKEN)
    for key, ((x, y), text) in _LEAVES.items():
        reached = walk is not None and walk.scheme == key
        ax.text(x, y, text, ha="center", va="center", fontsize=9, weight="bold" if reached else None,
                bbox=dict(boxstyle="square", fc="#f6dcd7" if reached else "#f4f4f4",
                          ec=TAKEN if reached else IDLE, lw=2 if reached else 1))
        if reached and numbers:
            assert walk is not None and walk.result is not None    # a walk that reaches a leaf has a plan
            r = walk.result
            ax.text(x, y - 0.075, f"{r.label}\n{r.memory.total / GB:.1f} GB per GPU, "
                    f"{r.time.total:.2f} s per step\n{walk.verdict.slowdown:.2f}x the planner's "
                    f"best ({walk.verdict.best.label})" if walk.verdict else r.label,
                    ha="center", va="top", fontsize=7, color=TAKEN)
    if "tp" in answers and numbers:
        ax.text(0.03, 0.27, "\n".join(textwrap.wrap(answers["tp"].numbers, 40)), ha="left",
                va="top", fontsize=7, color=TAKEN)
    return ax.figure


class DecisionTreeExplorer(_Explorer[TreeWalk]):
    """Model size (or a preset), GPUs per node, nodes, GPU memory -> the branch taken."""

    title = "The cheatsheet's decision tree, on your numbers"

    def __init__(self, **initial: Any) -> None:
        c = {
            "model": widgets.Dropdown(options=[("by size (billions)", "size")] + _MODEL_OPTIONS,
                                      value="size", description="model"),
            "billions": widgets.BoundedFloatText(30.0, min=0.1, max=2000.0, step=1.0,
                                                 description="billions", style=_WIDE),
            "gpus_per_node": widgets.Dropdown(options=[1, 2, 4, 8, 16], value=8,
                                              description="GPUs per node", style=_WIDE),
            "nodes": widgets.BoundedIntText(1, min=1, max=512, description="nodes"),
            "gpu_gb": widgets.Dropdown(options=[16, 24, 40, 48, 80, 96, 141], value=80,
                                       description="GPU memory (GB)", style=_WIDE),
            "split_layers": widgets.Checkbox(True, description="the team accepts TP and PP"),
            "global_batch": widgets.Dropdown(options=[64, 128, 256, 512, 1024, 2048], value=512,
                                             description="global batch (seqs)", style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["billions"]]),
                widgets.HBox([c["gpus_per_node"], c["nodes"], c["gpu_gb"]]),
                widgets.HBox([c["split_layers"], c["global_batch"]])]
        self.path = widgets.HTML()
        c["model"].observe(self._toggle_size, names="value")
        self._toggle_size({"new": c["model"].value}, controls=c)
        super().__init__(c, rows, initial)

    def _toggle_size(self, change: dict[str, Any], controls: dict[str, Any] | None = None) -> None:
        (controls or self.controls)["billions"].disabled = change["new"] != "size"

    def _extra_views(self) -> list[Any]:
        return [self.path]

    def _clear_extra(self) -> None:
        self.path.value = ""

    def compute(self) -> TreeWalk:
        v = self.values()
        model = model_of_size(v["billions"]) if v["model"] == "size" else MODELS[v["model"]]
        cluster = a100_cluster(v["nodes"], gpus_per_node=v["gpus_per_node"],
                               hbm_bytes=v["gpu_gb"] * GB)
        walk = walk_tree(model, cluster, v["global_batch"], split_layers=v["split_layers"])
        if walk.scheme is None:
            raise ValueError(walk.message)
        return walk

    def summary(self, walk: TreeWalk) -> str:
        steps = "".join(f"<li>{html.escape(d.question)} <b>{'yes' if d.answer else 'no'}</b>: "
                        f"{html.escape(d.numbers)}</li>" for d in walk.decisions)
        self.path.value = f"<ol>{steps}</ol>"
        r = walk.result
        # compute() refused a walk that ends nowhere: this one has its scheme, plan and verdict
        assert walk.scheme is not None and r is not None and walk.verdict is not None
        return (f"{html.escape(str(walk.model))} on {walk.cluster.n_gpus} GPUs: "
                f"<b>{html.escape(SCHEMES[walk.scheme])}</b>, {html.escape(r.label)}. "
                f"The planner: {html.escape(walk.verdict.feedback)}")

    def draw(self, walk: TreeWalk) -> Figure:
        return draw_tree(walk)


def print_cheatsheet(path: str | PathLike[str] | IO[bytes]) -> int:
    """The cheatsheet on one page (PDF): the schemes' table, the tree, the product rule
    and the bubble's fix. Returns the page count (1)."""
    fig = Figure(figsize=(8.5, 11))
    fig.text(0.5, 0.975, "Three Axes cheatsheet: which parallelism, when", ha="center",
             fontsize=15, weight="bold")
    top = fig.add_axes((0.04, 0.72, 0.92, 0.23))
    top.set_axis_off()
    rows = [["\n".join(textwrap.wrap(cell, 28)) for cell in row] for row in CHEATSHEET_TABLE[1:]]
    table = top.table(cellText=rows, colLabels=list(CHEATSHEET_TABLE[0]), loc="center",
                      cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    for (row, _), cell in table.get_celld().items():
        cell.set_height(0.09 if row == 0 else 0.2)    # two wrapped lines a row
    draw_tree(None, fig.add_axes((0.02, 0.2, 0.96, 0.52)))
    fig.text(0.06, 0.15, "dp x tp x pp = GPUs:  tp = the GPUs of one node (fast links), "
             "pp = stages across nodes, dp = what is left (batch scale).", fontsize=9)
    fig.text(0.06, 0.115, "Bubble: a pipeline idles (p-1)/(m+p-1) of a step while it fills and "
             "drains; more micro-batches m shrink it.", fontsize=9)
    fig.text(0.06, 0.08, "Model states: 2 + 2 + 12 = 16 bytes a parameter (mixed-precision Adam);"
             " ZeRO-3 divides all of it by dp.", fontsize=9)
    with PdfPages(path) as pdf:
        pdf.savefig(fig)
    return 1
