"""Published runs with more than three axes, and the planner's prediction for each."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from .experts import MoE
from .planner import search
from .presets import Model, custom_model, h100_cluster
from .published import Prediction

__all__ = ["Published4D", "LLAMA3_405B_TABLE4", "QWEN3_235B_MEGATRON", "PUBLISHED_4D",
           "QWEN3_MODELZOO_HELD_OUT", "qwen3_235b_pipeline",
           "llama3_405b", "llama3_405b_pipeline", "qwen3_235b", "model_tflops",
           "Prediction4D", "predict_4d"]

H100_BF16_PEAK = 989e12        # H100 SXM datasheet, dense BF16


def llama3_405b() -> Model:
    """Llama 3 405B (Dubey et al. 2024, Table 3): 126 layers, model dimension 16,384,
    FFN 53,248, 128 attention heads, 8 key/value heads, vocabulary 128,256."""
    return custom_model("Llama 3 405B", 126, 16384, 128, vocab_size=128256, seq_len=8192,
                        learned_positions=False, n_kv_heads=8, ffn_hidden=53248,
                        gated_mlp=True, biases=False, norm="rmsnorm", tied_embeddings=False,
                        final_norm=True)


def llama3_405b_pipeline() -> Model:
    """The same parameters laid out as Llama 3's pipeline sees them: 128 layer slots
    (Section 3.3.2: the first and last stage give a layer's slot to the embedding
    and the output layer)."""
    return replace(llama3_405b(), n_layers=128, name="Llama 3 405B (128 pipeline slots)",
                   embedding_slot=True)


QWEN3_MOE = MoE(n_experts=128, top_k=8, expert_hidden=1536)


def qwen3_235b() -> Model:
    """Qwen3-235B-A22B with its real parameter count: the query projection is
    4096 x 8192 (64 heads of 128), wider than the hidden size, which
    ``transformer_params`` cannot express, so the count is written out here."""
    h, l, v, e = 4096, 94, 151936, QWEN3_MOE
    attention = h * 8192 + 2 * h * 512 + 8192 * h + 2 * 128      # Q, K, V, O, q/k norms
    per_layer = attention + 2 * h + e.n_experts * e.per_expert(h) + h * e.n_experts
    n_params = l * per_layer + 2 * v * h + h                     # + embedding, output, norm
    return Model("Qwen3-235B-A22B", l, h, 64, v, 4096, n_params, l * per_layer, 4, None,
                 source="Qwen3 Technical Report, Table 2; released config", moe=e)


# the query width of each model (heads x head size) for the attention FLOPs
ATTENTION_WIDTH = {"Llama 3 405B": 16384, "Qwen3-235B-A22B": 8192}


class Published4D(NamedTuple):
    name: str
    model: Model               # what the planner plans (Llama 3: the 128 slots)
    flops_model: Model         # what the FLOPs are counted on (Llama 3: the 126 layers)
    n_gpus: int
    seq_len: int
    batch: int                 # sequences per step
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int | None
    tflops_per_gpu: float      # published
    source: str
    era: dict                  # what the run's framework allowed (search's options)
    causal_attention: bool     # the source counts attention FLOPs for a causal mask


LLAMA3_ERA = dict(compute_efficiency=0.6, precision="megatron-bf16", allow_sharded_pp=True,
                  activation_count="as_built",
                  flash_attention=True, interleave="flexible", micro_batch_sizes=(1,),
                  cps=(1, 2, 4, 8, 16), cp_modes=("all_gather",))

# Dubey et al. 2024, Table 4: GPUs, TP, CP, PP, DP, sequence, batch per DP, tokens per
# batch (16M), teraFLOP/s per GPU (BF16 MFU 43%, 41%, 38%)
LLAMA3_405B_TABLE4 = tuple(
    Published4D(f"Llama 3 405B, {n} GPUs, {s // 1024}K", llama3_405b_pipeline(), llama3_405b(),
                n, s, dp * per_dp, dp, 8, 16, cp, 1, None, tflops,
                "Dubey et al. 2024, Section 3.3.2, Table 4", LLAMA3_ERA, False)
    for n, cp, dp, s, per_dp, tflops in ((8192, 1, 64, 8192, 32, 430.0),
                                         (16384, 1, 128, 8192, 16, 400.0),
                                         (16384, 16, 8, 131072, 16, 380.0)))

# The ModelZoo's benchmarking config (model_configs/benchmarking/Qwen3-235B-A22B.yaml) turns on
# --overlap-grad-reduce and --overlap-param-gather: the data-parallel exchange hides behind
# the compute beside it (dp_overlap=1.0); with --bf16 Megatron-LM reduces gradients in fp32
# and gathers the bf16 weights ("megatron-bf16").
MEGATRON_MOE_ERA = dict(compute_efficiency=0.6, precision="megatron-bf16", flash_attention=True,
                        dp_overlap=1.0,
                        interleave="flexible", micro_batch_sizes=(4,), recomputes=("full",),
                        zero_stages=(3,), eps=(1, 2, 4, 8, 16, 32, 64, 128), etps=(1, 2, 4, 8),
                        sequence_parallel=(True,))

MODELZOO_QWEN3 = "NVIDIA Megatron-MoE-ModelZoo, best_practice/Qwen3/readme.md"

QWEN3_235B_MEGATRON = Published4D(
    "Qwen3-235B-A22B, 256 GPUs", qwen3_235b(), qwen3_235b(), 256, 4096, 2048, 128, 2, 1, 1, 8, 1,
    276.0, f"{MODELZOO_QWEN3} (intra-node EP, FSDP)", MEGATRON_MOE_ERA, True)

PUBLISHED_4D = LLAMA3_405B_TABLE4 + (QWEN3_235B_MEGATRON,)


def qwen3_235b_pipeline() -> Model:
    """Qwen3-235B-A22B as a pipeline of 96 layer slots: its 94 layers, the embedding in
    the first slot and the output layer and loss in the last (Megatron-LM's
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split),
    so that 8 stages of 4 chunks or 32 stages of 3 split it evenly."""
    return replace(qwen3_235b(), n_layers=96, name="Qwen3-235B-A22B (96 pipeline slots)",
                   embedding_slot=True)


def _modelzoo_row(label: str, tp: int, ep: int, pp: int, dp: int, recompute: str, tflops: float) -> Published4D:
    era = dict(MEGATRON_MOE_ERA, micro_batch_sizes=(1,), recomputes=(recompute,), zero_stages=(1,),
               eps=(ep,), etps=(1,))
    return Published4D(f"Qwen3-235B-A22B, 256 GPUs, {label}", qwen3_235b_pipeline(), qwen3_235b(),
                       256, 4096, 2048, dp, tp, pp, 1, ep, 1, tflops,
                       MODELZOO_QWEN3, era, True)


# The same table's rows without FSDP, held out: printed beside the run above
# (benchmarks/published_runs.py) and tested, not used to set anything. Megatron's
# distributed optimizer (ZeRO-1), micro-batch 1, expert TP 1; "norm, act" recomputation is
# the planner's "selective" (it frees memory, costs no modelled time).
QWEN3_MODELZOO_HELD_OUT = (
    _modelzoo_row("DeepEP, EP 32 across nodes", 2, 32, 8, 16, "selective", 245.0),
    _modelzoo_row("all-to-all, PP 32", 2, 8, 32, 4, "selective", 200.0),
    _modelzoo_row("DeepEP, TP 4", 4, 8, 8, 8, "none", 167.0),
)


def model_tflops(run: Published4D, seconds: float) -> float:
    """teraFLOP/s per GPU of model FLOPs over ``seconds`` per step: 6 x active
    parameters per token plus attention, 12 l w s per token (Chowdhery et al.
    2022, App. B), half of it where the source counts a causal mask; w is the
    query width."""
    m = run.flops_model
    w = ATTENTION_WIDTH[m.name]
    per_token = 6 * m.active_params + (6 if run.causal_attention else 12) * m.n_layers * w * run.seq_len
    return run.batch * run.seq_len * per_token / (seconds * run.n_gpus) / 1e12


# The same record as the dense runs' (run, the published layout's result, the best of everything
# the era allowed, the predicted teraFLOP/s per GPU), with its ratio and share of the best.
Prediction4D = Prediction


def predict_4d(run: Published4D, **assumptions: Any) -> Prediction4D:
    """Search everything ``run.era`` allows on H100 nodes; return the fastest
    fitting configuration with the published (dp, tp, pp, cp, ep, etp) beside the
    best overall.

    Llama 3 405B (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv
    2407.21783, Section 3.3.2 and Table 4): tensor, context, pipeline and data
    parallelism on H100 80GB GPUs, eight per server on NVLink, 400 Gb/s RoCE
    per GPU between servers (Section 3.3.1), BF16 peak 989 teraFLOP/s (MFU 38-43%
    in the table is teraFLOP/s over that peak). Section 3.3.2 fixes what the
    table does not: FSDP sharding the optimizer states and gradients with
    pipelining (ZeRO-2 with pp, ``allow_sharded_pp``); gradients accumulated and
    reduce-scattered in FP32 (4 bytes per gradient: ``precision="megatron-bf16"``);
    context parallelism by all-gathering the keys and values (``cp_mode=
    "all_gather"``) with the load-balanced split into 2 cp chunks; an interleaved
    schedule with a tunable number of micro-batches (Megatron Core's flexible
    group: ``interleave="flexible"``); the first and last pipeline stages each
    hold one layer fewer, the embedding and the output layer taking their slots, so
    the 126 layers fill 128 slots, 8 on each of 16 stages. The planner sees those
    128 equal slots (``llama3_405b_pipeline``): it times the bottleneck stage's 8
    layers and counts parameters and FLOPs for the real 126; the first slot, the
    embedding, keeps no layer's activations (``Model.embedding_slot``). "The first
    model chunk on the first stage has only the embedding" makes a chunk one slot,
    V = 8; the planner is left to choose V and picks 8 where 4 would not fit.
    Section 3.3.2 also says the 8K stage ran "without activation checkpointing":
    the planner counts a layer's activations as Megatron Core builds a SwiGLU layer
    (``activation_count="as_built"``: 31.75 sbh/t with sequence parallelism, where
    Korthikanti et al.'s GPT layer keeps 34) and so fits the published layouts
    without recomputation, within 5% of the 80 GB, as the paper's care with memory
    suggests; with the GPT layer's count they would have to recompute. The micro-batch is one
    sequence (not published; with 16 or 32 sequences per replica and 16 stages the
    pipeline needs them all as micro-batches). Llama 3 numbers its ranks TP, CP,
    PP, DP (Section 3.3.2, pipeline inside data parallelism); the planner uses
    Megatron-LM's tp-cp-(ep)-dp-pp. With tp = 8 filling a server, every cp, pp and
    dp group of these runs has one member per server in either order, so each
    reaches the same link.

    The mixture of experts: Qwen3-235B-A22B trained with Megatron Core on 256 H100s
    (NVIDIA's Megatron-MoE-ModelZoo, best_practice/Qwen3/readme.md, "Intra-node EP
    strategy", the DeepEP row with Megatron FSDP): sequence 4096, TP 2, CP 1, EP 8,
    PP 1, expert TP 1, expert DP 32, DP 128, FSDP on (ZeRO-3), micro-batch 4, global
    batch 2048, full recomputation, 17.6 s per step, 276 teraFLOP/s per GPU. Its
    shape (Qwen3 Technical Report, Yang et al. 2025, Table 2, and the released
    config): 94 layers, hidden 4096, 64 query heads of 128 (a query width of 8192,
    twice the hidden size) and 4 key/value heads, 128 experts of width 1536, top 8,
    vocabulary 151,936, untied.

    Throughput is compared in each source's unit, teraFLOP/s per GPU of model
    FLOPs: 6 x active parameters per token (Chowdhery et al. 2022, App. B) plus
    attention, w being the query width. Llama 3 reports MFU, the measure Chowdhery
    et al. define (App. B: 6N + 12 l w s per token, attention over the whole
    sequence), and does not say otherwise: that count. Megatron counts causal
    attention, half of it: its 276 teraFLOP/s over 17.6 s per step is 1.48e11 FLOPs
    per token, where 6 N_active + 6 l w s gives 1.52e11 and 6 N_active + 12 l w s
    1.71e11. Either way the planner's time charges the full 12 l h s.
    """
    options = {**run.era, **assumptions}
    cluster = h100_cluster(run.n_gpus // 8)
    results = search(run.model, cluster, run.batch, run.seq_len, **options)
    same = [r for r in results
            if (r.dp, r.tp, r.pp, r.cp, r.ep) == (run.dp, run.tp, run.pp, run.cp, run.ep)
            and (r.etp or r.tp) == (run.etp or run.tp)]
    if not same:
        raise ValueError(f"the planner finds no valid configuration with the published layout "
                         f"of {run.name}")
    # the dense runs' record, holding a Published4D where they hold a PublishedRun
    return Prediction4D(run, same[0], results[0], model_tflops(run, same[0].time.total))  # type: ignore[arg-type]
