"""Config explorer: model and cluster -> the ranked table of feasible (dp, tp, pp),
with the sequence split over cp ranks or a mixture's experts over ep ranks if asked."""
from __future__ import annotations

import html
from typing import Any, NamedTuple

import ipywidgets as widgets
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..cost import CP_MODES, context_violations, get_cluster, search
from ..cost.evaluate import PlanResult, TimeBreakdown
from ..cost.memory import GB
from ..cost.presets import Cluster, Model
from ..display import plan_table_html
from ..plots import TIME_TERMS, draw_memory_bars, draw_time_breakdown
from .base import _CLUSTERS, _CP_CHOICES, _EP_CHOICES, _MODEL_OPTIONS, _MOE_OPTIONS, _WIDE, _Explorer, _preset

_LONG = 16384    # sequences this long (new with cp) get cp suggested when nothing fits
# the step-time terms beyond the three axes, drawn after plots.TIME_TERMS when non-zero
EXTRA_TIME_TERMS = (("cp_comm", "CP comm", "#8172b3"), ("ep_comm", "EP comm", "#da8bc3"))


class ConfigData(NamedTuple):
    rows: list[PlanResult]  # the best fitting PlanResults, ranked
    chosen: PlanResult   # the PlanResult whose breakdown is drawn
    n_valid: int         # configurations that satisfy every constraint
    n_fitting: int       # of those, how many fit in memory
    model: Model
    cluster: Cluster
    global_batch: int
    seq_len: int


