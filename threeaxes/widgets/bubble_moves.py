"""Bubble moves explorer: the global batch and the micro-batch are fixed; move tp,
pp, v, ZeRO, recomputation and sequence parallelism and see the micro-batch
count, the bubble against a target, memory per GPU and the step time beside
the layout the run started from."""
from __future__ import annotations

import html
from typing import Any, NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import RECOMPUTE, plan, violations
from ..cost.evaluate import PlanResult
from ..cost.memory import GB
from ..cost.presets import Cluster, Model
from ..plots import draw_memory_bars, draw_time_breakdown
from .base import _WIDE, _Explorer


class MoveData(NamedTuple):
    result: PlanResult    # PlanResult of the layout the controls describe
    baseline: PlanResult  # PlanResult of the layout the run started from
    target: float         # the bubble fraction to get under
    under_target: bool    # result.bubble_fraction < target
    speedup: float        # baseline's predicted step time / result's


class BubbleMovesExplorer(_Explorer[MoveData]):
    """Fixed model, cluster, global batch and micro-batch; the layout -> m, bubble,
    memory and step time against ``baseline`` (keyword arguments of ``plan``).

    dp follows from the GPUs, n_gpus / (tp * pp), so m = global_batch / (dp *
    micro_batch) moves only when dp does. A layout that breaks a rule shows every
    broken rule (``cost.violations``) instead of a plot. ``interleave`` is the
    framework's rule for interleaving (``cost.interleave_group``; default
    Megatron Core's "flexible", "group_p" for releases before Core 0.10).
    """

    title = "Bubble moves: the batch and micro-batch are fixed, the layout is yours"

    def __init__(self, model: Model, cluster: Cluster, global_batch: int, baseline: dict[str, Any], *,
                 bubble_target: float, seq_len: int | None = None,
                 interleave: str = "flexible", **initial: Any) -> None:
        if not 0 < bubble_target < 1:
            raise ValueError(f"bubble_target={bubble_target} must be a fraction in (0, 1)")
        self.model, self.cluster = model, cluster
        self.global_batch, self.seq_len = int(global_batch), seq_len
        self.baseline, self.target = dict(baseline), float(bubble_target)
        self.micro_batch = self.baseline["micro_batch"]
        self.interleave = interleave
        gpus = cluster.gpus_per_node
        c = {
            # tp up to two nodes' worth, so that crossing a node shows its rule
            "tp": widgets.Dropdown(options=[t for t in (1, 2, 4, 8, 16, 32) if t <= 2 * gpus],
                                   description="tp"),
            "pp": widgets.Dropdown(options=[1, 2, 4, 8, 16, 32], description="pp"),
            "virtual_stages": widgets.Dropdown(options=[1, 2, 3, 4, 6],
                                               description="v (chunks per GPU)", style=_WIDE),
            "zero_stage": widgets.Dropdown(options=[0, 1, 2, 3], description="ZeRO stage",
                                           style=_WIDE),
            "recompute": widgets.Dropdown(options=list(RECOMPUTE), description="recompute"),
            "sequence_parallel": widgets.Checkbox(False, description="sequence parallel"),
        }
        rows = [widgets.HBox([c["tp"], c["pp"], c["virtual_stages"]]),
                widgets.HBox([c["zero_stage"], c["recompute"], c["sequence_parallel"]])]
        start = {k: v for k, v in self.baseline.items() if k in c}
        super().__init__(c, rows, {**start, **initial})

    def _plan(self, config: dict[str, Any]) -> PlanResult:
        config = {**config, "micro_batch": self.micro_batch}
        tp, pp = config["tp"], config["pp"]
        n = self.cluster.n_gpus
        if n % (tp * pp):
            raise ValueError(f"tp({tp}) * pp({pp}) = {tp * pp} does not divide the {n} GPUs; "
                             "choose a smaller tp or pp")
        config["dp"] = n // (tp * pp)
        rules = {k: x for k, x in config.items() if k != "sequence_parallel"}
        broken = violations(self.model, self.cluster, self.global_batch, **rules,
                            interleave=self.interleave)
        if broken:
            raise ValueError(f"dp={config['dp']} tp={tp} pp={pp}: "
                             + " | ".join(v.message for v in broken))
        return plan(self.model, self.cluster, self.global_batch, self.seq_len, **config,
                    interleave=self.interleave)

    def compute(self) -> MoveData:
        result = self._plan(self.values())
        baseline = self._plan({k: x for k, x in self.baseline.items()
                               if k not in ("dp", "micro_batch")})
        return MoveData(result, baseline, self.target, result.bubble_fraction < self.target,
                        baseline.time.total / result.time.total)

    def summary(self, d: MoveData) -> str:
        r = d.result
        p, m, v = r.pp, r.micro_batches, r.virtual_stages
        vm = f"{v}&middot;{m}" if v > 1 else f"{m}"
        verdict = "under" if d.under_target else "<b>not</b> under"
        fits = "fits" if r.fits else "<b>does not fit</b>"
        return (f"<b>{html.escape(r.label)}</b><br>"
                f"m = {self.global_batch} / (dp {r.dp} &times; micro-batch {r.micro_batch}) "
                f"= {m} micro-batches per replica; bubble (p-1)/(v&middot;m+p-1) = "
                f"{p - 1}/({vm}+{p - 1}) = <b>{r.bubble_fraction:.1%}</b>, {verdict} the "
                f"{d.target:.0%} target<br>{r.memory.total / GB:.1f} of "
                f"{r.capacity / GB:.0f} GB per GPU: {fits}; {r.time.total:.2f} s per step, "
                f"<b>{d.speedup:.2f}&times;</b> as fast as the starting layout "
                f"({d.baseline.time.total:.2f} s)")

    def draw(self, d: MoveData) -> Figure:
        fig = Figure(figsize=(12.0, 3.4), layout="constrained")
        left, middle, right = fig.subplots(1, 3, width_ratios=[0.8, 1.2, 2.2])
        labels = ["start", "this layout"]
        bubbles = [100 * d.baseline.bubble_fraction, 100 * d.result.bubble_fraction]
        left.bar(labels, bubbles, width=0.6,
                 color=["#c0c0c0", "#55a868" if d.under_target else "#c44e52"])
        left.axhline(100 * d.target, color="black", linestyle="--", linewidth=1,
                     label=f"target {d.target:.0%}")
        left.set_ylabel("bubble, % of the step")
        left.set_title("idle share of a step", fontsize=10)
        left.legend(loc="upper right", fontsize=8, frameon=False)
        draw_memory_bars([("start", d.baseline.memory), ("this layout", d.result.memory)],
                         d.result.capacity, ax=middle, title="memory per GPU")
        draw_time_breakdown([("start", d.baseline.time), ("this layout", d.result.time)],
                            ax=right, title="step time by term (s)")
        return fig
