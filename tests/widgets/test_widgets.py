"""The calculators, driven programmatically: set values, check the data they
plot against the formulas, and move every control at random (hypothesis)."""
import html
import sys

import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import ipywidgets as widgets
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threeaxes.cost import (
    GB,
    MODELS,
    activation_bytes,
    first_stage_activation_bytes,
    get_cluster,
    model_state_bytes,
    search,
)
from threeaxes.widgets import BubbleExplorer, ConfigExplorer, MemoryExplorer


def _compute_boxes(figure):
    """Compute boxes the Gantt chart drew (plots.gantt tags each collection)."""
    return sum(len(c.get_paths()) for c in figure.axes[0].collections if c.get_gid() == "compute")


def _bar_heights_at(ax, x):
    """Stacked heights of the filled bars centred at x (skips the outline of
    the part that does not fit, which has no face)."""
    total = 0.0
    for patch in ax.patches:
        centre = patch.get_x() + patch.get_width() / 2
        if abs(centre - x) < 1e-9 and patch.get_facecolor()[3] > 0:
            total += patch.get_height()
    return total


# ---------------------------------------------------------------- bubble ----

def test_bubble_explorer_default_by_hand():
    b = BubbleExplorer(pp=4, micro_batches=8)
    # (p - 1)/(m + p - 1) = 3/11 of the step idle; overhead (p - 1)/m = 3/8
    assert b.data.fraction == pytest.approx(3 / 11)
    assert b.data.overhead == pytest.approx(3 / 8)
    assert b.data.timeline.idle_fraction == pytest.approx(3 / 11)
    assert _compute_boxes(b.figure) == 2 * 4 * 8      # every F and B drawn
    ax = b.figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(4)]
    assert "27.3%" in b.message.value and "37.5%" in b.message.value


def test_more_micro_batches_shrink_the_bubble_as_the_formula_says():
    b = BubbleExplorer(pp=4, micro_batches=8)
    b.controls["micro_batches"].value = 16           # what a slider move does
    assert b.data.fraction == pytest.approx(3 / 19)
    assert b.data.timeline.idle_fraction == pytest.approx(3 / 19)
    assert "15.8%" in b.figure.axes[0].get_title()
    assert _compute_boxes(b.figure) == 2 * 4 * 16


def test_interleaving_divides_the_overhead_by_v():
    b = BubbleExplorer(pp=4, micro_batches=8, virtual_stages=2)
    assert b.data.overhead == pytest.approx(3 / 16)          # (p-1)/(v m)
    assert b.data.fraction == pytest.approx(3 / 19)          # (p-1)/(v m + p - 1)
    assert b.data.timeline.idle_fraction == pytest.approx(3 / 19)
    assert _compute_boxes(b.figure) == 2 * 4 * 8 * 2     # v chunks: v times the boxes
    assert "interleaved 1F1B" in b.figure.axes[0].get_title()


def test_gpipe_and_1f1b_share_the_bubble():
    b = BubbleExplorer(pp=3, micro_batches=5, schedule="gpipe")
    gpipe = b.data.timeline.idle_fraction
    b.set(schedule="1f1b")
    assert b.data.timeline.idle_fraction == pytest.approx(gpipe) == pytest.approx(2 / 7)


@pytest.mark.parametrize("values, message", [
    (dict(pp=4, micro_batches=6, virtual_stages=2), "not a multiple of pp=4"),
    (dict(pp=4, micro_batches=8, virtual_stages=2, schedule="gpipe"), "interleaved"),
])
def test_bubble_invalid_combination_shows_a_message(values, message):
    b = BubbleExplorer()
    b.set(**values)
    assert b.data is None and b.figure is None
    assert message in b.message.value and "Traceback" not in b.message.value
    assert b.output.outputs == ()
    b.set(virtual_stages=1, schedule="1f1b")
    assert b.error is None and b.data is not None


# ---------------------------------------------------------------- memory ----

