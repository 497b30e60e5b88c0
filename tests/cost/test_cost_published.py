"""The planner against published runs: Narayanan et al. 2021, Table 1.

Expected values are the paper's (threeaxes.cost.published copies Table 1 row
by row) or worked by hand below; none is the planner's own output pasted back.
"""

import pytest

from threeaxes.cost import (
    SHAPES,
    a100_cluster,
    all_gather_time,
    custom_model,
    get_cluster,
    get_model,
    layer_time,
    logits_time,
    model_state_bytes,
    p2p_time,
    plan,
    search,
)
from threeaxes.cost.published import (
    KORTHIKANTI_2022_TABLE5,
    MEGATRON_2021,
    NARAYANAN_2021_TABLE1,
    NARAYANAN_2021_TABLE2_PTDP,
    OTHER_RUNS,
    achieved_tflops,
    predict,
    predict_iteration,
    predict_other,
    table1_cluster,
    table1_model,
    takeaway1_fastest_split,
)

A100_PEAK = 312e12          # A100 datasheet, BF16 dense; the paper's 312 teraFLOP/s (Section 5)
A100_HBM = 2039e9           # A100 80GB SXM datasheet, bytes/s
ROWS = NARAYANAN_2021_TABLE1
IDS = [f"{r.params_billion}B" for r in ROWS]


# -- the table itself is consistent with the paper's own equations ---------------------

@pytest.mark.parametrize("run", ROWS, ids=IDS)
def test_table1_rows_agree_with_their_own_columns(run):
    # % of peak = teraFLOP/s / 312, rounded to a whole percent
    assert round(100 * run.tflops_per_gpu / 312) == run.percent_peak
    # aggregate petaFLOP/s = per GPU x GPUs (the table rounds per-GPU figures)
    assert run.aggregate_pflops == pytest.approx(run.tflops_per_gpu * run.n_gpus / 1000,
                                                 rel=0.01)
    assert run.n_gpus % (run.tp * run.pp) == 0 and run.batch % run.dp == 0


@pytest.mark.parametrize("run", ROWS, ids=IDS)
def test_table1_models_have_the_published_parameter_count(run):
    # eq. 2: P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h)), V = 51200, s = 2048
    l, h = run.layers, run.hidden
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (51200 + 2048) / (12 * l * h))
    assert table1_model(run).n_params == pytest.approx(eq2, rel=1e-3)
    assert eq2 / 1e9 == pytest.approx(run.params_billion, abs=0.05)   # the table rounds


# -- every row predicted within 10%, feasible, and near the planner's best -------------

@pytest.fixture(scope="module")
def predictions():
    return {f"{r.params_billion}B": predict(r) for r in ROWS}


@pytest.mark.parametrize("key", IDS)
def test_published_configuration_fits(predictions, key):
    p = predictions[key]
    assert (p.published.dp, p.published.tp, p.published.pp) == (p.run.dp, p.run.tp, p.run.pp)
    assert p.published.fits, f"{key}: {p.published.memory.total / 1e9:.1f} GB per GPU"
    assert p.published.recompute == "full"


@pytest.mark.parametrize("key", IDS)
def test_predicted_throughput_within_10_percent_of_published(predictions, key):
    p = predictions[key]
    assert 0.9 <= p.ratio <= 1.1, (f"{key}: predicted {p.tflops_per_gpu:.1f} teraFLOP/s "
                                   f"per GPU, published {p.run.tflops_per_gpu}")


# the one row below 0.85 of its era's best, and why (test_the_18b_row_...)
BELOW_085 = {"18.4B"}


@pytest.mark.parametrize("key", IDS)
def test_published_configuration_near_the_best(predictions, key):
    p = predictions[key]
    assert p.best.fits and p.best.tokens_per_second >= p.published.tokens_per_second
    floor = 0.80 if key in BELOW_085 else 0.85
    assert p.share_of_best >= floor, f"{key}: {p.share_of_best:.3f} of {p.best.label}"


def test_megatron_2021_counts_20_bytes_of_state_per_parameter():
    # Megatron Core User Guide, "Distributed Optimizer": float16 params and grads, no
    # distributed optimizer: 20 bytes per parameter (2 + 2, and 16 in the optimizer: fp32
    # master weights, an fp32 copy of the gradients, Adam's two moments)
    states = model_state_bytes(1e9, precision="megatron-fp16")
    assert (states.params, states.grads, states.optimizer) == (2e9, 2e9, 16e9)
    assert model_state_bytes(1e9, precision="megatron-bf16").total == 18e9
    assert MEGATRON_2021["precision"] == "megatron-fp16"


