"""Drop 12's reference checks: the bubble against simulated plans (an independent
code path: the schedule's slots, timed with a backward twice a forward), the named
slips written out by hand, and the configuration rules of the scenario judged by
the cost model at test time (no step time pasted in)."""
import math
import random

import pytest

from autograder.references import drop12
from autograder.references.sizing import grade_configuration, judge_scenario
from threeaxes.cost import plan, search
from threeaxes.pipeline import simulate
from threeaxes.pipeline.schedules import make_plan
from threeaxes.pipeline.torch_plans import torch_plan


def _simulated(p, m, v):
    schedule = "1f1b" if v == 1 else "interleaved"
    return float(simulate(make_plan(schedule, p, m, v), forward_cost=1, backward_cost=2).idle_fraction)


DRAWN = [drop12.draw_bubble_case(random.Random(seed), interleaved=seed % 2 == 1)
         for seed in range(300)]
DRAWN_BAD = [drop12.draw_bad_interleave_case(random.Random(seed)) for seed in range(300)]
DRAWN_RELAXED = [drop12.draw_relaxed_only_case(random.Random(seed)) for seed in range(300)]


@pytest.mark.parametrize("p, m, v", [(8, 13, 1), (2, 7, 1), (4, 8, 2), (6, 12, 4), *DRAWN[:16]])
def test_reference_bubble_equals_the_simulated_plan(p, m, v):
    assert drop12.reference_bubble(p, m, v) == pytest.approx(_simulated(p, m, v), rel=1e-12)
    assert drop12.bubble_mistake(_simulated(p, m, v), p, m, v) is None


def test_the_scenario_is_8_stages_and_13_micro_batches_idling_7_of_20():
    result = plan(drop12.SCENARIO["model"], drop12.SCENARIO["cluster"],
                  drop12.SCENARIO["global_batch"], **drop12.CURRENT)
    assert (result.pp, result.micro_batches, result.virtual_stages) == (8, 13, 1)
    assert result.bubble_fraction == pytest.approx(7 / 20) and result.fits


@pytest.mark.parametrize("p, m, v, wrong, phrase", [
    (8, 13, 1, 7 / 13, "Megatron's bubble overhead"),            # (p - 1)/m
    (4, 8, 2, 3 / 16, "Megatron's bubble overhead"),             # (p - 1)/(v m)
    (4, 8, 2, 3 / 11, "you left out v"),                         # (p - 1)/(m + p - 1)
    (8, 13, 1, 13 / 20, "busy, not idle"),                       # 1 - 7/20
    (8, 13, 1, 35.0, "not a percentage"),
    (8, 13, 1, 0.3, "expected 0.35"),
])
def test_each_slip_is_named(p, m, v, wrong, phrase):
    assert phrase in drop12.bubble_mistake(wrong, p, m, v)


