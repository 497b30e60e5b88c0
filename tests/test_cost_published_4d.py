"""The planner with cp and ep against published runs (threeaxes.cost.published_4d):
Llama 3 405B's Table 4 (Dubey et al. 2024, Section 3.3.2) and a Megatron Core
mixture-of-experts run (Qwen3-235B-A22B on 256 H100s, NVIDIA's Megatron-MoE-ModelZoo).

Each published layout must fit, predict teraFLOP/s per GPU within 15% of the reported
figure and stand within 0.85 of the planner's best among the layouts its era allowed.
Three of the four runs do not, and each is kept as a documented exception below with
the reason the planner gives, tested; no constant was changed to bring them in.
Expected values are the sources' figures typed here; none is the planner's output.
"""

import pytest

from threeaxes.cost import group_link, h100_cluster, layout_strides, search
from threeaxes.cost.published_4d import (LLAMA3_405B_TABLE4, PUBLISHED_4D, QWEN3_235B_MEGATRON,
                                         llama3_405b, llama3_405b_pipeline, model_tflops,
                                         predict_4d, qwen3_235b)

IDS = [r.name for r in PUBLISHED_4D]
LLAMA_8K = {LLAMA3_405B_TABLE4[0].name, LLAMA3_405B_TABLE4[1].name}
# the runs outside the 15% band or below 0.85 of the best, and the test that says why
EXCEPTIONS = LLAMA_8K | {QWEN3_235B_MEGATRON.name}


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


# -- the documented exceptions --------------------------------------------------------------

@pytest.mark.parametrize("run", LLAMA3_405B_TABLE4[:2], ids=sorted(LLAMA_8K))
def test_llama3_8k_rows_are_underpredicted_because_they_must_recompute_or_shard_weights(
        predictions, run):
    """The two 8K rows come out at 0.70-0.73 of the published teraFLOP/s, and their layout
    at 0.60-0.64 of the planner's best. The planner's reason: 8 layer slots per stage at
    34 sbh/t bytes each (Korthikanti et al. 2022, Table 2, with sequence parallelism) and
    16 micro-batches in flight on the first stage hold 73 GB of activations at s = 8192,
    h = 16384, t = 8. Keeping whole FP32 gradients between micro-batches, as Llama 3 does
    (Section 3.3.2; the planner's ZeRO-1 row), adds 19 GB of weights and gradients, so the
    published (tp 8, cp 1, pp 16) fits only with full recomputation (a third more compute)
    or with the weights sharded too (ZeRO-3, which all-gathers them for every micro-batch,
    slower still). Llama 3 names no recomputation; however it fitted is outside the model.
    The planner's best, cp = 16 at 8K, stores 1/16 of the activations and needs neither;
    its constant efficiency (0.6 of peak for every GEMM) cannot see what splitting 8192
    tokens 16 ways costs the GEMMs, so it prefers that more than a measurement would."""
    p = predictions[run.name]
    assert 0.65 <= p.ratio < 0.85 and 0.55 <= p.share_of_best < 0.85
    assert p.published.recompute == "full" and p.published.zero_stage == 1
    cheaper = search(run.model, h100_cluster(run.n_gpus // 8), run.batch, run.seq_len,
                     **{**run.era, "cps": (1,), "recomputes": ("none", "selective")})
    same = [r for r in cheaper if (r.dp, r.tp, r.pp) == (run.dp, run.tp, run.pp) and r.fits]
    assert same and {r.zero_stage for r in same} == {3}
    assert min(r.time.total for r in same) > p.published.time.total
    assert p.best.cp > 1 and p.best.recompute != "full"


def test_qwen3_moe_run_is_underpredicted_because_its_expert_gradients_cross_nodes(predictions):
    """The MoE run comes out at 0.45 of the published 276 teraFLOP/s and its layout at 0.42
    of the planner's best. The planner's reason is the data-parallel exchange: with ep = 8
    and expert TP 1, each rank's experts are 28.4B parameters; under Megatron FSDP (ZeRO-3)
    every micro-batch all-gathers them twice and reduce-scatters their FP32 gradients (the
    planner prices every ZeRO exchange at the gradients' 4 bytes) over
    the expert data-parallel group edp = 32, whose ranks sit one per node (stride 8), so
    at one 50 GB/s NIC that is 27 s of the predicted 40 s, more than the published 17.6 s
    step. Megatron must move fewer bytes or hide them (BF16 gathers, keeping weights
    gathered across micro-batches, overlap with compute; the ModelZoo row does not say).
    The planner's best spreads the experts over ep = 128 so that each rank holds 16 times
    fewer of them."""
    p = predictions[QWEN3_235B_MEGATRON.name]
    assert 0.35 <= p.ratio < 0.6 and 0.35 <= p.share_of_best < 0.85
    r = p.published
    assert r.time.dp_comm > r.time.compute and r.time.dp_comm > 0.5 * r.time.total
    g = layout_strides(r.tp, r.cp, r.dp, r.pp, ep=r.ep, etp=r.etp)
    assert g["edp"] == (8, 32)
    assert not group_link(h100_cluster(32), *g["edp"]).inside_node
    assert p.best.ep > r.ep
