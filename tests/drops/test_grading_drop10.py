"""Drop 10's reference and its named slips, against the formulas written out by hand:
ZeRO (Rajbhandari et al. 2020) Section 3.1 and Figure 1 for the model states,
Korthikanti et al. 2022 Table 2 (eq. 2) for the activations of one layer."""
import pytest

from autograder.references import drop10
from autograder.references.sizing import judge_scenario
from threeaxes.cost import get_cluster, get_model, plan

MODEL = get_model("13B")
DP, TP, LAYERS, H, HEADS = 8, 4, 40, 5120, 40


def by_hand(s, b, *, optimizer_bytes=12.0, optimizer_sharded=True, states_over_tp=True,
            attention=True, attention_exponent=2, attention_over_tp=True, layers=LAYERS,
            linear=None):
    """GB per GPU for dp=8, tp=4, pp=1, ZeRO-1, without the embedding/output extras."""
    psi = MODEL.n_params / (TP if states_over_tp else 1)
    states = psi * (2 + 2 + optimizer_bytes / (DP if optimizer_sharded else 1))
    lin = s * b * H * (10 + 24 / TP) if linear is None else linear(s, b)
    s_times_s = s * (s if attention_exponent == 2 else 2048)      # the slip: linear in s
    scores = 5 * HEADS * s_times_s * b / (TP if attention_over_tp else 1)
    return (states + layers * (lin + (scores if attention else 0.0))) / 1e9


POINTS = [(2048, 2), (4096, 2), (1024, 1), (8192, 1), (4096, 4), (2048, 4)]


def test_the_scenario_is_the_story():
    assert drop10.SCENARIO["model"] == MODEL
    assert drop10.SCENARIO["cluster"] == get_cluster("a100-80gb", n_nodes=4)
    assert drop10.SCENARIO["global_batch"] * 4096 == drop10.SCENARIO_BEFORE["global_batch"] * 2048
    assert drop10.SCENARIO["assumptions"] == {"flash_attention": False}
    assert plan(**_args(drop10.SCENARIO_BEFORE), **drop10.CRASHED).fits
    assert not plan(**_args(drop10.SCENARIO), **drop10.CRASHED).fits
    # with memory-efficient attention (the planner's default) the same run fits:
    # 40 layers x sbh (10 + 24/4) with s = 4096, b = 2, h = 5120, plus the states
    fits = plan(**{**_args(drop10.SCENARIO), "flash_attention": True}, **drop10.CRASHED)
    assert fits.fits
    # (within 1%: the embedding/output extras of Korthikanti Section 4.3 are 0.3 GB here)
    assert fits.memory.total / 1e9 == pytest.approx(by_hand(4096, 2, attention=False), rel=0.01)


def _args(scenario):
    return {k: scenario[k] for k in ("model", "cluster", "global_batch", "seq_len")
            } | scenario["assumptions"]


@pytest.mark.parametrize("s, b", POINTS)
def test_the_hand_formula_passes_everywhere_the_hidden_test_looks(s, b):
    got = by_hand(s, b)
    assert drop10.gb_mistake(got, s, b) is None
    # the visible check's stored cases come from the same sum without the extras
    assert drop10.formula_gb(s, b) == pytest.approx(got, rel=1e-12)
    # the only difference is Korthikanti Section 4.3's embedding/output extras, under 0.5%
    assert 0 < drop10.expected_gb(s, b) - got < 0.005 * got


@pytest.mark.parametrize("slip, named", [
    (dict(optimizer_bytes=0.0), "you left out the optimizer states"),
    (dict(optimizer_sharded=False), "not sharded"),
    (dict(optimizer_bytes=8.0), "master copy"),
    (dict(states_over_tp=False), "not divided over tp=4"),
    (dict(attention_over_tp=False), "attention term is not divided by tp"),
    (dict(attention=False), "you left out the attention scores"),
    (dict(attention_exponent=1), "grows linearly with s"),
    (dict(layers=1), "one layer's activations"),
    (dict(linear=lambda s, b: s * b * H * 34 / TP), "all 34 sbh"),
])
def test_each_usual_slip_is_named_where_the_visible_check_looks(slip, named):
    s, b = 4096, 2
    message = drop10.gb_mistake(by_hand(s, b, **slip), s, b)
    assert message is not None and named in message, message


SLIPS = [dict(optimizer_bytes=0.0), dict(optimizer_sharded=False), dict(optimizer_bytes=8.0),
         dict(states_over_tp=False), dict(attention_over_tp=False), dict(attention=False),
         dict(attention_exponent=1), dict(layers=1), dict(linear=lambda s, b: s * b * H * 34 / TP)]


