"""Memory per GPU for every pipeline stage: model states plus activations.

Model states come from ``model_state_bytes`` (ZeRO, Rajbhandari et al. 2020)
and are the same on every stage when the layers split evenly. Activations
fall along the pipeline: under 1F1B stage r holds p - r micro-batches in
flight (Korthikanti et al. 2022, Section 4.2.3 and Appendix B, Figure 9), so
stage 0, which also keeps the embedding's dropout masks (Section 4.3), is the
fullest GPU.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .activations import activation_bytes, first_stage_activation_bytes, in_flight_micro_batches
from .constraints import check_model_split
from .memory import PRECISIONS, MemoryBreakdown, model_state_bytes

if TYPE_CHECKING:
    from .presets import Model

__all__ = ["ACTIVATION_SCALE", "stage_memory"]

# Korthikanti et al. count 16-bit activations (2 bytes, 1 for dropout masks);
# training in fp32 stores them in 4 bytes, so twice as many bytes.
ACTIVATION_SCALE = {"mixed": 1.0, "fp32": 2.0, "megatron-fp16": 1.0, "megatron-bf16": 1.0}


def stage_memory(model: Model, seq_len: int, micro_batch: int, *, dp: int = 1, tp: int = 1,
                 pp: int = 1, zero_stage: int = 0, precision: str = "mixed",
                 recompute: str = "none", sequence_parallel: bool = False,
                 micro_batches: int | None = None, schedule: str = "1f1b",
                 virtual_stages: int = 1, flash_attention: bool = False) -> list:
    """Bytes per GPU on each of the pp stages, by term (MemoryBreakdown).

    ``micro_batches`` defaults to pp (enough to fill the pipeline). Stage 0
    uses ``first_stage_activation_bytes`` (with the interleaving factor and
    the embedding terms); stage r > 0 holds ``in_flight_micro_batches`` of
    its L/p layers. ``flash_attention``: attention that never stores the
    s x s scores (``activations.activation_bytes``; default False, the
    paper's formula; the planner's default is True).
    """
    check_model_split(model, tp, pp, zero_stage=zero_stage)
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose precision in {set(PRECISIONS)}")
    m = pp if micro_batches is None else micro_batches
    scale = ACTIVATION_SCALE[precision]
    states = model_state_bytes(model.n_params, dp=dp, tp=tp, pp=pp, zero_stage=zero_stage,
                               precision=precision)
    first = first_stage_activation_bytes(
        seq_len, micro_batch, model.d_model, model.n_heads, n_layers=model.n_layers, tp=tp,
        pp=pp, micro_batches=m, schedule=schedule, virtual_stages=virtual_stages,
        sequence_parallel=sequence_parallel, recompute=recompute, vocab_size=model.vocab_size,
        flash_attention=flash_attention, embedding_slot=model.embedding_slot)
    per_layer = activation_bytes(seq_len, micro_batch, model.d_model, model.n_heads, tp=tp,
                                 sequence_parallel=sequence_parallel,
                                 recompute=recompute, flash_attention=flash_attention).per_layer
    out = []
    for r in range(pp):
        if r == 0:
            acts = first.total * scale
        else:
            acts = (per_layer * model.n_layers / pp * scale * in_flight_micro_batches(
                pp, m, stage=r, schedule=schedule, virtual_stages=virtual_stages))
        out.append(MemoryBreakdown(states.params, states.grads, states.optimizer, acts,
                                   states.total + acts))
    return out