def test_the_18b_row_is_below_085_only_for_an_interleaved_split_of_the_same_eight_gpus(
        predictions):
    """Why the 18.4B run (t8 p1 d32) stands at 0.83 of the best: the search splits the
    same model-parallel group of 8 GPUs as t = 2, p = 4 with five chunks per GPU.

    - At 20 bytes per parameter (Megatron's fp16 accounting) 18.4B / 4 GPUs holds 92 GB:
      no split over fewer than 8 GPUs fits, so both keep dp = 32 (Narayanan's Takeaway
      #2: the smallest model-parallel size that fits, then data parallelism). With the
      course's 16 bytes the old best, t2 p2 d64 (73.8 GB of states), fit on paper only.
    - Within 8 GPUs the planner times t = 8's 768-wide shards 9% slower than t = 2's and
      charges t = 8 six all-reduces of 16 x 2048 x 6144 activations per layer (1.2 s, 12%
      of its step), while a 4-stage pipeline interleaved over 5 chunks idles 2% of it.
    - Narayanan et al. measured that trade-off only for t p = 64 (Section 5.4.1, Figure
      13), where the planner agrees with them (test_takeaway1_...); at t p = 8 they ran
      no pipeline at all, so no published number says which split is faster. Against the
      planner's best plain-1F1B layout the published row is above 0.85.
    """
    p = predictions["18.4B"]
    assert 0.80 <= p.share_of_best < 0.85
    assert (p.best.dp, p.best.tp * p.best.pp) == (p.run.dp, p.run.tp * p.run.pp) == (32, 8)
    assert p.best.tp < 8 and p.best.virtual_stages > 1
    model = table1_model(p.run)
    assert model_state_bytes(model.n_params, tp=4, precision="megatron-fp16").total > 80e9
    smaller = [r for r in search(model, table1_cluster(p.run), p.run.batch, only_fitting=True,
                                 **MEGATRON_2021) if r.tp * r.pp < 8]
    assert smaller == []
    assert predict(p.run, max_virtual_stages=1).share_of_best >= 0.85


@pytest.mark.parametrize("run", OTHER_RUNS, ids=[r.name for r in OTHER_RUNS])
def test_mt_nlg_and_gpt_neox_are_near_their_eras_best(run):
    p = predict_other(run)
    assert p.published.fits and p.published.zero_stage <= 1
    assert p.share_of_best >= 0.85, f"{run.name}: best is {p.best.label}"


@pytest.mark.parametrize("layers, hidden, heads, batch", [(64, 14336, 112, 32),
                                                          (64, 14336, 112, 128),
                                                          (96, 12288, 96, 32)])
def test_takeaway1_tensor_parallelism_fills_the_node_before_pipelining(layers, hidden, heads,
                                                                       batch):
    # Narayanan et al. 2021, Section 5.4.1, Figure 13: a GPT model of about 160B on 64
    # A100s, t x p = 64, batches of 32 and 128, one chunk per GPU; t = 8 (a whole server)
    # is fastest. The paper's 162.2B shape is not published: these are two GPTs of 159B
    # and 175B whose layer counts every p divides.
    model = custom_model("GPT ~160B", layers, hidden, heads, vocab_size=51200, seq_len=2048)
    best = takeaway1_fastest_split(model, a100_cluster(8), batch, 64)
    assert {2, 4, 8} <= set(best)
    fastest = min(best.values(), key=lambda r: r.time.total)
    assert fastest.tp == 8, {t: round(r.time.total, 2) for t, r in best.items()}


def test_achieved_tflops_is_eq3_over_the_step_time(predictions):
    p = predictions["1.7B"]
    # eq. 3 by hand for the 1.7B row: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    B, s, l, h, V = 512, 2048, 24, 2304, 51200
    flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    assert achieved_tflops(p.published, p.run) == pytest.approx(
        flops / (p.published.time.total * 32) / 1e12)


def test_without_the_shape_model_the_small_runs_are_overpredicted():
    # the constant 0.6 of peak cannot see that a 2304-wide model runs slower:
    # it predicts the 1.7B row far above the published 137 teraFLOP/s
    p = predict(ROWS[0], compute_efficiency=0.6)
    assert p.ratio > 1.15


# -- the planner with the shape model and scatter/gather -------------------------------

def test_shaped_compute_is_the_last_stage_layers_and_head():
    model, cluster = table1_model(ROWS[4]), a100_cluster(64)          # 39.1B, 512 GPUs
    r = plan(model, cluster, 1536, dp=32, tp=8, pp=2, micro_batch=1, recompute="full",
             compute_efficiency=SHAPES, flash_attention=False)
    layer = layer_time(2048, 1, 8192, 64, tp=8, peak_flops=A100_PEAK, hbm_bandwidth=A100_HBM,
                       recompute="full").total
    head = logits_time(2048, 1, 8192, 51200, tp=8, peak_flops=A100_PEAK)
    assert r.micro_batches == 48
    assert r.time.compute == pytest.approx(48 * (48 / 2 * layer + head))