def test_every_point_the_hidden_test_may_draw_passes_the_hand_formula_and_refuses_every_slip():
    cases = drop10.gb_cases()
    assert len(cases) >= 20 and (2048, 2) not in cases        # enough to draw from; see below
    for s, b in cases:
        assert drop10.gb_mistake(by_hand(s, b), s, b) is None, (s, b)
        for slip in SLIPS:
            assert drop10.gb_mistake(by_hand(s, b, **slip), s, b) is not None, (s, b, slip)


def test_the_points_left_out_are_where_a_slip_hides():
    # at 2,048 tokens a linear attention term equals the right one; with hundreds of GB of
    # activations the optimizer states fall inside the tolerance
    assert drop10.gb_mistake(by_hand(2048, 2, attention_exponent=1), 2048, 2) is None
    assert drop10.gb_mistake(by_hand(16384, 4, optimizer_bytes=0.0), 16384, 4) is None
    assert (16384, 4) not in drop10.gb_cases()


def test_the_hidden_draw_gives_distinct_points_that_change_from_draw_to_draw():
    import random

    draws = [tuple(drop10.draw_gb_cases(random.Random(seed))) for seed in range(20)]
    assert all(len(set(d)) == 4 and set(d) <= set(drop10.gb_cases()) for d in draws)
    assert len(set(draws)) > 10


def test_units_are_named():
    right = by_hand(4096, 2)
    assert "GiB" in drop10.gb_mistake(right * 1e9 / 2**30, 4096, 2)
    assert "bytes" in drop10.gb_mistake(right * 1e9, 4096, 2)


def test_plain_gb_refuses_impostors():
    class AlwaysEqual(float):
        def __eq__(self, other):
            return True
    with pytest.raises(AssertionError, match="should be a number"):
        drop10.plain_gb(AlwaysEqual(1.0))


def test_the_graded_mistakes_score_as_grading_json_says():
    s = drop10.SCENARIO
    full = judge_scenario(s, dict(drop10.CRASHED, recompute="full"))
    assert full.feasible and full.score == 0.5 and full.slowdown > 1.1
    sp_alone = judge_scenario(s, dict(drop10.CRASHED, sequence_parallel=True))
    assert not sp_alone.feasible and sp_alone.violations[0].rule == "memory"


def test_an_error_in_the_answer_names_the_drawn_call():
    with pytest.raises(AssertionError, match=r"gb_per_gpu\(3072, 3\) raised ValueError"):
        drop10.ask_gb(lambda s, b: int("not a number"), 3072, 3)


def test_the_diagnosis_reference_is_the_formula_by_hand():
    # Korthikanti Table 2 written out: 40 layers of sbh(10 + 24/t) and 5as^2b/t at s=4096, b=2, t=4
    s, b = 4096, 2
    want = {"linear": LAYERS * s * b * H * (10 + 24 / TP) / 1e9,
            "scores": LAYERS * 5 * HEADS * s * s * b / TP / 1e9}
    got = drop10.oom_terms_gb()
    assert set(got) == set(want) and all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)
    # the diagnosis the exercise asks for: the scores alone take more than the states and
    # the linear term together leave free, and they grew fourfold from 2,048 tokens
    states = by_hand(s, b, attention=False) - want["linear"]
    assert states + want["linear"] < 80 < states + want["linear"] + want["scores"]
    assert by_hand(2048, 2) < 80


def test_the_diagnosis_catalogue_is_judged_and_named():
    from autograder.references import catalogue

    right = drop10.oom_terms_gb()
    catalogue.judge_fixed("drop10", "oom_terms_answer", dict(right))
    rounded = {k: round(v, 1) for k, v in right.items()}          # the stated 1% takes a rounding
    catalogue.judge_fixed("drop10", "oom_terms_answer", rounded)
    for wrong, named in (({**right, "scores": right["scores"] * TP}, "not divided by tp"),
                         ({**right, "scores": right["scores"] / 4096}, "has one s"),
                         ({k: v / LAYERS for k, v in right.items()}, "one layer"),
                         ({k: v * 1e9 / 2**30 for k, v in right.items()}, "GiB")):
        with pytest.raises(AssertionError, match=named):
            catalogue.judge_fixed("drop10", "oom_terms_answer", wrong)
    with pytest.raises(AssertionError, match="is not right"):
        catalogue.judge_fixed("drop10", "oom_terms_answer", {**right, "linear": right["linear"] * 1.05})
