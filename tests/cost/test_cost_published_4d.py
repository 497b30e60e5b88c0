"""The planner with cp and ep against published runs (threeaxes.cost.published_4d):
Llama 3 405B's Table 4 (Dubey et al. 2024, Section 3.3.2) and a Megatron Core
mixture-of-experts run (Qwen3-235B-A22B on 256 H100s, NVIDIA's Megatron-MoE-ModelZoo).

Each published layout must fit, predict teraFLOP/s per GPU within 15% of the reported
figure and stand within 0.85 of the planner's best among the layouts its era allowed.
The two 8K rows and the mixture of experts do; the 128K row (21% optimistic) does not,
and is kept as a documented exception below with the reason the planner gives, tested;
no constant was changed to bring it in.
Expected values are the sources' figures typed here; none is the planner's output.
"""

import pytest

from threeaxes.cost import group_link, h100_cluster, layout_strides, plan
from threeaxes.cost.published_4d import (
    LLAMA3_405B_TABLE4,
    PUBLISHED_4D,
    QWEN3_235B_MEGATRON,
    QWEN3_MODELZOO_HELD_OUT,
    llama3_405b,
    llama3_405b_pipeline,
    model_tflops,
    predict_4d,
    qwen3_235b,
)

IDS = [r.name for r in PUBLISHED_4D]
# the runs outside the 15% band or below 0.85 of the best, and the test that says why
EXCEPTIONS = {LLAMA3_405B_TABLE4[2].name}


@pytest.fixture(scope="module")
def predictions():
    return {r.name: predict_4d(r) for r in PUBLISHED_4D}


# -- the sources' own figures agree with each other ----------------------------------------

@pytest.mark.parametrize("run", LLAMA3_405B_TABLE4, ids=[r.name for r in LLAMA3_405B_TABLE4])
def test_table4_rows_agree_with_their_own_columns(run):
    assert run.tp * run.cp * run.pp * run.dp == run.n_gpus
    assert run.batch * run.seq_len == pytest.approx(16e6, rel=0.05)   # "16M" tokens per batch
    # the paper's 38-43% BF16 MFU, over the H100's 989 teraFLOP/s
    assert 0.38 <= run.tflops_per_gpu / 989 < 0.44


def test_llama3_405b_has_405b_parameters_in_128_pipeline_slots():
    # Dubey et al. 2024, Table 3: 405B; Section 3.3.2: first and last stage one layer fewer
    model, slots = llama3_405b(), llama3_405b_pipeline()
    assert 405e9 <= model.n_params < 406e9
    assert slots.n_params == model.n_params and slots.n_layers == model.n_layers + 2 == 128
    assert slots.n_layers % 16 == 0


def test_qwen3_235b_has_235b_parameters_and_22b_active():
    # Qwen3 Technical Report, Table 2: 235B total, 22B activated
    m = qwen3_235b()
    assert m.n_params / 1e9 == pytest.approx(235.1, abs=0.1)
    assert m.active_params / 1e9 == pytest.approx(22.2, abs=0.1)


def test_megatron_counts_causal_attention_in_its_276_teraflops():
    # 276 teraFLOP/s x 256 GPUs x 17.6 s over 2048 x 4096 tokens: 1.48e11 per token
    run = QWEN3_235B_MEGATRON
    assert model_tflops(run, 17.6) == pytest.approx(276, rel=0.05)
    assert run.causal_attention and not LLAMA3_405B_TABLE4[0].causal_attention


# -- the published layouts: fit, throughput, share of the best --------------------------------

@pytest.mark.parametrize("name", IDS)
def test_published_layout_fits(predictions, name):
    p = predictions[name]
    r, run = p.published, p.run
    assert (r.dp, r.tp, r.pp, r.cp, r.ep) == (run.dp, run.tp, run.pp, run.cp, run.ep)
    assert r.fits, f"{name}: {r.memory.total / 1e9:.1f} GB per GPU"


@pytest.mark.parametrize("name", [n for n in IDS if n not in EXCEPTIONS])
def test_predicted_throughput_within_15_percent(predictions, name):
    p = predictions[name]
    assert 0.85 <= p.ratio <= 1.15, (f"{name}: predicted {p.tflops_per_gpu:.0f}, published "
                                     f"{p.run.tflops_per_gpu:.0f} teraFLOP/s per GPU")


