"""The named mistakes of drops 1-4's references (autograder/references): each common wrong answer,
worked out by hand, gets the message that names it; the right answer gets None.
Also: the config explorer's table fills its SP column in every row."""
import re

import pytest

from autograder.references import drop01, drop02, drop03, drop04
from threeaxes.cost import Model, a100_cluster, search
from threeaxes.display import plan_table_html

# ---------------------------------------------------------------- drop 1 ----


@pytest.mark.parametrize("precision, right", [("fp32", (4000, 4000, 8000)), ("mixed", (2000, 2000, 12000))])
def test_training_bytes_right_answer_passes(precision, right):
    got = dict(zip(("params", "grads", "optimizer"), right))
    assert drop01.training_bytes_mistake(got, 1000, precision) is None


@pytest.mark.parametrize("precision, wrong, phrase", [
    ("mixed", (2000, 2000, 8000), "remember the fp32 master copy"),
    ("fp32", (4000, 4000, 4000), "two moments"),
    ("fp32", (4000, 4000, 12000), "no master copy"),
    ("mixed", (4000, 4000, 12000), "16-bit, 2 bytes each"),
    ("mixed", (2, 2, 12), "bytes per parameter; multiply each by n_params"),
    ("fp32", (32000, 32000, 64000), "bits, not bytes"),
])
def test_training_bytes_named_mistakes(precision, wrong, phrase):
    got = dict(zip(("params", "grads", "optimizer"), wrong))
    assert phrase in drop01.training_bytes_mistake(got, 1000, precision)


def test_training_bytes_wrong_keys_named():
    message = drop01.training_bytes_mistake({"weights": 1, "grads": 1, "adam": 1}, 1000, "fp32")
    assert "exactly the keys params, grads, optimizer" in message


def test_largest_model_right_answer_passes():
    assert drop01.largest_model_mistake(80 / 16) is None        # 80 GB over 2 + 2 + 12 bytes


@pytest.mark.parametrize("wrong, phrase", [
    (80 / 12, "forgot the fp32 master copy"),
    (80 / 2, "fp16 weights alone"),
    (80 / 4, "the weights alone"),
    (80 / 8, "leaves out the optimizer"),
    (5e9, "divide by 1e9"),
    (80 * 2**30 / 16 / 1e9, "80 GiB"),
    (7.5, "does not match 80 GB"),
])
def test_largest_model_named_mistakes(wrong, phrase):
    assert phrase in drop01.largest_model_mistake(wrong)


def test_largest_model_refuses_an_always_equal_object():
    class Sneaky:
        __eq__ = lambda self, other: True  # noqa: E731

    with pytest.raises(AssertionError, match="should be a number"):
        drop01.largest_model_mistake(Sneaky())


RIGHT_SPLIT = {"data": "batch", "tensor": "layer weights", "pipeline": "layers"}
RIGHT_CROSSES = {"data": "gradients", "tensor": "partial layer outputs",
                 "pipeline": "activations between stages"}


def test_axis_roles_right_answer_passes():
    assert drop01.axis_roles_mistake(dict(RIGHT_SPLIT), dict(RIGHT_CROSSES)) is None


@pytest.mark.parametrize("split, crosses, phrase", [
    ({**RIGHT_SPLIT, "tensor": "layers", "pipeline": "layer weights"}, RIGHT_CROSSES,
     "swapped tensor and pipeline"),
    ({**RIGHT_SPLIT, "data": "layer weights"}, RIGHT_CROSSES, "held all the parameters"),
    (RIGHT_SPLIT, {**RIGHT_CROSSES, "data": "activations between stages"}, "summed the gradients"),
    (RIGHT_SPLIT, {**RIGHT_CROSSES, "tensor": "gradients"}, "side by side"),
    (RIGHT_SPLIT, {**RIGHT_CROSSES, "pipeline": "partial layer outputs"}, "next stage"),
])
def test_axis_roles_named_mistakes(split, crosses, phrase):
    assert phrase in drop01.axis_roles_mistake(split, crosses)


# ---------------------------------------------------------------- drop 2 ----

