"""The calculators beyond three axes: a cp or ep change moves the memory and
configuration explorers' numbers as plan() and search() say, the defaults
(cp = ep = 1) give the three-axis figures, and broken rules show a message."""
import html

import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.cost import (
    MODELS,
    first_stage_activation_bytes,
    get_cluster,
    model_state_bytes,
    plan,
    search,
    stage_memory,
)
from threeaxes.cost.presets import MOE_MODELS
from threeaxes.widgets import ConfigExplorer, MemoryExplorer

MIXTRAL = MOE_MODELS["mixtral-8x7b"]


def _same(a, b):
    assert tuple(a) == pytest.approx(tuple(b), rel=1e-12)


# ------------------------------------------------------------- defaults ----

def test_the_new_controls_start_at_the_three_axis_view():
    m, c = MemoryExplorer(), ConfigExplorer()
    assert (m.controls["cp"].value, m.controls["ep"].value) == (1, 1)
    assert (c.controls["cp"].value, c.controls["ep"].value) == (1, 1)
    assert c.controls["cp_mode"].value == "ring" and c.controls["cp_mode"].disabled
    c.controls["cp"].value = 2
    assert not c.controls["cp_mode"].disabled


@pytest.mark.parametrize("values", [
    dict(model="llama2-70b", dp=2, tp=8, pp=4, zero_stage=1, recompute="selective",
         sequence_parallel=True),
    dict(model="llama2-13b", dp=8, zero_stage=3, seq_len=16384, micro_batch=2),
    dict(model="gpt3-175b", dp=4, tp=8, pp=16, zero_stage=1, precision="fp32",
         flash_attention=False),
])
def test_memory_defaults_are_stage_memory_as_before(values):
    # the explorer's three-axis numbers were stage_memory's; with cp = ep = 1 they still are,
    # every stage, every term, and the message says nothing of cp or ep
    e = MemoryExplorer(**values)
    v = e.values()
    stages = stage_memory(MODELS[v["model"]], v["seq_len"], v["micro_batch"], dp=v["dp"],
                          tp=v["tp"], pp=v["pp"], zero_stage=v["zero_stage"],
                          precision=v["precision"], recompute=v["recompute"],
                          sequence_parallel=v["sequence_parallel"],
                          flash_attention=v["flash_attention"])
    for label, terms in e.data.bars:
        r = 0 if label == "GPU" else int(label.split()[1])
        _same(terms, stages[r])
    assert "cp=" not in e.message.value and "ep=" not in e.message.value


def test_config_defaults_are_the_three_axis_search():
    e = ConfigExplorer(model="llama2-7b", cluster="h100-80gb", n_gpus=16, global_batch=128,
                       seq_len=2048, rows=6)
    expected = [r for r in search(MODELS["llama2-7b"], get_cluster("h100-80gb", n_gpus=16),
                                  128, 2048) if r.fits]
    assert e.data.rows == expected[:6] and e.data.n_fitting == len(expected)
    assert all((r.cp, r.ep) == (1, 1) for r in e.data.rows)
    labels = [t.get_text() for t in e.figure.axes[1].get_legend().get_texts()]
    assert labels == ["compute", "TP comm", "PP comm", "DP comm", "PP bubble"]
    # cp_mode means nothing at cp = 1: moving it leaves the search as it was
    e.controls["cp_mode"].value = "all_to_all"
    assert e.data.rows == expected[:6]
    # at the lengths the three-axis explorer offered, "nothing fits" says what it said
    e.set(model="llama2-70b", n_gpus=8, seq_len=4096)
    assert e.error.endswith("add GPUs or shorten seq_len")


# ------------------------------------------------------------ cp moves ----

@pytest.mark.parametrize("cp", [2, 4, 8])
def test_memory_cp_divides_the_activations_as_plan_says(cp):
    # Llama-2 7B at 32K tokens; one pipeline stage of p micro-batches is plan's first
    # stage when the global batch gives m = p micro-batches of b sequences
    model, s = MODELS["llama2-7b"], 32768
    layout = dict(dp=2, tp=4, pp=2, zero_stage=1, recompute="selective",
                  sequence_parallel=True)
    e = MemoryExplorer(model="llama2-7b", seq_len=s, cp=cp, **layout)
    n = 2 * 4 * cp * 2
    r = plan(model, get_cluster("h100-80gb", n_gpus=n), 2 * 2, s, cp=cp, micro_batch=1,
             **layout)
    _same(e.data.worst, r.memory)
    # and by hand: the activations are those of s/cp tokens; ZeRO-1 shards the optimizer
    # over the dp x cp ranks holding the same weights (12 bytes a parameter over 2 cp)
    first = first_stage_activation_bytes(s // cp, 1, 4096, 32, n_layers=32, tp=4, pp=2,
                                         micro_batches=2, sequence_parallel=True,
                                         recompute="selective", vocab_size=32000,
                                         flash_attention=True)
    assert e.data.worst.activations == pytest.approx(first.total)
    assert e.data.worst.optimizer == pytest.approx(12 * model.n_params / (4 * 2) / (2 * cp))
    assert f"cp={cp}" in e.message.value and f"{s // cp:,} of" in e.message.value


