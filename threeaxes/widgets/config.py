"""Config explorer: model and cluster -> the ranked table of feasible (dp, tp, pp)."""
from __future__ import annotations

import html
from typing import NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import MODELS, get_cluster, search
from ..cost.memory import GB
from ..display import plan_table_html
from ..plots import draw_memory_bars, draw_time_breakdown
from .base import _CLUSTERS, _MODEL_OPTIONS, _WIDE, _Explorer


class ConfigData(NamedTuple):
    rows: list           # the best fitting PlanResults, ranked
    chosen: object       # the PlanResult whose breakdown is drawn
    n_valid: int         # configurations that satisfy every constraint
    n_fitting: int       # of those, how many fit in memory
    model: object
    cluster: object
    global_batch: int
    seq_len: int


class ConfigExplorer(_Explorer):
    """Model and cluster -> every valid (dp, tp, pp, ...) ranked; one's breakdown."""

    title = "Configuration explorer"

    def __init__(self, **initial):
        c = {
            "model": widgets.Dropdown(options=_MODEL_OPTIONS, value="llama2-70b",
                                      description="model"),
            "cluster": widgets.Dropdown(options=_CLUSTERS, description="cluster"),
            "n_gpus": widgets.Dropdown(options=[8, 16, 32, 64, 128, 256, 512, 1024], value=64,
                                       description="GPUs"),
            "global_batch": widgets.Dropdown(options=[32, 64, 128, 256, 512, 1024, 2048],
                                             value=512, description="global batch (seqs)",
                                             style=_WIDE),
            "seq_len": widgets.Dropdown(options=[1024, 2048, 4096, 8192], value=4096,
                                        description="seq_len"),
            "rows": widgets.IntSlider(10, min=3, max=30, description="rows", style=_WIDE),
            "pick": widgets.IntSlider(1, min=1, max=30, description="show row", style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["cluster"], c["n_gpus"]]),
                widgets.HBox([c["global_batch"], c["seq_len"]]),
                widgets.HBox([c["rows"], c["pick"]])]
        self.table = widgets.HTML()
        self._cache = {}
        c["pick"].max = c["rows"].value

        def follow_rows(change):
            c["pick"].max = change["new"]      # clamps "pick" into range
        c["rows"].observe(follow_rows, names="value")
        super().__init__(c, rows, initial)

    def _extra_views(self):
        return [self.table]

    def _clear_extra(self):
        self.table.value = ""

    def _search(self, key):
        if key not in self._cache:
            model_key, cluster_key, n_gpus, batch, seq_len = key
            cluster = get_cluster(cluster_key, n_gpus=n_gpus)
            self._cache[key] = (cluster, search(MODELS[model_key], cluster, batch, seq_len))
            if len(self._cache) > 16:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]

    def compute(self) -> ConfigData:
        v = self.values()
        model = MODELS[v["model"]]
        key = (v["model"], v["cluster"], v["n_gpus"], v["global_batch"], v["seq_len"])
        cluster, results = self._search(key)
        if not results:
            raise ValueError(f"no (dp, tp, pp) satisfies the constraints for "
                             f"global_batch={v['global_batch']} on {v['n_gpus']} GPUs; "
                             "choose a global batch that more dp degrees divide")
        fitting = [r for r in results if r.fits]
        if not fitting:
            lightest = min(results, key=lambda r: r.memory.total)
            raise ValueError(
                f"nothing fits: the lightest valid configuration ({lightest.label}) needs "
                f"{lightest.memory.total / GB:.1f} GB per GPU of {cluster.hbm_bytes / GB:.0f} GB; "
                "add GPUs or shorten seq_len")
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
                f"MFU {r.mfu:.1%}.")

    def draw(self, d: ConfigData) -> Figure:
        self.table.value = plan_table_html(d.rows, d.chosen)
        fig = Figure(figsize=(11.0, 3.4), layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=[1.3, 2.2])
        draw_memory_bars([("chosen", d.chosen.memory)], d.chosen.capacity, ax=left,
                         title="memory per GPU")
        best = d.rows[:5]
        if d.chosen not in best:
            best = best + [d.chosen]
        draw_time_breakdown([(f"#{d.rows.index(r) + 1} (dp, tp, pp) = ({r.dp}, {r.tp}, {r.pp})",
                              r.time) for r in best],
                            ax=right, title="step time by term (rows of the table)")
        return fig