def test_memory_explorer_matches_the_cost_model():
    e = MemoryExplorer(model="llama2-70b", dp=2, tp=8, pp=4, zero_stage=1,
                       recompute="selective", sequence_parallel=True, seq_len=4096)
    m = MODELS["llama2-70b"]
    states = model_state_bytes(m.n_params, dp=2, tp=8, pp=4, zero_stage=1)
    first = first_stage_activation_bytes(4096, 1, 8192, 64, n_layers=80, tp=8, pp=4,
                                         micro_batches=4, sequence_parallel=True,
                                         recompute="selective", vocab_size=32000)
    label, w = e.data.bars[0]
    assert (w.params, w.grads, w.optimizer) == pytest.approx(states[:3])
    assert w.activations == pytest.approx(first.total)
    # stage r holds p - r micro-batches of 80/4 layers (1F1B)
    per_layer = activation_bytes(4096, 1, 8192, 64, tp=8, sequence_parallel=True,
                                 recompute="selective").per_layer
    for r, (_, terms) in enumerate(e.data.bars[1:], 1):
        assert terms.activations == pytest.approx(per_layer * 20 * (4 - r))
    # the drawn stack is the same number
    ax = e.figure.axes[0]
    assert _bar_heights_at(ax, 0) == pytest.approx(w.total / GB)
    assert e.data.fits


def test_zero_stage_shrinks_the_optimizer_bar_by_dp():
    e = MemoryExplorer(model="llama2-13b", dp=8)
    before = e.data.worst.optimizer
    e.controls["zero_stage"].value = 1
    assert e.data.worst.optimizer == pytest.approx(before / 8)   # K Psi / N_d (ZeRO 5.1)
    e.controls["zero_stage"].value = 3
    assert e.data.worst.params == pytest.approx(2 * MODELS["llama2-13b"].n_params / 8)


def test_micro_batch_scales_activations_linearly():
    e = MemoryExplorer(model="llama2-7b", pp=2, tp=2)
    one = e.data.bars[1][1].activations
    e.controls["micro_batch"].value = 4
    assert e.data.bars[1][1].activations == pytest.approx(4 * one)


def test_what_does_not_fit_is_drawn_as_such():
    e = MemoryExplorer(model="llama2-70b")
    assert not e.data.fits
    assert "does not fit" in e.message.value
    hatched = [p for p in e.figure.axes[0].patches if p.get_hatch() == "xx"]
    assert len(hatched) == 1
    top = hatched[0].get_y() + hatched[0].get_height()
    assert hatched[0].get_y() == pytest.approx(80)                  # from the capacity line
    assert top == pytest.approx(e.data.worst.total / GB)            # up to the total


@pytest.mark.parametrize("values, message", [
    (dict(model="llama2-70b", tp=3), "tp=3 does not divide n_heads=64; choose tp in {1, 2, 4, 8}"),
    (dict(model="llama2-70b", tp=16), "tp=16 does not divide n_kv_heads=8"),
    (dict(model="llama2-70b", pp=3), "pp=3 does not divide n_layers=80; choose pp in"),
    (dict(model="llama2-70b", pp=2, zero_stage=2), "choose zero_stage in {0, 1} or pp=1"),
    (dict(model="custom", d_model=1024, n_heads=3), "does not divide d_model"),
])
def test_memory_invalid_combination_shows_a_message(values, message):
    e = MemoryExplorer()
    e.set(**values)
    assert e.data is None and message in html.unescape(e.message.value)


def test_custom_shape_controls_follow_the_model_choice():
    e = MemoryExplorer()
    assert e.controls["d_model"].disabled
    e.controls["model"].value = "custom"
    assert not e.controls["d_model"].disabled
    e.set(n_layers=24, d_model=2304, n_heads=24)
    assert round(e.data.model.n_params / 1e9, 2) == round(
        (12 * 24 * 2304**2 + 13 * 24 * 2304 + (51200 + 4096) * 2304) / 1e9, 2)


# ---------------------------------------------------------------- config ----