def test_every_drawn_case_runs_and_the_draws_cover_both_schedules():
    """The hidden test's draws: p >= 2 (one stage idles nothing), v > 1 only with m a
    multiple of p; each is accepted at the reference and the overhead slip refused."""
    assert {v > 1 for _, _, v in DRAWN} == {True, False} and len(set(DRAWN)) > 200
    for p, m, v in DRAWN:
        assert p >= 2 and m >= 1 and (v == 1 or m % p == 0), (p, m, v)
        right = (p - 1) / (v * m + p - 1)
        assert drop12.bubble_mistake(right, p, m, v) is None
        assert "Megatron's bubble overhead" in drop12.bubble_mistake((p - 1) / (v * m), p, m, v)
    assert all(p >= 2 and v >= 2 and m % p for p, m, v in DRAWN_BAD)
    # Megatron refuses these and PyTorch runs them: its rule written from its docstring,
    # rounds = max(1, m // p), m % rounds == 0; and PyTorch's class builds the plan
    assert all(v >= 2 and m % p and m % max(1, m // p) == 0 for p, m, v in DRAWN_RELAXED)
    assert len(set(DRAWN_RELAXED)) > 100
    for p, m, v in DRAWN_RELAXED[:10]:
        torch_plan("interleaved", p, m, v)


def test_an_interleaved_plan_that_cannot_run_must_be_refused():
    def refuses(p, m, v=1):
        if v > 1 and m % p:
            raise ValueError("m must be a multiple of p")
        return (p - 1) / (v * m + p - 1)

    def accepts(p, m, v=1):
        return (p - 1) / (v * m + p - 1)

    def pytorchs_rule(p, m, v=1):          # grading.json's pytorchs_rule_for_megatrons_schedule
        if v > 1 and m % max(1, m // p):
            raise ValueError("m must split into max(1, m // p) equal rounds")
        return (p - 1) / (v * m + p - 1)

    for p, m, v in [(8, 13, 2), (4, 26, 2), (16, 52, 3), *DRAWN_BAD, *DRAWN_RELAXED]:
        assert m % p and drop12.raises_for_bad_interleave(refuses, p, m, v) is None
        assert "Raise ValueError" in drop12.raises_for_bad_interleave(accepts, p, m, v)
        with pytest.raises(ValueError, match="multiple of"):
            drop12.reference_bubble(p, m, v)
    # following PyTorch's rule misses every case the hidden test draws with draw_relaxed_only_case
    for p, m, v in [(8, 13, 2), *DRAWN_RELAXED]:
        assert "asks about Megatron's" in drop12.raises_for_bad_interleave(pytorchs_rule, p, m, v)

    def bare(p, m, v=1):                    # grading.json's bare_value_error
        if v > 1 and m % p:
            raise ValueError
        return (p - 1) / (v * m + p - 1)

    assert "bare ValueError" in drop12.raises_for_bad_interleave(bare, 8, 13, 2)


def test_the_visible_form_of_an_answer_is_its_number_or_its_refusal():
    def right(p, m, v=1):
        if v > 1 and m % p:
            raise ValueError("m must be a multiple of p")
        return (p - 1) / (v * m + p - 1)

    for p, m, v in [(8, 13, 1), (4, 8, 2), (8, 13, 2), (4, 9, 2)]:
        assert drop12.value_or_refusal(right, p, m, v) == drop12.bubble_outcome(p, m, v)
    assert drop12.bubble_outcome(8, 13, 2) == "raises ValueError"
    assert drop12.bubble_outcome(8, 13, 1) == pytest.approx(7 / 20)
    with pytest.raises(AssertionError, match=r"bubble\(8, 13, 1\) raised ZeroDivisionError"):
        drop12.value_or_refusal(lambda p, m, v: 1 / 0, 8, 13, 1)


@pytest.mark.parametrize("change, phrase", [
    ({}, "not under the 25% target"),                                   # the run as it is
    ({"tp": 8, "pp": 4, "zero_stage": 0}, "a layout that does not fit meets no target"),
    ({"micro_batch": 13}, "keeps it at 1"),                             # m = 1: one micro-batch
])
def test_target_mistake_names_what_is_wrong(change, phrase):
    assert phrase in drop12.target_mistake({**drop12.CURRENT, **change})


def test_target_mistake_accepts_fewer_stages_and_refuses_a_broken_rule():
    assert drop12.target_mistake({**drop12.CURRENT, "tp": 8, "pp": 4}) is None
    with pytest.raises(ValueError, match="tp=16 does not fit in one node"):
        drop12.target_mistake({**drop12.CURRENT, "tp": 16, "pp": 2})


def test_the_graders_best_keeps_the_micro_batch_and_meets_the_target():
    s = drop12.SCENARIO
    best = search(s["model"], s["cluster"], s["global_batch"], only_fitting=True, top=1)[0]
    assert best.micro_batch == drop12.MICRO_BATCH
    assert best.bubble_fraction < drop12.BUBBLE_TARGET


def test_grading_mistakes_score_as_grading_json_says(capsys):
    s = drop12.SCENARIO
    with pytest.raises(AssertionError, match="tp=16 does not fit in one node of 8 GPUs"):
        grade_configuration({**drop12.CURRENT, "tp": 16, "pp": 2}, s, points=3)
    slow = {**drop12.CURRENT, "tp": 8, "pp": 4, "recompute": "full"}
    verdict = judge_scenario(s, slow)
    assert verdict.feasible and verdict.slowdown > 1.10 and not math.isinf(verdict.slowdown)
    assert grade_configuration(slow, s, points=3) == 1.5
    assert "earns full marks" in capsys.readouterr().out
    assert drop12.target_mistake(slow) is None


# Issue 34, section 4: the micro-batch diagnosis names the micro-batch, and a layout that breaks
# several rules hears each of them, the most important first. The expected figures are worked
# by hand: m = B / (dp x b), bubble = (p - 1) / (m + p - 1).
MICRO_TWO = dict(dp=2, tp=8, pp=8, micro_batch=2, zero_stage=1, recompute="selective",
                 sequence_parallel=True)        # p unchanged at 8, the freed GPUs went to tp


def _diagnosis(config):
    from threeaxes.grading import visible_config
    return visible_config.diagnose(visible_config.load("drop12")["my_config_answer"], config)


def test_a_micro_batch_of_two_is_named_and_not_told_it_doubled_p():
    found = _diagnosis(MICRO_TWO)
    rules = [rule for rule, _, _ in found]
    assert rules[:2] == ["micro_batch_fixed", "bubble"], found      # the cause first, then its effect
    names = [name for _, name, _ in found]
    assert "micro_batch_of_two" in names and "deeper_pipeline_same_bubble" not in names, found
    bubble_said = found[1][2]
    m = 52 // (2 * 2)                                                  # 13, as before the change
    assert f"m = 52 / (dp=2 x micro_batch=2) = {m} micro-batches on p=8 stages" in bubble_said
    assert f"{(8 - 1) / (m + 8 - 1):.1%}" == "35.0%" and "35.0%" in bubble_said
    assert "doubling p" not in " ".join(said for _, _, said in found)


def test_the_deeper_pipeline_slip_is_still_named_where_p_did_double():
    found = _diagnosis(dict(dp=2, tp=4, pp=16, micro_batch=1, zero_stage=1))
    assert ("bubble", "deeper_pipeline_same_bubble") in [(r, n) for r, n, _ in found]
    # a pipeline four times deeper is not that slip: the check says what the numbers are instead
    found = _diagnosis(dict(dp=1, tp=4, pp=32, micro_batch=1, zero_stage=1))
    bubble = [(n, said) for r, n, said in found if r == "bubble"]
    assert bubble and bubble[0][0] is None and f"{31 / (52 + 31):.1%}" in bubble[0][1], found


def test_a_layout_breaking_several_rules_hears_each_the_most_important_first():
    found = _diagnosis(dict(dp=4, tp=16, pp=2, micro_batch=2, zero_stage=1))
    rules = [rule for rule, _, _ in found]
    # tp across nodes stops the layout from running at all; 13 sequences per replica do not
    # split into micro-batches of 2; and the scenario keeps micro-batches of 1 anyway
    assert rules == ["tp_node", "micro_batch", "micro_batch_fixed"], found
    found = _diagnosis(dict(dp=2, tp=8, pp=8, micro_batch=2, zero_stage=0))
    assert [rule for rule, _, _ in found] == ["micro_batch_fixed", "memory"], found


def test_the_second_cells_visible_check_fails_naming_the_micro_batch_before_the_bubble():
    from threeaxes.grading import visible_config
    with pytest.raises(AssertionError) as caught:
        visible_config.check("drop12", "my_config_answer", MICRO_TWO,
                             fail_on=("bubble", "micro_batch_fixed"))
    said = str(caught.value)
    assert said.index("micro_batch=1") < said.index("idles 35.0%"), said


def test_target_mistake_names_every_problem_the_micro_batch_first():
    said = drop12.target_mistake(MICRO_TWO)
    assert said.index("micro-batch holds 2 sequences") < said.index("m = 52 / (dp=2 x micro_batch=2) = 13")
    assert "idles 35.0% of the step" in said
    # one that keeps the micro-batch but does not fit hears only about memory
    said = drop12.target_mistake({**drop12.CURRENT, "tp": 8, "pp": 4, "zero_stage": 0})
    assert "does not fit" in said and "micro-batch" not in said


# Issue 34, section 4: exercise 1 asks for "a ValueError with a message that names the rule";
# a message that says something else is a slip of its own, told apart from a bare ValueError.
def _refusing(message):
    def bubble(p, m, v=1):
        if v > 1 and m % p:
            raise ValueError(message) if message is not None else ValueError
        return (p - 1) / (v * m + p - 1)
    return bubble


@pytest.mark.parametrize("message, outcome", [
    ("m=13 is not a multiple of p=8", "raises ValueError"),
    ("m must be divisible by p", "raises ValueError"),
    ("p does not divide m", "raises ValueError"),
    ("m % p != 0", "raises ValueError"),
    ("Megatron interleaves in groups of p micro-batches", "raises ValueError"),
    ("cannot interleave this pipeline", "raises ValueError whose message does not name the rule"),
    ("bad input", "raises ValueError whose message does not name the rule"),
    (None, "raises ValueError without a message"),
])
def test_a_refusal_counts_only_when_its_message_names_the_rule(message, outcome):
    assert drop12.value_or_refusal(_refusing(message), 8, 13, 2) == outcome
    said = drop12.raises_for_bad_interleave(_refusing(message), 8, 13, 2)
    if outcome == "raises ValueError":
        assert said is None
    else:
        assert "multiple of p" in said and ("bare" in said) == (message is None), said


def test_the_levers_reference_is_the_bubble_formula_by_hand():
    # (p - 1)/(m + p - 1) with m = 52 / (dp x 1): fewer stages p=4, m=13; fewer replicas p=8, m=26
    got = drop12.lever_bubbles()
    assert got == pytest.approx({"fewer_stages": 3 / 16, "fewer_replicas": 7 / 33}, rel=1e-12)
    # both levers land under the team's target, from a current layout over it
    assert all(v < drop12.BUBBLE_TARGET for v in got.values()) and 7 / 20 > drop12.BUBBLE_TARGET


def test_the_levers_catalogue_is_judged_and_named():
    from autograder.references import catalogue

    right = {"fewer_stages": 3 / 16, "fewer_replicas": 7 / 33}
    catalogue.judge_fixed("drop12", "lever_bubbles_answer", right)
    catalogue.judge_fixed("drop12", "lever_bubbles_answer", {k: round(v, 3) for k, v in right.items()})
    for wrong, named in (({"fewer_stages": 3 / 13, "fewer_replicas": 7 / 26}, "idle over busy"),
                         ({**right, "fewer_replicas": 7 / 20}, "m = 52 / 2 = 26"),
                         ({k: 100 * v for k, v in right.items()}, "percentage"),
                         ({k: 1 - v for k, v in right.items()}, "busy share"),
                         ({"fewer_stages": 4 / 16, "fewer_replicas": 8 / 33}, "p - 1 slots"),
                         ({**right, "fewer_stages": 7 / 20}, "p = 4")):
        with pytest.raises(AssertionError, match=named):
            catalogue.judge_fixed("drop12", "lever_bubbles_answer", wrong)
    with pytest.raises(AssertionError, match="is not right"):
        catalogue.judge_fixed("drop12", "lever_bubbles_answer", {**right, "fewer_stages": 0.15})