@pytest.mark.parametrize("name", [n for n in IDS if n not in EXCEPTIONS])
def test_published_layout_near_the_best_of_its_era(predictions, name):
    p = predictions[name]
    assert p.best.fits and p.share_of_best >= 0.85, f"{name}: best is {p.best.label}"


def test_the_128k_run_uses_context_parallelism_where_the_planner_would(predictions):
    p = predictions[LLAMA3_405B_TABLE4[2].name]
    assert p.published.cp == 16 and p.published.time.cp_comm > 0
    assert p.best.cp == 16                 # the best of its era splits the sequence as well


# -- how the 8K rows fit: as Llama 3 says, without activation checkpointing ----------------

@pytest.mark.parametrize("run", LLAMA3_405B_TABLE4, ids=[r.name for r in LLAMA3_405B_TABLE4])
def test_llama3_rows_fit_without_activation_checkpointing(predictions, run):
    """Dubey et al. 2024, Section 3.3.2: "we could pre-train Llama 3 on sequences of 8K
    tokens without activation checkpointing" (the 128K row keeps 8K tokens per rank with
    cp = 16). The planner agrees, narrowly, counting the layer as Megatron Core builds it
    (31.75 sbh/t, not the GPT layer's 34) and the first chunk of the first stage as the
    embedding alone, which holds no layer's activations."""
    r = predictions[run.name].published
    assert r.fits and r.recompute == "none" and r.zero_stage == 1
    assert r.memory.total > 0.95 * r.capacity          # at the edge, as the paper's care says
    # counted as Korthikanti et al.'s GPT layer, the same layout must recompute
    gpt = plan(run.model, h100_cluster(run.n_gpus // 8), run.batch, run.seq_len, dp=run.dp,
               tp=run.tp, pp=run.pp, cp=run.cp, cp_mode="all_gather", micro_batch=1,
               virtual_stages=r.virtual_stages, sequence_parallel=True, zero_stage=1,
               precision="megatron-bf16", allow_sharded_pp=True)
    assert not gpt.fits


def test_the_8k_row_on_8192_gpus_fits_only_with_one_layer_per_chunk(predictions):
    """The paper's "the first model chunk on the first stage has only the embedding" makes
    a chunk one layer slot: V = 8 chunks of the 8 slots per stage. With 32 micro-batches per
    replica the planner finds the same: with chunks of 2 slots (V = 4) the first stage holds
    127 layer-micro-batches instead of 112 and runs out of memory."""
    run = LLAMA3_405B_TABLE4[0]
    assert predictions[run.name].published.virtual_stages == 8
    four = plan(run.model, h100_cluster(run.n_gpus // 8), run.batch, run.seq_len, dp=run.dp,
                tp=run.tp, pp=run.pp, micro_batch=1, virtual_stages=4, sequence_parallel=True,
                zero_stage=1, precision="megatron-bf16", allow_sharded_pp=True,
                activation_count="as_built")
    assert not four.fits


# -- the documented exceptions --------------------------------------------------------------

def test_the_128k_row_is_overpredicted_because_its_attention_ran_slower_than_flashattention(
        predictions):
    """The 128K row comes out 20% faster than published (1.20), though its layout is the
    planner's best. At 128K attention is 57% of the counted FLOPs (12 l w s of the whole
    sequence per token, PaLM's count, which Llama 3's MFU uses), and the planner charges
    it at 0.6 of peak: 0.30 for the causal half that runs, about FlashAttention-2's 35% on
    an H100 (Shah et al. 2024, FlashAttention-3, abstract). If every other term is right,
    the published 380 teraFLOP/s leave attention 8 s of a 15 s step: about 0.21 of peak
    for the causal work. Llama 3's document masks, which it says make the load uneven
    (Section 3.3.2), and its exposed all-gather are where the planner would look next."""
    run = LLAMA3_405B_TABLE4[2]
    p = predictions[run.name]
    assert 1.15 < p.ratio < 1.25 and p.share_of_best == 1.0
    tokens, w, layers, peak = run.batch * run.seq_len, 16384, 126, 989e12
    per_gpu = tokens / run.n_gpus
    charged = per_gpu * 12 * layers * w * run.seq_len / (peak * 0.6)     # s, whole sequence
    causal = per_gpu * 6 * layers * w * run.seq_len                       # FLOPs that run
    assert causal / charged / peak == pytest.approx(0.30)
    published_s = per_gpu * (6 * llama3_405b().n_params + 12 * layers * w * run.seq_len) / (
        run.tflops_per_gpu * 1e12)
    attention_s = published_s - (p.published.time.total - charged)
    assert causal / attention_s / peak < 0.25 < 0.35


def test_qwen3_fsdp_run_is_set_by_its_expert_weights_crossing_nodes(predictions):
    """The MoE run's step is set by its data-parallel exchange. With ep = 8 and expert TP 1
    each rank holds 28.4B expert weights; Megatron FSDP (ZeRO-3) all-gathers them twice
    each of the 4 micro-batches in bf16 and reduce-scatters their fp32 gradients over the
    expert data-parallel group edp = 32, one rank per node (stride 8), at one 50 GB/s NIC:
    4 x (2 x 1.1 + 2.2) s = 17.6 s, by hand below. The ModelZoo's config overlaps both
    (--overlap-grad-reduce, --overlap-param-gather: ``dp_overlap=1.0``), so what shows is
    the exchange less the compute and the all-to-alls it hides behind. Priced at the
    gradients' 4 bytes, or not overlapped, the same layout predicts 123 teraFLOP/s
    (0.45 of published; the exception this run was before)."""
    p = predictions[QWEN3_235B_MEGATRON.name]
    r = p.published
    g = layout_strides(r.tp, r.cp, r.dp, r.pp, ep=r.ep, etp=r.etp)
    assert g["edp"] == (8, 32)
    assert not group_link(h100_cluster(32), *g["edp"]).inside_node
    experts = 94 * 128 * 3 * 4096 * 1536 / 8                         # weights per rank
    one_ring = 31 / 32 * experts / 50e9                               # s per byte per weight
    exchange = 4 * (2 * 2 * one_ring + 4 * one_ring)                   # 2 bf16 AG + fp32 RS
    assert exchange == pytest.approx(17.6, rel=0.01)
    # the dense weights (attention, norms, router, embeddings; split by tp = 2) go over
    # dp = 128 at stride 2: four members a node drive four NICs, 200 GB/s
    dense = (qwen3_235b().n_params - 94 * 128 * 3 * 4096 * 1536) / 2
    exchange += 4 * (2 * 2 + 4) * 127 / 128 * dense / 200e9
    hidden_behind = r.time.compute + r.time.tp_comm + r.time.ep_comm
    assert r.time.dp_comm == pytest.approx(exchange - hidden_behind, rel=0.03)
    exposed = predict_4d(QWEN3_235B_MEGATRON, dp_overlap=0.0)
    assert exposed.ratio < 0.7


def test_the_held_out_qwen3_rows_the_planner_explains_and_those_it_does_not():
    """Held out, the same table's rows without FSDP (256 H100s, the same model and batch;
    nothing was set from them). The row with experts across nodes (EP 32, DeepEP, 245
    teraFLOP/s) comes within 15%: its all-to-alls leave each node through every GPU's own
    NIC (``network.all_to_all_link``; priced as a ring's parallel channels they were 6 times
    faster and the row came out 1.61). The two with EP 8 inside a node and one sequence per
    micro-batch (a plain all-to-all with PP 32, 200; TP 4 without recomputation, 167) run at
    less than half of what the planner predicts, and no term of it says why: a fixed cost
    per layer and micro-batch of 6 to 9 ms would (they run 1,536 and 3,072 of them against
    the FSDP run's 376), but no source sets one, so none is added."""
    cross_node, plain_a2a, tp4 = (predict_4d(r) for r in QWEN3_MODELZOO_HELD_OUT)
    assert all(p.published.fits for p in (cross_node, plain_a2a, tp4))
    assert 0.85 <= cross_node.ratio <= 1.15
    assert cross_node.published.time.ep_comm > cross_node.published.time.compute
    assert plain_a2a.ratio > 2 and tp4.ratio > 2