class ConfigExplorer(_Explorer[ConfigData]):
    """Model and cluster -> every valid (dp, tp, pp, ...) ranked; one's breakdown.

    ``cp`` and ``ep`` fix the context- and expert-parallel degrees of every row
    (``search(cps=(cp,), cp_modes=(cp_mode,), eps=(ep,))``, experts with etp = tp);
    at their default of 1 the search is the three-axis one, ``cp_mode`` unused.
    """

    title = "Configuration explorer"

    def __init__(self, **initial: Any) -> None:
        c = {
            "model": widgets.Dropdown(options=_MODEL_OPTIONS + _MOE_OPTIONS, value="llama2-70b",
                                      description="model"),
            "cluster": widgets.Dropdown(options=_CLUSTERS, description="cluster"),
            "n_gpus": widgets.Dropdown(options=[8, 16, 32, 64, 128, 256, 512, 1024], value=64,
                                       description="GPUs"),
            "global_batch": widgets.Dropdown(options=[32, 64, 128, 256, 512, 1024, 2048],
                                             value=512, description="global batch (seqs)",
                                             style=_WIDE),
            "seq_len": widgets.Dropdown(options=[1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                                 131072], value=4096, description="seq_len"),
            "rows": widgets.IntSlider(10, min=3, max=30, description="rows", style=_WIDE),
            "pick": widgets.IntSlider(1, min=1, max=30, description="show row", style=_WIDE),
            # beyond three axes: 1 leaves the three-axis search as it was
            "cp": widgets.Dropdown(options=_CP_CHOICES, value=1,
                                   description="cp (sequence split)", style=_WIDE),
            "cp_mode": widgets.Dropdown(options=list(CP_MODES), value="ring",
                                        description="K/V exchange", style=_WIDE),
            "ep": widgets.Dropdown(options=_EP_CHOICES, value=1,
                                   description="ep (experts split)", style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["cluster"], c["n_gpus"]]),
                widgets.HBox([c["global_batch"], c["seq_len"]]),
                widgets.HBox([c["cp"], c["cp_mode"], c["ep"]]),
                widgets.HBox([c["rows"], c["pick"]])]
        self.table = widgets.HTML()
        self._cache: dict[tuple[Any, ...], tuple[Cluster, list[PlanResult]]] = {}
        c["pick"].max = c["rows"].value

        def follow_rows(change: dict[str, Any]) -> None:
            c["pick"].max = change["new"]      # clamps "pick" into range
        c["rows"].observe(follow_rows, names="value")

        def follow_cp(change: dict[str, Any]) -> None:
            c["cp_mode"].disabled = change["new"] == 1     # one rank exchanges nothing
        c["cp"].observe(follow_cp, names="value")
        follow_cp({"new": c["cp"].value})
        super().__init__(c, rows, initial)

    def _extra_views(self) -> list[Any]:
        return [self.table]

    def _clear_extra(self) -> None:
        self.table.value = ""

    def _search(self, key: tuple[Any, ...]) -> tuple[Cluster, list[PlanResult]]:
        if key not in self._cache:
            model_key, cluster_key, n_gpus, batch, seq_len, cp, cp_mode, ep = key
            cluster = get_cluster(cluster_key, n_gpus=n_gpus)
            beyond: dict[str, Any] = {}
            if cp > 1:
                beyond.update(cps=(cp,), cp_modes=(cp_mode,))
            if ep > 1:
                beyond.update(eps=(ep,))
            self._cache[key] = (cluster, search(_preset(model_key), cluster, batch, seq_len,
                                                **beyond))
            if len(self._cache) > 16:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]

    def compute(self) -> ConfigData:
        v = self.values()
        model = _preset(v["model"])
        cp, ep = v["cp"], v["ep"]
        cp_mode = v["cp_mode"] if cp > 1 else "ring"
        if ep > 1 and model.moe is None:
            raise ValueError(f"ep={ep} splits a mixture of experts' experts, and {model.name} "
                             "is dense: pick Mixtral 8x7B or set ep=1")
        if cp > 1:
            # the sequence's own rule (tp = 1): no layout can mend it
            broken = [m for rule, m in context_violations(model.n_heads, model.kv_heads,
                                                         v["seq_len"], cp=cp, mode=cp_mode)
                      if rule == "cp_seq"]
            if broken:
                raise ValueError(broken[0])
        key = (v["model"], v["cluster"], v["n_gpus"], v["global_batch"], v["seq_len"], cp,
               cp_mode, ep)
        cluster, results = self._search(key)
        if not results:
            axes = "(dp, tp, pp)" + (f" with cp={cp}" if cp > 1 else "") + (
                f" with ep={ep}" if ep > 1 else "")
            raise ValueError(f"no {axes} satisfies the constraints for "
                             f"global_batch={v['global_batch']} on {v['n_gpus']} GPUs; "
                             "choose a global batch that more dp degrees divide"
                             + (", or a smaller cp or ep" if cp > 1 or ep > 1 else ""))
        fitting = [r for r in results if r.fits]
        if not fitting:
            lightest = min(results, key=lambda r: r.memory.total)
            raise ValueError(
                f"nothing fits: the lightest valid configuration ({lightest.label}) needs "
                f"{lightest.memory.total / GB:.1f} GB per GPU of {cluster.hbm_bytes / GB:.0f} GB; "
                "add GPUs or shorten seq_len"
                + (" or raise cp" if cp < max(_CP_CHOICES) and v["seq_len"] >= _LONG else ""))
        shown = fitting[:v["rows"]]
        pick = min(v["pick"], len(shown))
        return ConfigData(shown, shown[pick - 1], len(results), len(fitting), model, cluster,
                          v["global_batch"], v["seq_len"])

    def summary(self, d: ConfigData) -> str:
        r = d.chosen
        return (f"{d.n_valid} valid configurations of {html.escape(d.model.name)} on "
                f"{d.cluster.n_gpus} {html.escape(d.cluster.gpu)}, {d.n_fitting} fit in memory. "
                f"Showing <b>{html.escape(r.label)}</b>: {r.memory.total / GB:.1f} GB per GPU, "
                f"{r.time.total:.2f} s per step, {r.tokens_per_second:,.0f} tokens/s, "
                f"MFU {r.mfu:.1%}." + _beyond_note(r))

    def draw(self, d: ConfigData) -> Figure:
        self.table.value = plan_table_html(d.rows, d.chosen)
        fig = Figure(figsize=(11.0, 3.4), layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=[1.3, 2.2])
        draw_memory_bars([("chosen", d.chosen.memory)], d.chosen.capacity, ax=left,
                         title="memory per GPU")
        best = d.rows[:5]
        if d.chosen not in best:
            best = best + [d.chosen]
        bars = [(f"#{d.rows.index(r) + 1} (dp, tp, pp) = ({r.dp}, {r.tp}, {r.pp})"
                 + (f", cp={r.cp}" if r.cp > 1 else "") + (f", ep={r.ep}" if r.ep > 1 else ""),
                 r.time) for r in best]
        draw_time_breakdown(bars, ax=right, title="step time by term (rows of the table)")
        _add_time_terms(right, bars)
        return fig


