"""Fix explorer: one run's model, cluster and tokens per step are fixed; move the
knobs (tp, pp, micro-batch, ZeRO, recomputation, sequence parallelism,
memory-efficient attention, sequence length) and see memory per GPU and the
predicted step time beside the configuration you started from."""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import RECOMPUTE, divisors, plan, valid_tp
from ..cost.evaluate import PlanResult
from ..cost.memory import GB
from ..cost.presets import Cluster, Model
from ..plots import draw_memory_bars, draw_time_breakdown
from .base import _WIDE, _Explorer


class FixData(NamedTuple):
    result: PlanResult    # PlanResult of the configuration the controls describe
    baseline: PlanResult  # PlanResult of the starting configuration, same sequence length
    global_batch: int     # sequences per step at this sequence length
    slowdown: float       # result's predicted step time / the baseline's


class FixExplorer(_Explorer[FixData]):
    """Fixed model, cluster and tokens per step; the knobs -> memory and step time.

    ``baseline`` is the starting configuration (keyword arguments of ``plan``);
    the controls start from it. dp follows from the GPUs: n_gpus / (tp * pp).
    The baseline's step time is predicted even when it does not fit, so the
    slowdown reads "what the fix costs against the run as it was".
    """

    title = "Fix explorer: make it fit again, at the least slowdown"

    def __init__(self, model: Model, cluster: Cluster, tokens_per_step: int, baseline: dict[str, Any],
                 seq_lens: Sequence[int] = (2048, 4096), **initial: Any) -> None:
        self.model, self.cluster, self.tokens_per_step = model, cluster, int(tokens_per_step)
        self.baseline = dict(baseline)
        n = cluster.n_gpus
        c = {
            "seq_len": widgets.Dropdown(options=list(seq_lens), value=seq_lens[-1],
                                        description="seq_len"),
            "tp": widgets.Dropdown(options=valid_tp(model, cluster), description="tp"),
            "pp": widgets.Dropdown(options=[p for p in divisors(n) if model.n_layers % p == 0],
                                   description="pp"),
            "micro_batch": widgets.Dropdown(options=[1, 2, 4, 8, 16], description="micro-batch",
                                            style=_WIDE),
            "zero_stage": widgets.Dropdown(options=[0, 1, 2, 3], description="ZeRO stage",
                                           style=_WIDE),
            "recompute": widgets.Dropdown(options=list(RECOMPUTE), description="recompute"),
            "sequence_parallel": widgets.Checkbox(False, description="sequence parallel"),
            # plan()'s default is memory-efficient attention; a baseline may say otherwise
            "flash_attention": widgets.Checkbox(True, description="memory-efficient attention",
                                                style=_WIDE),
        }
        rows = [widgets.HBox([c["seq_len"], c["tp"], c["pp"]]),
                widgets.HBox([c["micro_batch"], c["zero_stage"], c["recompute"]]),
                widgets.HBox([c["sequence_parallel"], c["flash_attention"]])]
        start = {k: v for k, v in self.baseline.items() if k in c}
        super().__init__(c, rows, {**start, **initial})

    def _plan(self, seq_len: int, config: dict[str, Any]) -> PlanResult:
        tp, pp = config["tp"], config.get("pp", 1)
        if self.cluster.n_gpus % (tp * pp):
            raise ValueError(f"tp({tp}) * pp({pp}) = {tp * pp} does not divide the "
                             f"{self.cluster.n_gpus} GPUs; choose a smaller tp or pp")
        if self.tokens_per_step % seq_len:
            raise ValueError(f"seq_len={seq_len} does not divide the {self.tokens_per_step:,} "
                             "tokens per step")
        dp = self.cluster.n_gpus // (tp * pp)
        config = {**config, "dp": dp}
        return plan(self.model, self.cluster, self.tokens_per_step // seq_len, seq_len, **config)

    def compute(self) -> FixData:
        v = self.values()
        seq_len = v.pop("seq_len")
        result = self._plan(seq_len, v)
        baseline = self._plan(seq_len, {k: x for k, x in self.baseline.items() if k != "dp"})
        return FixData(result, baseline, self.tokens_per_step // seq_len,
                       result.time.total / baseline.time.total)

    def summary(self, d: FixData) -> str:
        r, m = d.result, d.result.memory
        verdict = ("<b style='color:#2a7a2a'>fits</b>" if r.fits else
                   f"<b style='color:#a0302a'>does not fit: {(m.total - r.capacity) / GB:.1f} GB "
                   "over</b>")
        return (f"{html.escape(r.label)}, {d.global_batch} sequences per step: "
                f"{m.total / GB:.1f} GB per GPU of {r.capacity / GB:.0f} GB ({verdict}; "
                f"activations {m.activations / GB:.1f} GB). Predicted step "
                f"<b>{r.time.total:.2f} s</b>, <b>{d.slowdown:.2f}x</b> the starting "
                f"configuration's {d.baseline.time.total:.2f} s.")

    def draw(self, d: FixData) -> Figure:
        fig = Figure(figsize=(11.0, 3.2), layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=[1.2, 2.2])
        draw_memory_bars([("start", d.baseline.memory), ("yours", d.result.memory)],
                         d.result.capacity, ax=left, title="memory per GPU")
        draw_time_breakdown([("start", d.baseline.time), ("yours", d.result.time)], ax=right,
                            title="predicted step time by term")
        return fig
