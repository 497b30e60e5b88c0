"""Drop 14's scenario and references: model states per GPU against the ZeRO
paper's Figure 1, every named slip recognised, the changed jobs, and the story
the notebook and grading.json tell checked against the cost model as it is now."""
import random
from pathlib import Path

import pytest
from grading_harness import load_drop

from autograder.references import drop14
from autograder.references.sizing import judge_scenario
from threeaxes.cost import GB, GiB, search
from threeaxes.scenarios import drop13

ROOT = Path(__file__).resolve().parents[2]
DROP = load_drop(ROOT / "source/drop14-defend-70b-on-64")   # its grading.json, read and checked once


@pytest.mark.parametrize("zero_stage, paper_gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_state_gb_equals_the_zero_papers_figure_1(zero_stage, paper_gb):
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (rounded in the paper)
    got = drop14.expected_state_gb(7.5e9, 64, 1, 1, zero_stage)
    assert got == pytest.approx(paper_gb, rel=5e-3)
    assert drop14.state_mistake(got, 7.5e9, 64, 1, 1, zero_stage) is None


def test_state_gb_splits_over_tp_times_pp_first():
    # 70B, tp=2 pp=8: 69e9 / 16 parameters each; ZeRO-1 over dp=4: 4 + 12 / 4 = 7 bytes each
    n = 68_976_648_192
    assert drop14.expected_state_gb(n, 4, 2, 8, 1) == pytest.approx(n / 16 * 7 / 1e9, rel=1e-12)


def wrong(n, dp, tp, pp, zero, *, k=12, shard=True, split=None, all_by_dp=False):
    """A value as a student would slip into it, written out again here."""
    psi = n / (split or tp * pp)
    if all_by_dp:
        return 16 * psi / dp / 1e9
    d = dp if shard else 1
    return (2 * psi / (d if zero >= 3 else 1) + 2 * psi / (d if zero >= 2 else 1)
            + k * psi / (d if zero >= 1 else 1)) / 1e9


CASE = (68_976_648_192, 4, 2, 8, 1)
CASE_DP8 = (68_976_648_192, 8, 2, 4, 1)    # with dp=4, 16 / dp equals the 4 bytes of no optimizer


@pytest.mark.parametrize("value, words", [
    (wrong(*CASE, k=0), "you forgot the optimizer state"),
    (wrong(*CASE, k=8), "remember the fp32 master copy"),
    (wrong(*CASE, shard=False), "ZeRO stage 1 shards over the 4 dp ranks"),
    (wrong(*CASE, split=2), "not tp alone"),
    (wrong(*CASE, split=8), "not pp alone"),
    (wrong(*CASE) * GB / GiB, "not GiB"),
    (wrong(*CASE) * 1e9, "not bytes"),
    (wrong(*CASE) * 1.5, "expected 16 bytes per parameter"),
])
def test_state_mistakes_are_named(value, words):
    assert words in drop14.state_mistake(value, *CASE)


def test_dividing_every_term_by_dp_is_named():
    value = wrong(*CASE_DP8, all_by_dp=True)
    assert "only the sharded terms are divided by dp" in drop14.state_mistake(value, *CASE_DP8)


@pytest.mark.parametrize("case", [(69_000_000_000, 64, 1, 1, 3), (32_500_000_000, 4, 2, 4, 1),
                                  (13_000_000_000, 2, 4, 1, 2), (175_000_000_000, 1, 8, 8, 0),
                                  (1_000_000, 3, 2, 5, 1)])
def test_a_right_answer_is_accepted(case):
    assert drop14.state_mistake(wrong(*case), *case) is None


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_every_drawn_case_accepts_the_right_answer_and_names_the_forgotten_optimizer(zero_stage):
    """The hidden test's draws, each ZeRO stage: the value written out here is accepted,
    16 bytes without the optimizer's 12 is refused, and dp > 1 lets ZeRO shard."""
    for seed in range(200):
        case = drop14.draw_state_case(random.Random(seed), zero_stage=zero_stage)
        n, dp, tp, pp, zero = case
        assert zero == zero_stage and dp >= 2 and n >= 10**6 and tp * pp >= 1, case
        assert drop14.state_mistake(wrong(*case), *case) is None
        assert drop14.state_mistake(wrong(*case, k=0), *case) is not None
        if zero_stage:
            assert drop14.state_mistake(wrong(*case, shard=False), *case) is not None


def test_variants_change_only_what_they_name():
    base = drop14.SCENARIO
    faster = drop14.changed_scenario("4x faster network between nodes")
    assert faster["cluster"].inter_node_bandwidth == 4 * base["cluster"].inter_node_bandwidth
    assert faster["cluster"].intra_node_bandwidth == base["cluster"].intra_node_bandwidth
    one_card = drop14.changed_scenario("one network card per node (not one per GPU)")
    assert (one_card["cluster"].nics, base["cluster"].nics) == (1, 8)
    assert one_card["cluster"].inter_node_bandwidth == base["cluster"].inter_node_bandwidth
    h100 = drop14.changed_scenario("H100 nodes")
    assert h100["cluster"].gpu.startswith("H100") and h100["cluster"].n_gpus == 64
    longer = drop14.changed_scenario("twice the context (8192 tokens, half the sequences)")
    tokens = longer["seq_len"] * longer["global_batch"]
    assert tokens == base["model"].seq_len * base["global_batch"]
    assert drop14.changed_scenario("as given") == base


def test_the_scenario_story_holds_under_the_current_cost_model():
    s = drop14.SCENARIO
    model, cluster = s["model"], s["cluster"]
    assert 16 * model.n_params > cluster.gpus_per_node * cluster.hbm_bytes    # overflows a node
    for shape in ((1, 8, 8), (8, 8, 1)):                                     # the two alternatives
        r = drop13.best_for_shape(s, *shape)
        assert r is not None and r.fits and (r.dp, r.tp, r.pp) == shape
    top5 = search(model, cluster, s["global_batch"], only_fitting=True, top=5, **s["assumptions"])
    assert len(top5) == 5 and all(r.time.compute > r.time.total / 2 for r in top5)


def test_grading_json_tp_across_nodes_is_infeasible_for_the_reason_it_names():
    mistake = next(m for m in DROP.mistakes if m.name == "tp_across_nodes")
    namespace = {}
    exec(mistake.code, namespace)
    verdict = judge_scenario(drop14.SCENARIO, namespace["my_config"])
    assert not verdict.feasible and mistake.feedback in verdict.feedback
    assert {v.rule for v in verdict.violations} == {"tp_node", "tp_kv_heads"}
