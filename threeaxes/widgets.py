"""Calculators students move: the bubble, memory and configuration explorers.

Each explorer is a class with a pure step, ``compute()``, that turns the
controls' values into the data to draw (tests check it without rendering),
and a drawing step that renders it with matplotlib into an
``ipywidgets.Output``. A combination that breaks a constraint shows a plain
message in the widget, saying what to change, never a traceback.

    BubbleExplorer()   p, m, v, schedule -> bubble fraction, overhead, timeline
    MemoryExplorer()   model, precision, dp/tp/pp, ZeRO, recompute, s, b -> bars
    ConfigExplorer()   model and cluster -> ranked feasible (dp, tp, pp, ...) table

Display one by making it the last expression of a cell, or ``.widget``.
``explorer.set(name=value, ...)`` moves several controls and redraws once.
"""
from __future__ import annotations

import html
from typing import NamedTuple

import ipywidgets as widgets
from IPython.display import display
from matplotlib.figure import Figure

from .cost import (MODELS, RECOMPUTE, MemoryBreakdown, bubble_fraction, bubble_overhead,
                   custom_model, get_cluster, search, stage_memory)
from .cost.memory import GB
from .plots import (FigureDisplay, draw_memory_bars, draw_time_breakdown, draw_timeline,
                    plan_table_html, schedule_timeline)

__all__ = ["BubbleExplorer", "MemoryExplorer", "ConfigExplorer", "BubbleData",
           "MemoryData", "ConfigData"]

_WIDE = {"description_width": "initial"}
_CLUSTERS = [("A100 80GB nodes", "a100-80gb"), ("H100 80GB nodes", "h100-80gb")]
_MODEL_OPTIONS = [(f"{m.name} ({m.n_params / 1e9:.1f}B)", key) for key, m in MODELS.items()]


class _Explorer:
    """Controls, a message line and a plot; subclasses give compute/draw/summary."""

    title = ""

    def __init__(self, controls: dict, rows: list, initial: dict):
        self.controls = controls
        self.message = widgets.HTML()
        self.output = widgets.Output()
        self.data = None          # what compute() returned last (None when invalid)
        self.error = None         # the message shown instead, when invalid
        self.figure = None        # the matplotlib Figure drawn last
        self._hold = False
        self.widget = widgets.VBox([widgets.HTML(f"<b>{self.title}</b>"), *rows,
                                    self.message, *self._extra_views(), self.output])
        for name, control in controls.items():
            control.observe(self._on_change, names="value")
        unknown = set(initial) - set(controls)
        if unknown:
            raise ValueError(f"unknown controls {sorted(unknown)}; choose from {sorted(controls)}")
        self.set(**initial)

    def _extra_views(self):
        return []

    def _on_change(self, change):
        if not self._hold:
            self.update()

    def set(self, **values):
        """Move several controls, then recompute and redraw once."""
        self._hold = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._hold = False
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def update(self):
        try:
            data = self.compute()
        except ValueError as exc:
            # an invalid combination: say what to change, draw nothing
            self.data, self.error, self.figure = None, str(exc), None
            self.message.value = (f'<div style="color:#a0302a">{html.escape(str(exc))}</div>')
            self.output.clear_output()
            self._clear_extra()
            return
        self.data, self.error = data, None
        self.message.value = self.summary(data)
        self.figure = self.draw(data)
        self.output.clear_output(wait=True)
        with self.output:
            display(FigureDisplay(self.figure))

    def _clear_extra(self):
        pass

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


# ---------------------------------------------------------------- bubble ----

class BubbleData(NamedTuple):
    pp: int
    micro_batches: int
    virtual_stages: int
    schedule: str
    fraction: float      # idle share of the step's wall time
    overhead: float      # idle time over ideal compute time (Megatron's ratio)
    timeline: object     # threeaxes.plots.TimelineData


class BubbleExplorer(_Explorer):
    """p, m, v and the schedule -> bubble fraction, overhead and a timeline."""

    title = "Pipeline bubble explorer"

    def __init__(self, **initial):
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
                f"<b>{d.overhead:.1%}</b> &nbsp; <small>timeline: {d.timeline.source}, "
                f"measured idle {d.timeline.idle_fraction:.1%}</small>")

    def draw(self, d: BubbleData) -> Figure:
        return draw_timeline(d.timeline)


# ---------------------------------------------------------------- memory ----

class MemoryData(NamedTuple):
    model: object                 # threeaxes.cost.Model
    bars: list                    # [(label, MemoryBreakdown)] one per pipeline stage shown
    capacity: float               # bytes per GPU
    fits: bool                    # every stage shown fits
    worst: MemoryBreakdown        # stage 0, the fullest