def test_scatter_gather_sends_one_tth_on_infiniband_and_gathers_on_nvlink():
    model, cluster = table1_model(ROWS[4]), a100_cluster(64)
    kw = dict(dp=32, tp=8, pp=2, micro_batch=1, recompute="full")
    plain = plan(model, cluster, 1536, **kw)
    sg = plan(model, cluster, 1536, pp_scatter_gather=True, **kw)
    act = 2 * 2048 * 8192                              # one micro-batch's b s h, 2 bytes
    one = (p2p_time(act / 8, 25e9, 10e-6).total        # its 1/8 on this GPU's HDR card
           + all_gather_time(act, 8, 300e9, 5e-6).total)   # all-gather over NVLink
    assert sg.time.pp_comm == pytest.approx(2 * 48 * one)
    assert plain.time.pp_comm == pytest.approx(2 * 48 * p2p_time(act, 25e9, 10e-6).total)
    assert sg.time.pp_comm < plain.time.pp_comm / 4
    # everything else is unchanged
    assert sg.time.compute == plain.time.compute and sg.time.tp_comm == plain.time.tp_comm


def test_scatter_gather_changes_nothing_without_tensor_parallelism():
    model, cluster = table1_model(ROWS[1]), a100_cluster(8)
    kw = dict(dp=32, tp=1, pp=2, micro_batch=1)
    assert plan(model, cluster, 512, pp_scatter_gather=True, **kw) == plan(model, cluster, 512,
                                                                           **kw)


def test_an_unknown_efficiency_word_says_what_to_give():
    with pytest.raises(ValueError, match="give a fraction in \\(0, 1\\] or 'shapes'"):
        plan(get_model("70B"), get_cluster("a100-80gb", n_gpus=64), 128, dp=8, tp=8,
             micro_batch=1, compute_efficiency="fast")


def test_default_assumptions_are_unchanged():
    # other drops call plan() with defaults: still the constant 0.6 of peak
    model = custom_model("m", 4, 256, 4, seq_len=128)
    r = plan(model, a100_cluster(1), 8, dp=8, micro_batch=1)
    per_token = 6 * model.n_params + 12 * 4 * 256 * 128
    assert r.time.compute == pytest.approx(8 * 128 * per_token / (8 * A100_PEAK * 0.6))


def test_shape_search_and_a_prediction_finish():
    # how fast they run is benchmarks/published_runs.py's figure, not a test's
    model, cluster = get_model("70B"), get_cluster("a100-80gb", n_gpus=64)
    results = search(model, cluster, 1024, compute_efficiency=SHAPES, pp_scatter_gather=True)
    assert results[0].fits
    assert predict(ROWS[-1]) is not None
    assert set(MEGATRON_2021) >= {"compute_efficiency", "recomputes"}


# -- held out: published runs NOT used to fit kernel_time's three constants -----------

@pytest.mark.parametrize("run", NARAYANAN_2021_TABLE2_PTDP,
                         ids=[f"{r.params_billion}B-{r.n_gpus}"
                              for r in NARAYANAN_2021_TABLE2_PTDP])
def test_held_out_table2_ptdp_rows_within_10_percent(run):
    p = predict(run)
    assert p.published.fits and p.published.micro_batch == 1
    assert 0.9 <= p.ratio <= 1.1, (f"predicted {p.tflops_per_gpu:.1f}, "
                                   f"published {run.tflops_per_gpu}")
    assert p.share_of_best >= 0.85


@pytest.mark.parametrize("run", KORTHIKANTI_2022_TABLE5,
                         ids=[r.name for r in KORTHIKANTI_2022_TABLE5])
def test_held_out_korthikanti_iteration_times(run):
    full, present = predict_iteration(run)
    assert full.fits and present.fits
    # iteration seconds within 15%: Megatron's 2022 code hides some TP
    # communication behind the backward pass, which the model does not credit
    assert full.time.total == pytest.approx(run.full_recompute_s, rel=0.15)
    assert present.time.total == pytest.approx(run.present_work_s, rel=0.15)
    # the speed-up of sequence parallelism + selective recomputation over full
    # recomputation (Table 5: 29.0% to 32.1%) within 7% (22B, the worst: 1.38
    # predicted against 1.29; its 8 GPUs spend more on the element-wise work
    # that sequence parallelism splits than the paper measured)
    assert full.time.total / present.time.total == pytest.approx(
        run.full_recompute_s / run.present_work_s, rel=0.07)


def test_memory_efficient_attention_in_the_shaped_layer_time():
    # Dao et al. 2022: no s x s scores reach memory (element-wise bytes lose the 5as^2b/t
    # term) and the backward pass recomputes the attention products once (one more pass)
    kw = dict(tp=8, peak_flops=A100_PEAK, hbm_bandwidth=A100_HBM)
    plain = layer_time(2048, 1, 12288, 96, **kw)
    flash = layer_time(2048, 1, 12288, 96, flash_attention=True, **kw)
    assert flash.attention == pytest.approx(plain.attention * 4 / 3)
    assert flash.dense == plain.dense
    stored = 2048 * 12288 * (10 + 24 / 8) + 5 * 96 * 2048 * 2048 / 8
    linear = 2048 * 12288 * (10 + 24 / 8)
    assert flash.elementwise == pytest.approx(plain.elementwise * linear / stored)
    # with selective recomputation the products are recomputed once either way
    sel = layer_time(2048, 1, 12288, 96, recompute="selective", **kw)
    both = layer_time(2048, 1, 12288, 96, recompute="selective", flash_attention=True, **kw)
    assert both.attention == sel.attention
