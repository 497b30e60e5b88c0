"""The bubble moves explorer (drop 12), driven programmatically: move its controls
and check what it shows against the planner called directly, the bubble written
out by hand ((p - 1)/(v m + p - 1)) and the rules in cost.violations."""
import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.cost import GB, get_cluster, get_model, plan
from threeaxes.widgets.bubble_moves import BubbleMovesExplorer

MODEL = get_model("175B")                        # 96 layers, 96 heads
CLUSTER = get_cluster("a100-80gb", n_nodes=16)   # 128 GPUs, 8 per node
BATCH = 52
START = dict(dp=4, tp=4, pp=8, micro_batch=1, zero_stage=1, recompute="selective",
             sequence_parallel=True)


@pytest.fixture
def explorer():
    # drop 12's team runs Megatron-LM from before Core 0.10: interleaving in groups of p
    return BubbleMovesExplorer(MODEL, CLUSTER, BATCH, START, bubble_target=0.25,
                               interleave="group_p")


def test_it_starts_from_the_baseline_with_a_35_percent_bubble(explorer):
    d = explorer.data
    assert (d.result.dp, d.result.tp, d.result.pp, d.result.micro_batches) == (4, 4, 8, 13)
    assert d.result.bubble_fraction == pytest.approx(7 / 20)      # (8 - 1)/(13 + 8 - 1)
    assert not d.under_target and d.speedup == 1.0
    direct = plan(MODEL, CLUSTER, BATCH, **START)
    assert d.result.time == direct.time and d.result.memory == direct.memory
    assert "7/(13+7) = <b>35.0%</b>" in explorer.message.value
    assert "<b>not</b> under the 25% target" in explorer.message.value


def test_fewer_stages_keep_m_and_shrink_the_bubble(explorer):
    explorer.controls["pp"].value = 4          # what a dropdown move does: dp becomes 128/(4*4) = 8
    assert explorer.data is None and "does not split evenly over dp=8" in explorer.error
    explorer.controls["tp"].value = 8          # dp back to 4: m stays 52 / 4 = 13
    d = explorer.data
    assert (d.result.dp, d.result.tp, d.result.pp, d.result.micro_batches) == (4, 8, 4, 13)
    assert d.result.bubble_fraction == pytest.approx(3 / 16) and d.under_target
    direct = plan(MODEL, CLUSTER, BATCH, **{**START, "tp": 8, "pp": 4})
    assert d.speedup == pytest.approx(d.baseline.time.total / direct.time.total)
    assert f"{d.speedup:.2f}&times;" in explorer.message.value
    assert f"{direct.memory.total / GB:.1f} of 80 GB" in explorer.message.value


def test_fewer_replicas_raise_m_and_interleaving_needs_m_a_multiple_of_p(explorer):
    explorer.set(tp=8, pp=16)                  # dp = 1: m = 52
    d = explorer.data
    assert (d.result.dp, d.result.micro_batches) == (1, 52)
    assert d.result.bubble_fraction == pytest.approx(15 / (52 + 15))
    explorer.set(virtual_stages=2)             # 52 is not a multiple of 16
    assert explorer.data is None and "52 micro-batches is not a multiple of pp=16" in explorer.error


def test_interleaving_where_it_can_run_divides_the_fill_and_drain_by_v():
    # 64 sequences over dp = 4: m = 16, a multiple of pp = 8
    explorer = BubbleMovesExplorer(MODEL, CLUSTER, 64, START, bubble_target=0.25, virtual_stages=3)
    d = explorer.data
    assert d.result.bubble_fraction == pytest.approx(7 / (3 * 16 + 7))
    assert "7/(3&middot;16+7)" in explorer.message.value


def test_the_figure_shows_the_bubble_against_the_target_and_both_layouts(explorer):
    explorer.set(tp=8, pp=4)
    bubble_ax, memory_ax, time_ax = explorer.figure.axes[:3]
    heights = [p.get_height() for p in bubble_ax.patches]
    assert heights == pytest.approx([100 * 7 / 20, 100 * 3 / 16])
    assert [line.get_ydata()[0] for line in bubble_ax.lines] == [pytest.approx(25.0)]
    assert [t.get_text() for t in memory_ax.get_xticklabels()] == ["start", "this layout"]
    assert [t.get_text() for t in time_ax.get_yticklabels()] == ["start", "this layout"]


@pytest.mark.parametrize("values, message", [
    (dict(tp=16, pp=8), "tp=16 does not fit in one node of 8 GPUs"),
    (dict(pp=32, tp=8), "does not divide the 128 GPUs"),
    (dict(zero_stage=2), "choose zero_stage in {0, 1} or pp=1"),
    (dict(virtual_stages=2), "13 micro-batches is not a multiple of pp=8"),
])
def test_an_invalid_layout_names_every_broken_rule(explorer, values, message):
    explorer.set(**values)
    assert explorer.data is None and explorer.figure is None
    assert message in explorer.error


def test_megatron_core_rule_interleaves_13_micro_batches_on_8_stages():
    # a group of 13 (Megatron Core >= 0.10): (8 - 1)/(2 x 13 + 8 - 1) = 7/33
    explorer = BubbleMovesExplorer(MODEL, CLUSTER, BATCH, START, bubble_target=0.25,
                                   virtual_stages=2)
    d = explorer.data
    assert d.result.bubble_fraction == pytest.approx(7 / 33) and d.under_target


def test_a_target_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="bubble_target=25 must be a fraction"):
        BubbleMovesExplorer(MODEL, CLUSTER, BATCH, START, bubble_target=25)