def test_config_explorer_ranks_what_search_ranks():
    e = ConfigExplorer(model="llama2-70b", cluster="a100-80gb", n_gpus=64, global_batch=256,
                       seq_len=4096, rows=8)
    expected = [r for r in search(MODELS["llama2-70b"], get_cluster("a100-80gb", n_gpus=64),
                                  256, 4096) if r.fits]
    assert e.data.rows == expected[:8]
    assert e.data.n_fitting == len(expected)
    assert e.data.chosen == expected[0]
    assert e.table.value.count("<tr") == 9
    e.controls["pick"].value = 3
    assert e.data.chosen == expected[2]
    # the drawn memory bar is the chosen row's total
    assert _bar_heights_at(e.figure.axes[0], 0) == pytest.approx(expected[2].memory.total / GB)


def test_rows_slider_bounds_the_pick():
    e = ConfigExplorer(rows=10, pick=10)
    e.controls["rows"].value = 4
    assert e.controls["pick"].max == 4 and e.controls["pick"].value == 4
    assert e.data.chosen == e.data.rows[3]


def test_config_nothing_fits_says_what_to_change():
    e = ConfigExplorer(model="llama2-70b", n_gpus=8)
    assert e.data is None and "nothing fits" in e.message.value
    assert "add GPUs" in e.message.value and e.table.value == ""


def test_explorers_display_as_widgets():
    for cls in (BubbleExplorer, MemoryExplorer):
        e = cls()
        assert isinstance(e.widget, widgets.VBox)
        assert "application/vnd.jupyter.widget-view+json" in e._repr_mimebundle_()


def test_unknown_control_is_an_error():
    with pytest.raises(ValueError, match="unknown controls"):
        BubbleExplorer(stages=4)


# ------------------------------------------------------------ hypothesis ----

def _values_of(control):
    if isinstance(control, widgets.Checkbox):
        return st.booleans()
    if isinstance(control, widgets.Dropdown):
        return st.sampled_from([o[1] if isinstance(o, tuple) else o for o in control.options])
    if isinstance(control, widgets.IntSlider):
        steps = (control.max - control.min) // control.step
        return st.integers(0, steps).map(lambda k, c=control: c.min + k * c.step)
    raise TypeError(f"no strategy for {type(control).__name__}")


def _moves(explorer):
    """Every control, in a random order, each to a random value of its own."""
    names = sorted(explorer.controls)
    return st.permutations(names).flatmap(
        lambda order: st.tuples(*(st.tuples(st.just(n), _values_of(explorer.controls[n]))
                                  for n in order)))


def _check_random_moves(explorer, data):
    for name, value in data.draw(_moves(explorer)):
        explorer.controls[name].value = value        # anything but a message would
        if explorer.error is None:                   # surface here as an exception
            assert explorer.data is not None and explorer.figure is not None
        else:
            assert explorer.data is None and explorer.figure is None
            assert explorer.message.value and "Traceback" not in explorer.message.value


@pytest.mark.parametrize("cls, examples", [
    (BubbleExplorer, 10), (MemoryExplorer, 12), (ConfigExplorer, 3),
])
def test_every_control_moves_to_random_values_without_an_exception(cls, examples):
    explorer = cls()

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data):
        _check_random_moves(explorer, data)

    run()


def test_memory_explorer_attention_box_adds_the_score_term():
    # on by default, as the planner: unticking it stores 5 a s^2 b / t per layer (Korthikanti
    # et al. 2022, Table 2) on each of stage 0's 80 layers x 1 micro-batch in flight
    e = MemoryExplorer(model="llama2-70b", dp=8, tp=8, pp=1, zero_stage=1, seq_len=4096)
    flash = e.data.bars[0][1].activations
    e.controls["flash_attention"].value = False
    stored = e.data.bars[0][1].activations
    assert stored - flash == pytest.approx(80 * 5 * 64 * 4096 * 4096 * 1 / 8)


def test_in_colab_importing_the_widgets_turns_on_colabs_widget_manager(monkeypatch):
    import types

    from threeaxes.widgets import colab

    assert colab.enable_colab_widgets() is False          # not Colab: nothing done
    calls = []
    output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append(1))
    google = types.ModuleType("google")
    google_colab = types.ModuleType("google.colab")
    google_colab.output = output
    google.colab = google_colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", google_colab)
    assert colab.enable_colab_widgets() is True and calls == [1]