def test_memory_cp_moves_only_activations_and_the_zero_shards():
    e = MemoryExplorer(model="llama2-7b", dp=4, tp=2, pp=1, seq_len=16384,
                       sequence_parallel=True)
    before = e.data.worst
    e.controls["cp"].value = 4
    after = e.data.worst
    assert (after.params, after.grads, after.optimizer) == (before.params, before.grads,
                                                           before.optimizer)  # ZeRO-0
    assert after.activations == pytest.approx(before.activations / 4)


@pytest.mark.parametrize("mode", ["ring", "all_gather", "all_to_all"])
def test_config_cp_rows_are_plans_with_that_cp(mode):
    model = MODELS["llama2-7b"]
    cluster = get_cluster("a100-80gb", n_gpus=32)
    e = ConfigExplorer(model="llama2-7b", cluster="a100-80gb", n_gpus=32, global_batch=32,
                       seq_len=32768, cp=4, cp_mode=mode, rows=5)
    expected = [r for r in search(model, cluster, 32, 32768, cps=(4,), cp_modes=(mode,))
                if r.fits]
    assert e.data.rows == expected[:5]
    for r in e.data.rows:
        assert (r.cp, r.cp_mode, r.dp * r.tp * r.cp * r.pp) == (4, mode, 32)
    r = e.data.chosen
    again = plan(model, cluster, 32, 32768, dp=r.dp, tp=r.tp, pp=r.pp, cp=4, cp_mode=mode,
                 micro_batch=r.micro_batch, zero_stage=r.zero_stage, recompute=r.recompute,
                 virtual_stages=r.virtual_stages, sequence_parallel=r.sequence_parallel)
    assert again == r
    assert f"{r.time.cp_comm:.2f} s of key/value exchange" in e.message.value
    if r.time.cp_comm > 0:
        legend = [t.get_text() for t in e.figure.axes[1].get_legend().get_texts()]
        assert legend[-1] == "CP comm"


def test_config_cp_makes_a_long_sequence_fit():
    # 128K tokens of Llama-2 70B on 64 H100s: no three-axis layout fits, cp=8 layouts do
    values = dict(model="llama2-70b", cluster="h100-80gb", n_gpus=64, global_batch=32,
                  seq_len=131072)
    e = ConfigExplorer(**values)
    assert e.data is None and "nothing fits" in e.message.value and "raise cp" in e.message.value
    assert not any(r.fits for r in search(MODELS["llama2-70b"], get_cluster("h100-80gb",
                                                                           n_gpus=64), 32, 131072))
    e.controls["cp"].value = 8
    assert e.error is None and e.data.chosen.cp == 8 and e.data.chosen.fits


def test_config_cp_that_breaks_the_sequence_rule_says_so():
    # Ulysses needs whole heads: cp=16 cannot split Llama-2 70B's 8 key/value heads
    e = ConfigExplorer(model="llama2-70b", n_gpus=64, global_batch=64, seq_len=32768,
                       cp=16, cp_mode="all_to_all")
    assert e.data is None and "cp=16" in e.message.value and "Traceback" not in e.message.value


# ------------------------------------------------------------ ep moves ----