class MemoryExplorer(_Explorer):
    """Model, precision, dp/tp/pp, ZeRO, recompute, s, b -> bytes per GPU by term.

    Activations assume 1F1B with at least p micro-batches: stage r holds
    p - r in flight (stage 0 holds p; Korthikanti et al. 2022, Section 4.2.3).
    Korthikanti's bytes are for 16-bit activations; "fp32" doubles them.
    """

    title = "Memory per GPU explorer"

    def __init__(self, **initial):
        c = {
            "model": widgets.Dropdown(options=_MODEL_OPTIONS + [("custom shape", "custom")],
                                      value="llama2-13b", description="model"),
            "n_layers": widgets.IntSlider(40, min=2, max=128, description="layers", style=_WIDE),
            "d_model": widgets.IntSlider(5120, min=256, max=16384, step=256,
                                         description="d_model", style=_WIDE),
            "n_heads": widgets.IntSlider(40, min=1, max=128, description="heads", style=_WIDE),
            "gpu": widgets.Dropdown(options=[("A100 80GB", "a100-80gb"),
                                             ("H100 80GB", "h100-80gb")], description="GPU"),
            "precision": widgets.Dropdown(options=["mixed", "fp32"], description="precision"),
            "dp": widgets.IntSlider(1, min=1, max=64, description="dp", style=_WIDE),
            "tp": widgets.IntSlider(1, min=1, max=16, description="tp", style=_WIDE),
            "pp": widgets.IntSlider(1, min=1, max=32, description="pp", style=_WIDE),
            "zero_stage": widgets.Dropdown(options=[0, 1, 2, 3], description="ZeRO stage",
                                           style=_WIDE),
            "recompute": widgets.Dropdown(options=list(RECOMPUTE), description="recompute"),
            "sequence_parallel": widgets.Checkbox(False, description="sequence parallel"),
            "seq_len": widgets.Dropdown(options=[512, 1024, 2048, 4096, 8192, 16384, 32768],
                                        value=4096, description="seq_len"),
            "micro_batch": widgets.IntSlider(1, min=1, max=32, description="micro-batch",
                                             style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["gpu"], c["precision"]]),
                widgets.HBox([c["n_layers"], c["d_model"], c["n_heads"]]),
                widgets.HBox([c["dp"], c["tp"], c["pp"]]),
                widgets.HBox([c["zero_stage"], c["recompute"], c["sequence_parallel"]]),
                widgets.HBox([c["seq_len"], c["micro_batch"]])]
        c["model"].observe(self._toggle_custom, names="value")
        self._toggle_custom({"new": c["model"].value}, controls=c)
        super().__init__(c, rows, initial)

    def _toggle_custom(self, change, controls=None):
        c = controls or self.controls
        for name in ("n_layers", "d_model", "n_heads"):
            c[name].disabled = change["new"] != "custom"

    def _model(self):
        v = self.values()
        if v["model"] != "custom":
            return MODELS[v["model"]]
        return custom_model("custom", v["n_layers"], v["d_model"], v["n_heads"],
                            seq_len=v["seq_len"])

    def compute(self) -> MemoryData:
        v = self.values()
        model = self._model()
        stages = stage_memory(model, v["seq_len"], v["micro_batch"], dp=v["dp"], tp=v["tp"],
                              pp=v["pp"], zero_stage=v["zero_stage"], precision=v["precision"],
                              recompute=v["recompute"],
                              sequence_parallel=v["sequence_parallel"])
        pp = v["pp"]
        shown = range(pp) if pp <= 8 else sorted({0, 1, pp // 2, pp - 2, pp - 1})
        bars = [("GPU" if pp == 1 else f"stage {r}", stages[r]) for r in shown]
        capacity = get_cluster(v["gpu"]).hbm_bytes
        return MemoryData(model, bars, capacity, all(t.total <= capacity for _, t in bars),
                          stages[0])

    def summary(self, d: MemoryData) -> str:
        w = d.worst
        verdict = ("<b style='color:#2a7a2a'>fits</b>" if w.total <= d.capacity else
                   f"<b style='color:#a0302a'>does not fit: {(w.total - d.capacity) / GB:.1f} GB "
                   "over</b>")
        return (f"{html.escape(d.model.name)}, {d.model.n_params / 1e9:.1f}B parameters. "
                f"Fullest GPU: {w.params / GB:.1f} params + {w.grads / GB:.1f} grads + "
                f"{w.optimizer / GB:.1f} optimizer + {w.activations / GB:.1f} activations = "
                f"<b>{w.total / GB:.1f} GB</b> of {d.capacity / GB:.0f} GB: {verdict}")

    def draw(self, d: MemoryData) -> Figure:
        return draw_memory_bars(d.bars, d.capacity,
                                title=f"{d.model.name}: bytes per GPU by term")


# ---------------------------------------------------------------- config ----

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
