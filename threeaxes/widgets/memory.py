"""Memory explorer: model, precision, dp/tp/pp (and cp, ep), ZeRO, recompute -> bytes per GPU."""
from __future__ import annotations

import html
from typing import Any, NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import (
    RECOMPUTE,
    MemoryBreakdown,
    context_violations,
    custom_model,
    expert_violations,
    get_cluster,
    stage_memory,
)
from ..cost.cp_ep_terms import state_bytes
from ..cost.memory import GB
from ..cost.presets import Model
from ..plots import draw_memory_bars
from .base import _CP_CHOICES, _EP_CHOICES, _MODEL_OPTIONS, _MOE_OPTIONS, _WIDE, _Explorer, _preset


class MemoryData(NamedTuple):
    model: Model                  # threeaxes.cost.Model
    bars: list[tuple[str, MemoryBreakdown]]  # [(label, MemoryBreakdown)] one per pipeline stage shown
    capacity: float               # bytes per GPU
    fits: bool                    # every stage shown fits
    worst: MemoryBreakdown        # stage 0, the fullest


class MemoryExplorer(_Explorer[MemoryData]):
    """Model, precision, dp/tp/pp, ZeRO, recompute, s, b -> bytes per GPU by term.

    Activations assume 1F1B with at least p micro-batches: stage r holds
    p - r in flight (stage 0 holds p; Korthikanti et al. 2022, Section 4.2.3).
    Korthikanti's bytes are for 16-bit activations; "fp32" doubles them.

    Beyond three axes, as ``plan`` counts them (``cost.cp_ep_terms``): ``cp``
    splits each sequence, so every rank stores the activations of s/cp tokens,
    and the ZeRO shards spread over the dp x cp ranks that hold the same
    weights; ``ep`` splits a mixture of experts' expert weights (Mixtral 8x7B)
    over ep ranks, each expert kept whole (etp = tp), their optimizer shards over
    the experts' data-parallel ranks. Activations keep the GPT layer's count for
    a mixture of experts, as the planner does. cp = ep = 1 is the three-axis view.
    """

    title = "Memory per GPU explorer"

    def __init__(self, **initial: Any) -> None:
        c = {
            "model": widgets.Dropdown(options=_MODEL_OPTIONS + _MOE_OPTIONS
                                      + [("custom shape", "custom")],
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
            # beyond three axes: 1 leaves the three-axis view as it was
            "cp": widgets.Dropdown(options=_CP_CHOICES, value=1,
                                   description="cp (sequence split)", style=_WIDE),
            "ep": widgets.Dropdown(options=_EP_CHOICES, value=1,
                                   description="ep (experts split)", style=_WIDE),
        }
        rows = [widgets.HBox([c["model"], c["gpu"], c["precision"]]),
                widgets.HBox([c["n_layers"], c["d_model"], c["n_heads"]]),
                widgets.HBox([c["dp"], c["tp"], c["pp"]]),
                widgets.HBox([c["zero_stage"], c["recompute"], c["sequence_parallel"]]),
                widgets.HBox([c["seq_len"], c["micro_batch"], c["flash_attention"]]),
                widgets.HBox([c["cp"], c["ep"]])]
        c["model"].observe(self._toggle_custom, names="value")
        self._toggle_custom({"new": c["model"].value}, controls=c)
        super().__init__(c, rows, initial)

    def _toggle_custom(self, change: dict[str, Any], controls: dict[str, Any] | None = None) -> None:
        c = controls or self.controls
        for name in ("n_layers", "d_model", "n_heads"):
            c[name].disabled = change["new"] != "custom"

    def _model(self) -> Model:
        v = self.values()
        if v["model"] != "custom":
            return _preset(v["model"])
        return custom_model("custom", v["n_layers"], v["d_model"], v["n_heads"],
                            seq_len=v["seq_len"])

    def compute(self) -> MemoryData:
        v = self.values()
        model = self._model()
        cp, ep, tp = v["cp"], v["ep"], v["tp"]
        _check_cp_ep(model, v)
        # each rank holds s/cp tokens of every sequence: its activations are those of s/cp
        stages = stage_memory(model, v["seq_len"] // cp, v["micro_batch"], dp=v["dp"], tp=tp,
                              pp=v["pp"], zero_stage=v["zero_stage"], precision=v["precision"],
                              recompute=v["recompute"],
                              sequence_parallel=v["sequence_parallel"],
                              flash_attention=v["flash_attention"])
        if cp > 1 or model.expert_params:
            # the planner's states: dense weights sharded over dp x cp, experts split by ep
            # and sharded over their own data-parallel ranks (cost.cp_ep_terms)
            states = state_bytes(model, dp=v["dp"], tp=tp, pp=v["pp"], cp=cp, ep=ep, etp=tp,
                                 zero_stage=v["zero_stage"], precision=v["precision"])
            stages = [MemoryBreakdown(states.params, states.grads, states.optimizer,
                                      t.activations, states.total + t.activations)
                      for t in stages]
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
                f"<b>{w.total / GB:.1f} GB</b> of {d.capacity / GB:.0f} GB: {verdict}"
                + _beyond_note(d.model, self.values()))

    def draw(self, d: MemoryData) -> Figure:
        return draw_memory_bars(d.bars, d.capacity,
                                title=f"{d.model.name}: bytes per GPU by term")


def _check_cp_ep(model: Model, v: dict[str, Any]) -> None:
    """The planner's rules for cp and ep (``constraints.violations``) that a layout without
    a GPU count can break; raises ValueError saying what to change."""
    cp, ep, tp = v["cp"], v["ep"], v["tp"]
    found = []
    if cp > 1:
        # memory is the same whichever way the keys and values travel; the ring's rule
        # (and Llama 3's all-gather's) is the split into 2 cp chunks
        found += [msg for _, msg in context_violations(model.n_heads, model.kv_heads,
                                                       v["seq_len"], cp=cp, tp=tp)]
        if not v["flash_attention"]:
            found.append(f"cp={cp} needs memory-efficient attention (Megatron-LM's context "
                         "parallelism runs on fused attention); tick it or set cp=1")
    if ep > 1 and model.moe is None:
        found.append(f"ep={ep} splits a mixture of experts' experts, and {model.name} is "
                     "dense: pick Mixtral 8x7B or set ep=1")
    else:
        found += [msg for _, msg in expert_violations(model.moe, ep=ep, etp=tp, tp=tp, cp=cp,
                                                      dp=v["dp"])]
    if ep > 1 and tp > 1 and not v["sequence_parallel"]:
        found.append(f"ep={ep} with tp={tp} needs sequence parallelism (Megatron Core's rule "
                     "for experts with tensor parallelism); tick it or set tp=1")
    if found:
        raise ValueError("; ".join(found))


def _beyond_note(model: Model, v: dict[str, Any]) -> str:
    """What cp and ep change, said only when they are on or the model has experts."""
    notes = []
    if v["cp"] > 1:
        notes.append(f"cp={v['cp']}: each GPU keeps the activations of {v['seq_len'] // v['cp']:,} "
                     f"of the sequence's {v['seq_len']:,} tokens")
    if model.expert_params:
        notes.append(f"{model.expert_params / 1e9:.1f}B of the parameters are experts, "
                     f"split over ep={v['ep']}")
    return "" if not notes else ". " + html.escape("; ".join(notes)) + "."
