"""The cost model as a grader: every broken rule as data (constraints.violations), and
judge / grade_configuration scoring a student's own configuration against the search's best."""
import dataclasses
import math

import pytest

from autograder.references.sizing import grade_configuration
from threeaxes.cost import GB, check_config, get_cluster, get_model, judge, plan, search, violations
from threeaxes.grading.sizing import plain_config

MODEL, CLUSTER = get_model("30B"), get_cluster("a100-80gb", n_nodes=4)   # 52 heads, 60 layers, 32 GPUs
SCENARIO = {"model": MODEL, "cluster": CLUSTER, "global_batch": 512, "seq_len": None, "assumptions": {}}


def test_every_broken_rule_is_reported_at_once():
    found = violations(MODEL, CLUSTER, 512, dp=3, tp=16, pp=7, micro_batch=5, zero_stage=2)
    assert [v.rule for v in found] == ["gpus", "tp_heads", "pp_layers", "zero_pp", "tp_node", "batch_dp"]
    assert "dp(3) * tp(16) * pp(7) = 336 != n_gpus(32)" in found[0].message
    with pytest.raises(ValueError, match=r"6 problems with this configuration:\n- dp\(3\)"):
        check_config(MODEL, CLUSTER, 512, dp=3, tp=16, pp=7, micro_batch=5, micro_batches=None,
                     zero_stage=2, recompute="none", virtual_stages=1, allow_tp_across_nodes=False)


def test_a_valid_configuration_breaks_nothing_and_micro_batching_is_checked_after_dp():
    assert violations(MODEL, CLUSTER, 512, dp=4, tp=4, pp=2, micro_batch=2) == []
    (problem,) = violations(MODEL, CLUSTER, 512, dp=4, tp=4, pp=2, micro_batch=3)
    assert problem.rule == "micro_batch" and "choose micro_batch in" in problem.message
    (problem,) = violations(MODEL, CLUSTER, 512, dp=4, tp=4, pp=2, micro_batch=1, virtual_stages=4)
    assert problem.rule == "interleave"   # 60 layers do not split into 2 * 4 chunks


def test_the_best_configuration_scores_in_full_and_a_slower_one_partially():
    best = search(MODEL, CLUSTER, 512, only_fitting=True, top=1)[0]
    as_config = dict(dp=best.dp, tp=best.tp, pp=best.pp, micro_batch=best.micro_batch,
                     zero_stage=best.zero_stage, recompute=best.recompute,
                     virtual_stages=best.virtual_stages, sequence_parallel=best.sequence_parallel)
    top = judge(MODEL, CLUSTER, 512, config=as_config)
    assert (top.score, top.feasible, top.slowdown) == (1.0, True, 1.0)
    slow = dict(dp=2, tp=4, pp=4, micro_batch=1, zero_stage=1, recompute="full")
    verdict = judge(MODEL, CLUSTER, 512, config=slow, partial=0.4)
    expected = plan(MODEL, CLUSTER, 512, **slow).time.total / best.time.total
    assert verdict.slowdown == pytest.approx(expected) and expected > 1.1
    assert verdict.score == 0.4 and "within 10% of it earns full marks" in verdict.feedback


def test_a_configuration_that_does_not_fit_scores_zero_with_the_memory_named():
    config = dict(dp=32, tp=1, pp=1, micro_batch=16)       # plain DP: 16 bytes per parameter per GPU
    verdict = judge(MODEL, CLUSTER, 512, config=config)
    assert verdict.score == 0.0 and not verdict.feasible and math.isinf(verdict.slowdown)
    (memory,) = verdict.violations
    needs = plan(MODEL, CLUSTER, 512, **config).memory.total
    assert memory.rule == "memory" and f"needs {needs / GB:.1f} GB per GPU" in memory.message


def test_a_configuration_is_made_of_known_keys():
    with pytest.raises(ValueError, match="a configuration is made of"):
        judge(MODEL, CLUSTER, 512, config=dict(dp=4, tp=4, pp=2, micro_batch=1, data_parallel=4))


def test_grade_configuration_returns_the_points_earned_and_lists_every_problem(capsys):
    assert grade_configuration(dict(dp=2, tp=4, pp=4, micro_batch=1, zero_stage=1, recompute="full"),
                               SCENARIO, points=3) == 1.5
    assert "1.5 of 3 points" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"not feasible \(2 problems\)"):
        grade_configuration(dict(dp=4, tp=8, pp=2, micro_batch=1), SCENARIO, points=3)


class Sneaky(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__


@pytest.mark.parametrize("answer, message", [
    ((4, 4, 2), "should be a dict"),
    ({"dp": 4, "tp": 4, "pp": 2}, "needs dp, tp, pp and micro_batch"),
    ({"dp": 4, "tp": 4, "pp": 2, "micro_batch": 1, "gpus": 32}, "use only"),
    ({"dp": Sneaky(4), "tp": 4, "pp": 2, "micro_batch": 1}, "should be a whole number"),
    ({"dp": 4, "tp": 4, "pp": 2, "micro_batch": 0}, ">= 1"),
    ({"dp": 4, "tp": 4, "pp": 2, "micro_batch": 1, "recompute": "some"}, "is not one of"),
])
def test_answers_become_plain_values_or_say_what_to_fix(answer, message):
    with pytest.raises(AssertionError, match=message):
        plain_config(answer)


def test_a_verdict_states_the_node_rule_without_suggesting_the_planners_flag():
    small_nodes = dataclasses.replace(get_cluster("a100-80gb", n_nodes=16), gpus_per_node=2)   # 32 GPUs
    verdict = judge(MODEL, small_nodes, 512, config=dict(dp=4, tp=4, pp=2, micro_batch=1))
    (rule,) = verdict.violations
    assert rule.rule == "tp_node" and rule.message.endswith("choose tp in {1, 2}")
    (flagged,) = violations(MODEL, small_nodes, 512, dp=4, tp=4, pp=2, micro_batch=1)
    assert flagged.message.endswith("or pass allow_tp_across_nodes=True")


def test_search_options_limit_the_best_the_answer_is_compared_with():
    free = judge(MODEL, CLUSTER, 512, config=dict(dp=4, tp=4, pp=2, micro_batch=4))
    fixed = judge(MODEL, CLUSTER, 512, config=dict(dp=4, tp=4, pp=2, micro_batch=4),
                  search_options={"micro_batch_sizes": [4]})
    assert fixed.best.micro_batch == 4
    assert fixed.best == search(MODEL, CLUSTER, 512, micro_batch_sizes=(4,), only_fitting=True)[0]
    assert fixed.slowdown <= free.slowdown