def test_toy_parameter_count_matches_the_formula():
    h, vocab, seq, layers = 32, 32, 16, 4         # ToyConfig()'s defaults
    by_formula = layers * (12 * h * h + 13 * h) + (vocab + seq) * h + 2 * h + vocab * h
    assert drop02.toy_parameter_count() == by_formula


N = 10_000  # a round parameter count for the hand-derived answers below


def test_state_bytes_right_answer_passes():
    assert drop02.state_bytes_mistake(160_000, N, ranks=4) is None


@pytest.mark.parametrize("wrong, phrase", [
    (40_000, "1/4 of the state"),
    (80_000, "weights and gradients"),
    (120_000, "12 bytes per parameter"),
    (10_000, "number of parameters"),
    (640_000, "all 4 ranks together"),
    (123, "every rank holds all 10,000 parameters"),
])
def test_state_bytes_named_mistakes(wrong, phrase):
    assert phrase in drop02.state_bytes_mistake(wrong, N, ranks=4)


def test_state_bytes_weights_only_named_when_it_is_not_a_quarter():
    assert "the weights alone" in drop02.state_bytes_mistake(40_000, N, ranks=2)


def test_ring_bytes_right_answer_passes():
    assert drop02.ring_bytes_mistake(60_000, N, ranks=4) is None    # 2 * 3/4 * 40,000 B


@pytest.mark.parametrize("wrong, phrase", [
    (240_000, "gradients only"),          # 2 * 3/4 * 160,000 B of state
    (30_000, "reduce-scatter"),           # 3/4 * 40,000 B
    (80_000, "that is 2 x S"),
    (40_000, "the gradients themselves"),
    (15_000, "counts numbers, not bytes"),
    (120_000, "one chunk of S / n per step"),  # 3 * 40,000 B
    (12_345, "use S = 4 bytes x parameters"),
])
def test_ring_bytes_named_mistakes(wrong, phrase):
    assert phrase in drop02.ring_bytes_mistake(wrong, N, ranks=4)


# ---------------------------------------------------------------- drop 3 ----

def test_tp_counts_right_answer_passes():
    assert drop03.tp_counts_mistake((2, 2), (2, 2)) is None


@pytest.mark.parametrize("wrong, phrase", [
    ((2, 0), "backward makes two more per block"),
    ((1, 1), "one sublayer's worth"),
    ((4, 4), "one per sublayer each way, not one per linear"),
    ((3, 2), "forward: you said 3"),
    ((2, 1), "backward: you said 1"),
])
def test_tp_counts_named_mistakes(wrong, phrase):
    assert phrase in drop03.tp_counts_mistake(wrong, (2, 2))


def test_tp_bytes_right_answer_passes():
    assert drop03.tp_bytes_mistake(2 * 16 * 32 * 8, 2, 16, 32, 8) is None     # 8,192 B


@pytest.mark.parametrize("wrong, phrase", [
    (4096, "1/2 of the activation"),
    (1024, "counts numbers, not bytes"),
    (32768, "hidden width"),
    (16384, "twice the activation"),
    (65536, "bits"),
    (100, "whole (2, 16, 32) activation"),
])
def test_tp_bytes_named_mistakes(wrong, phrase):
    assert phrase in drop03.tp_bytes_mistake(wrong, 2, 16, 32, 8, tp=2)


# ---------------------------------------------------------------- drop 4 ----

def test_stage_layers_right_answer_passes():
    assert drop04.stage_layers_mistake([[0, 1], [2, 3]], 4, 2) is None
    assert drop04.stage_layers_mistake([[0], [1], [2], [3]], 4, 4) is None


@pytest.mark.parametrize("wrong, phrase", [
    ([[0, 1, 2], [2, 3, 4]], "should each appear exactly once"),      # the off-by-one of grading.json
    ([[0], [2]], "one layer short"),
    ([[0, 2], [1, 3]], "dealt the layers out in turn"),
    ([[0, 1, 2, 3]], "that is 1 stages"),
    ([[0, 1, 2], [3]], "every stage should hold 2 layers"),
    ([[2, 3], [0, 1]], "in order"),
])
def test_stage_layers_named_mistakes(wrong, phrase):
    assert phrase in drop04.stage_layers_mistake(wrong, 4, 2)


