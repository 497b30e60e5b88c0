"""The fix explorer (drop 10), driven programmatically: move its controls and
check what it shows against the planner called directly and against
Korthikanti et al. 2022's per-layer formula written out by hand."""
import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.cost import GB, get_cluster, get_model, plan
from threeaxes.widgets.fix import FixExplorer

MODEL = get_model("13B")
CLUSTER = get_cluster("a100-80gb", n_gpus=32)
TOKENS = 512 * 2048
# drop 10's run: its attention stores the s x s scores (flash_attention=False)
START = {"dp": 8, "tp": 4, "pp": 1, "micro_batch": 2, "zero_stage": 1, "flash_attention": False}


@pytest.fixture
def explorer():
    return FixExplorer(MODEL, CLUSTER, TOKENS, START)


def test_it_starts_from_the_baseline_at_the_longest_sequence(explorer):
    d = explorer.data
    direct = plan(MODEL, CLUSTER, 256, 4096, **START)
    assert (d.result.dp, d.result.tp, d.result.pp, d.result.micro_batch) == (8, 4, 1, 2)
    assert d.global_batch == 256 and d.slowdown == 1.0
    assert d.result.memory == direct.memory and d.result.time == direct.time
    assert not d.result.fits
    over = (direct.memory.total - direct.capacity) / GB
    assert f"does not fit: {over:.1f} GB over" in explorer.message.value


def test_selective_recompute_drops_exactly_the_attention_scores(explorer):
    before = explorer.data.result.memory.activations
    explorer.controls["recompute"].value = "selective"      # what a dropdown move does
    d = explorer.data
    s, b, a, t, layers = 4096, 2, 40, 4, 40
    # Korthikanti et al. 2022, eq. 2: 5 a s^2 b / t bytes of scores, softmax and its dropout
    assert before - d.result.memory.activations == pytest.approx(5 * a * s * s * b / t * layers)
    assert d.result.fits and "fits" in explorer.message.value
    direct = plan(MODEL, CLUSTER, 256, 4096, **START, recompute="selective")
    assert d.slowdown == pytest.approx(direct.time.total / d.baseline.time.total)
    assert f"{d.slowdown:.2f}x" in explorer.message.value


def test_memory_efficient_attention_drops_the_same_scores(explorer):
    before = explorer.data.result.memory.activations
    explorer.controls["flash_attention"].value = True
    s, b, a, t, layers = 4096, 2, 40, 4, 40
    # FlashAttention (Dao et al. 2022) never stores the 5 a s^2 b / t bytes per layer
    assert before - explorer.data.result.memory.activations == pytest.approx(
        5 * a * s * s * b / t * layers)
    assert explorer.data.result.fits


def test_dp_follows_tp_and_pp_and_the_batch_follows_the_sequence(explorer):
    explorer.set(tp=8, pp=2, seq_len=2048, micro_batch=1)
    d = explorer.data
    assert (d.result.dp, d.result.tp, d.result.pp) == (2, 8, 2)
    assert d.global_batch == 512 and d.result.micro_batches == 512 // 2
    assert d.baseline.fits and d.baseline.memory.total < CLUSTER.hbm_bytes
    direct = plan(MODEL, CLUSTER, 512, 2048, dp=2, tp=8, pp=2, micro_batch=1, zero_stage=1,
                  flash_attention=False)
    assert d.result.time == direct.time


def test_the_figure_shows_both_configurations(explorer):
    left, right = explorer.figure.axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()] == ["start", "yours"]
    assert [t.get_text() for t in right.get_yticklabels()] == ["start", "yours"]


@pytest.mark.parametrize("values, message", [
    (dict(tp=8, pp=8), "does not divide the 32 GPUs"),
    (dict(zero_stage=2, pp=2), "choose zero_stage in {0, 1} or pp=1"),
    (dict(micro_batch=16, tp=1, pp=1), "micro_batch=16 does not divide"),
])
def test_an_invalid_combination_says_what_to_change(explorer, values, message):
    explorer.set(**values)
    assert explorer.data is None and explorer.figure is None
    assert message in explorer.error
