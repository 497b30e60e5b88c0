"""Memory explorer: model, precision, dp/tp/pp, ZeRO, recompute -> bytes per GPU."""
from __future__ import annotations

import html
from typing import NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import (
    MODELS,
    RECOMPUTE,
    MemoryBreakdown,
    custom_model,
    get_cluster,
    stage_memory,
)
from ..cost.memory import GB
from ..plots import draw_memory_bars
from .base import _MODEL_OPTIONS, _WIDE, _Explorer


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
            # on by default, as in the planner: attention that never stores the s x s scores
            "flash_attention": widgets.Checkbox(True, description="memory-efficient attention",
                                                style=_WIDE),
            "seq_len": widgets.Dropdown(options=[512, 1024, 2048, 4096, 8192, 16384, 32768],
                                        value=4096, description="seq_len"),
            "micro_batch": widgets.IntSlider(1, min=1, max=32, description="micro-batch",
                                             style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["gpu"], c["precision"]]),
                widgets.HBox([c["n_layers"], c["d_model"], c["n_heads"]]),
                widgets.HBox([c["dp"], c["tp"], c["pp"]]),
                widgets.HBox([c["zero_stage"], c["recompute"], c["sequence_parallel"]]),
                widgets.HBox([c["seq_len"], c["micro_batch"], c["flash_attention"]])]
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
                              sequence_parallel=v["sequence_parallel"],
                              flash_attention=v["flash_attention"])
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