@pytest.mark.parametrize("p, m, right", [(1, 8, 0.0), (4, 8, 3 / 11), (4, 2, 3 / 5), (2, 1, 1 / 2)])
def test_bubble_right_answer_passes(p, m, right):
    assert drop04.bubble_mistake(right, p, m) is None


@pytest.mark.parametrize("wrong, phrase", [
    (3 / 8, "idle time over the *useful* time"),       # (p-1)/m, grading.json's bubble_over_m
    (8 / 11, "busy fraction"),
    (300 / 11, "percentage"),
    (3 / 12, "one slot too many"),
    (3 / 4, "leaves out m"),
    (0.5, "count the idle slots"),
])
def test_bubble_named_mistakes(wrong, phrase):
    assert phrase in drop04.bubble_mistake(wrong, 4, 8)


def test_bubble_formula_agrees_with_the_plans():
    from threeaxes.pipeline import gpipe, one_f_one_b, simulate

    for p, m in [(1, 8), (4, 8), (4, 2), (2, 1), (8, 3)]:
        want = drop04.expected_bubble_fraction(p, m)
        assert simulate(gpipe(p, m)).idle_fraction == want == simulate(one_f_one_b(p, m)).idle_fraction


@pytest.mark.parametrize("schedule, p, m, right", [
    ("gpipe", 4, 8, 8), ("gpipe", 4, 2, 2), ("1f1b", 4, 8, 4), ("1f1b", 4, 2, 2), ("1f1b", 2, 1, 1)])
def test_stage0_held_right_answer_passes(schedule, p, m, right):
    assert drop04.stage0_held_mistake(right, schedule, p, m) is None


@pytest.mark.parametrize("schedule, p, m, wrong, phrase", [
    ("1f1b", 4, 2, 4, "only 2 microbatches"),         # p, ignoring m < p
    ("1f1b", 4, 8, 8, "that is GPipe's count"),
    ("1f1b", 4, 8, 3, "warmup forwards alone"),
    ("gpipe", 4, 8, 4, "that is 1F1B's count"),
    ("gpipe", 4, 8, 5, "holds all 8"),
    ("1f1b", 4, 8, 6, "count the forwards of stage 0"),
])
def test_stage0_held_named_mistakes(schedule, p, m, wrong, phrase):
    assert phrase in drop04.stage0_held_mistake(wrong, schedule, p, m)


def test_stage0_formula_agrees_with_the_plans():
    from threeaxes.pipeline import gpipe, one_f_one_b, peak_in_flight

    for p, m in [(1, 4), (4, 8), (4, 2), (2, 1), (8, 3)]:
        assert drop04.expected_stage0_held("gpipe", p, m) == peak_in_flight(gpipe(p, m), 0)
        assert drop04.expected_stage0_held("1f1b", p, m) == peak_in_flight(one_f_one_b(p, m), 0)


# ------------------------------------------------- config explorer table ----

def _sp_cells(html_table):
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html_table)
    header = re.findall(r"<th[^>]*>(.*?)</th>", rows[0])
    column = header.index("SP")
    return [re.findall(r"<td[^>]*>(.*?)</td>", row)[column] for row in rows[1:]]


def test_plan_table_fills_the_sp_column_in_every_row():
    model = Model("small", n_layers=4, d_model=64, n_heads=4, vocab_size=100, seq_len=32,
                  n_params=300_000, layer_params=200_000)
    results = search(model, a100_cluster(1), 8)
    assert {r.tp for r in results} >= {1, 2} and {r.sequence_parallel for r in results} == {False, True}
    cells = _sp_cells(plan_table_html(results))
    assert len(cells) == len(results)
    for r, cell in zip(results, cells):
        assert cell == ("n/a" if r.tp == 1 else "yes" if r.sequence_parallel else "no"), (r.label, cell)