def _beyond_note(r: PlanResult) -> str:
    """The cp and ep terms of the chosen row, said only when it has them."""
    notes = []
    if r.cp > 1:
        notes.append(f" Each sequence split over cp={r.cp} ({html.escape(r.cp_mode)}): "
                     f"{r.time.cp_comm:.2f} s of key/value exchange left uncovered.")
    if r.ep > 1:
        notes.append(f" Experts split over ep={r.ep}: {r.time.ep_comm:.2f} s of all-to-all.")
    return "".join(notes)


def _add_time_terms(ax: Axes, bars: list[tuple[str, TimeBreakdown]]) -> None:
    """Stack cp's and ep's time after the three-axis terms ``draw_time_breakdown`` drew
    (none when every row has them at zero: the three-axis chart is left as it was)."""
    left = np.array([sum(getattr(t, key) for key, _, _ in TIME_TERMS) for _, t in bars])
    added = False
    for key, name, color in EXTRA_TIME_TERMS:
        widths = np.array([getattr(t, key) for _, t in bars])
        if widths.any():
            ax.barh(np.arange(len(bars)), widths, left=left, color=color, height=0.6, label=name)
            left += widths
            added = True
    if added:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def candidate_breakdown(scenario: dict[str, Any], config: dict[str, Any], best: PlanResult | None = None) -> Figure:
    """One layout the student set, under the cost model (`plan`), term by term: memory per
    GPU by term against the GPU's capacity, step time by term; beside `best` (a
    PlanResult, the search's fastest) when given. Prints the same figures. It evaluates the
    layouts it is given and ranks nothing."""
    from ..cost import plan

    r = plan(scenario["model"], scenario["cluster"], scenario["global_batch"],
             scenario.get("seq_len"), **config, **scenario.get("assumptions", {}))
    rows = [("yours", r)] + ([("fastest", best)] if best is not None else [])
    for name, x in rows:
        m, t = x.memory, x.time
        print(f"{name:8s} {x.label}\n"
              f"         memory per GPU: weights {m.params / GB:.1f} + gradients {m.grads / GB:.1f} + "
              f"optimizer {m.optimizer / GB:.1f} + activations {m.activations / GB:.1f} = "
              f"{m.total / GB:.1f} GB of {x.capacity / GB:.0f} ({'fits' if x.fits else 'does NOT fit'})\n"
              f"         step: compute {t.compute:.2f} + tp {t.tp_comm:.2f} + pp {t.pp_comm:.2f} + "
              f"dp {t.dp_comm:.2f} + bubble {t.bubble:.2f} = {t.total:.2f} s "
              f"(bubble {x.bubble_fraction:.1%} of the step)")
    if best is not None:
        print(f"yours takes {r.time.total / best.time.total:.2f}x the fastest step")
    fig = Figure(figsize=(11.0, 2.2 + 0.5 * len(rows)), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.3, 2.2])
    draw_memory_bars([(n, x.memory) for n, x in rows], r.capacity, ax=left, title="memory per GPU")
    draw_time_breakdown([(n, x.time) for n, x in rows], ax=right, title="step time by term")
    return fig