def test_mixtral_preset_has_its_published_sizes():
    # Jiang et al. 2024, Table 1: 32 layers, dim 4096, 32 heads, 8 kv heads, 8 experts of
    # hidden 14336, top 2; Section 2.1: 47B parameters, 13B active (46.7B and 12.9B)
    m = MIXTRAL
    assert (m.n_layers, m.d_model, m.n_heads, m.kv_heads, m.vocab_size) == (32, 4096, 32, 8, 32000)
    assert (m.moe.n_experts, m.moe.top_k, m.moe.expert_hidden) == (8, 2, 14336)
    assert m.n_params / 1e9 == pytest.approx(46.7, abs=0.05)
    assert m.active_params / 1e9 == pytest.approx(12.9, abs=0.05)
    assert m.expert_params == 32 * 8 * 3 * 4096 * 14336
    assert "mixtral-8x7b" not in MODELS       # the dense presets (drawn by drop 13) unchanged


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_memory_ep_divides_the_expert_weights_as_plan_says(ep):
    layout = dict(dp=8, tp=1, pp=2, zero_stage=1)
    e = MemoryExplorer(model="mixtral-8x7b", seq_len=4096, ep=ep, **layout)
    r = plan(MIXTRAL, get_cluster("h100-80gb", n_gpus=16), 8 * 2, 4096, ep=ep, micro_batch=1,
             **layout)
    _same(e.data.worst, r.memory)
    # by hand: 2 bytes a weight; the dense part over pp, the experts over pp and ep
    dense, experts = MIXTRAL.n_params - MIXTRAL.expert_params, MIXTRAL.expert_params
    assert e.data.worst.params == pytest.approx(2 * dense / 2 + 2 * experts / (2 * ep))
    # ZeRO-1: the dense optimizer over dp = 8, the experts' over edp = dp / ep
    assert e.data.worst.optimizer == pytest.approx(12 * dense / 2 / 8
                                                   + 12 * experts / (2 * ep) / (8 // ep))
    assert f"split over ep={ep}" in e.message.value


def test_memory_ep_one_on_mixtral_is_the_dense_accounting():
    e = MemoryExplorer(model="mixtral-8x7b", dp=4, tp=2, pp=2, zero_stage=1,
                       sequence_parallel=True)
    states = model_state_bytes(MIXTRAL.n_params, dp=4, tp=2, pp=2, zero_stage=1)
    _same((e.data.worst.params, e.data.worst.grads, e.data.worst.optimizer), states[:3])


def test_config_ep_rows_are_plans_with_that_ep():
    cluster = get_cluster("h100-80gb", n_gpus=64)
    e = ConfigExplorer(model="mixtral-8x7b", cluster="h100-80gb", n_gpus=64, global_batch=512,
                       ep=8, rows=5)
    expected = [r for r in search(MIXTRAL, cluster, 512, 4096, eps=(8,)) if r.fits]
    assert e.data.rows == expected[:5] and all(r.ep == 8 for r in e.data.rows)
    r = e.data.chosen
    again = plan(MIXTRAL, cluster, 512, 4096, dp=r.dp, tp=r.tp, pp=r.pp, ep=8,
                 micro_batch=r.micro_batch, zero_stage=r.zero_stage, recompute=r.recompute,
                 virtual_stages=r.virtual_stages, sequence_parallel=r.sequence_parallel)
    assert again == r and r.time.ep_comm > 0
    assert f"{r.time.ep_comm:.2f} s of all-to-all" in e.message.value
    legend = [t.get_text() for t in e.figure.axes[1].get_legend().get_texts()]
    assert legend[-1] == "EP comm"
    # the drawn bar of the chosen row is its whole step time
    ax = e.figure.axes[1]
    widths = [p.get_width() for p in ax.patches if abs(p.get_y() + p.get_height() / 2) < 1e-9]
    assert sum(widths) == pytest.approx(r.time.total)


@pytest.mark.parametrize("explorer, values, message", [
    (MemoryExplorer, dict(model="llama2-13b", ep=2), "Llama-2 13B is dense"),
    (ConfigExplorer, dict(model="llama2-70b", ep=4), "Llama-2 70B is dense"),
    (MemoryExplorer, dict(model="mixtral-8x7b", dp=2, ep=4), "does not divide"),
    (MemoryExplorer, dict(model="mixtral-8x7b", dp=8, tp=2, ep=2), "needs sequence parallelism"),
    (MemoryExplorer, dict(model="llama2-7b", cp=4, flash_attention=False),
     "needs memory-efficient attention"),
    (MemoryExplorer, dict(model="llama2-7b", cp=16, seq_len=512, pp=1), None),
])
def test_broken_cp_and_ep_rules_show_a_message(explorer, values, message):
    e = explorer(**values)
    if message is None:      # 512 tokens split 32 ways is allowed: 16 tokens a chunk
        assert e.error is None
        return
    assert e.data is None and message in html.unescape(e.message.value)
    assert "Traceback" not in e.message.value
