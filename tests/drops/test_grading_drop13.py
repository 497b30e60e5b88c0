"""Drop 13's scenario and references: the model-parallel floor against a
derivation by hand and a brute force written here, every named slip
recognised, the story the notebook and grading.json tell checked against the
cost model as it is now, and the configuration explorer on the scenario."""
import random
from pathlib import Path

import pytest
from grading_harness import load_drop

from autograder.references import drop13
from autograder.references.sizing import judge_scenario
from threeaxes.cost import GB, get_cluster, get_model, plan, violations

ROOT = Path(__file__).resolve().parents[2]
DROP = load_drop(ROOT / "source/drop13-size-30b-on-32")   # its grading.json, read and checked once
CONFIG_CELL = "my_config_fits_and_is_near_the_best"


def floor_by_brute_force(model, cluster, bytes_per_param=16):
    """Every tp and pp from 1 up, the rules written out again (not valid_tp / divisors)."""
    best = None
    for tp in range(1, cluster.n_gpus + 1):
        if (model.n_heads % tp or model.kv_heads % tp or tp > cluster.gpus_per_node
                or cluster.gpus_per_node % tp):
            continue
        for pp in range(1, cluster.n_gpus // tp + 1):
            if model.n_layers % pp or cluster.n_gpus % (tp * pp):
                continue
            if bytes_per_param * model.n_params / (tp * pp) <= cluster.hbm_bytes:
                best = tp * pp if best is None else min(best, tp * pp)
    return best


def scenario_case(name, kind, nodes):
    return get_model(name), get_cluster(kind, n_nodes=nodes)


def test_floor_by_hand_for_the_scenario_and_two_others():
    # 30B: 16 x 32.5e9 = 520 GB = 6.5 GPUs; 52 heads -> tp in {1, 2, 4}; 60 layers and
    # 32 / tp GPUs -> pp in {1, 2, 4}; the products 1, 2, 4, 8, 16: the first >= 6.5 is 8.
    assert drop13.model_parallel_floor(drop13.SCENARIO["model"], drop13.SCENARIO["cluster"]) == 8
    # 70B on 64: 16 x 69.0e9 = 1,104 GB = 13.8 GPUs; every allowed product is a power of 2: 16.
    assert drop13.model_parallel_floor(*scenario_case("70B", "a100-80gb", 8)) == 16
    # 175B on 128: 2,800 GB = 35 GPUs; tp <= 8 and pp | gcd(96, 128 / tp) are powers of 2: 64.
    assert drop13.model_parallel_floor(*scenario_case("175B", "a100-80gb", 16)) == 64


@pytest.mark.parametrize("case", [("30B", "a100-80gb", 4), ("70B", "a100-80gb", 8),
                                  ("13B", "a100-80gb", 1), ("7B", "h100-80gb", 2),
                                  ("175B", "a100-80gb", 16), ("30B", "h100-80gb", 2)])
def test_floor_equals_a_brute_force_and_the_right_answer_has_no_mistake(case):
    model, cluster = scenario_case(*case)
    want = floor_by_brute_force(model, cluster)
    assert drop13.model_parallel_floor(model, cluster) == want
    assert drop13.floor_mistake(want, model, cluster) is None


def test_every_drawn_case_overflows_one_gpu_fits_the_cluster_and_is_rebuilt_by_its_code():
    """The hidden test's draws: the brute force finds a floor above 1 (so counting fewer
    bytes per parameter shows), the reference agrees, and `how` builds the same pair."""
    from threeaxes.cost import custom_model  # noqa: F401 - `how` names it

    floors = set()
    for seed in range(200):
        model, cluster, how = drop13.draw_floor_case(random.Random(seed))
        want = floor_by_brute_force(model, cluster)
        assert want is not None and want > 1, how
        assert drop13.model_parallel_floor(model, cluster) == want
        assert drop13.floor_mistake(want, model, cluster) is None
        floors.add(want)
        again_model, again_cluster = eval(how.replace(" on ", ", "))  # "m on c" -> (m, c)
        assert (again_model, again_cluster) == (model, cluster), how
    assert len(floors) >= 4


@pytest.mark.parametrize("case, got, words", [
    (("30B", "a100-80gb", 4), 2, "you forgot the optimizer state"),
    (("30B", "a100-80gb", 4), 1, "holds only the fp16 weights"),
    (("30B", "a100-80gb", 4), 7, "no allowed split has that many pieces"),
    (("175B", "a100-80gb", 16), 32, "remember the fp32 master copy"),
    (("30B", "a100-80gb", 4), 3, "not the smallest allowed tp * pp"),
])
def test_floor_mistakes_are_named(case, got, words):
    model, cluster = scenario_case(*case)
    assert words in drop13.floor_mistake(got, model, cluster)


def test_the_scenario_story_holds_under_the_current_cost_model():
    s = drop13.SCENARIO
    model, cluster, batch = s["model"], s["cluster"], s["global_batch"]
    assert 16 * model.n_params > cluster.hbm_bytes                         # rule 1 bites
    assert [v.rule for v in violations(model, cluster, batch, dp=4, tp=8, pp=1,
                                       micro_batch=1)] == ["tp_heads"]      # rule 2 bites
    for shape in ((32, 1, 1), (8, 4, 1)):                                  # the two alternatives
        r = drop13.best_for_shape(s, *shape)
        assert r is not None and r.fits and (r.dp, r.tp, r.pp) == shape
    # the solution's shape fits with single-sequence micro-batches and ZeRO-1
    assert plan(model, cluster, batch, dp=4, tp=2, pp=4, micro_batch=1, zero_stage=1,
                **s["assumptions"]).fits


def test_best_for_shape_is_no_slower_than_any_knob_setting_of_that_shape():
    s = drop13.SCENARIO
    r = drop13.best_for_shape(s, 8, 4, 1)
    for mbs in (1, 2, 4, 8):
        for zero in (0, 1, 2, 3):
            for rc in ("none", "selective", "full"):
                for sp in (False, True):
                    knobs = dict(micro_batch=mbs, zero_stage=zero, recompute=rc,
                                 sequence_parallel=sp)
                    other = plan(s["model"], s["cluster"], s["global_batch"], dp=8, tp=4, pp=1,
                                 **knobs, **s["assumptions"])
                    assert not other.fits or other.time.total >= r.time.total * (1 - 1e-12)


def _mistake_config(name):
    mistake = next(m for m in DROP.mistakes if m.name == name)
    code = "\n".join(line for line in mistake.code.splitlines() if line.startswith("my_config"))
    namespace = {}
    exec(code, namespace)
    return mistake, namespace["my_config"]


def test_grading_json_slow_mistake_fits_and_earns_the_partial_score_it_claims():
    mistake, config = _mistake_config("few_big_micro_batches")
    verdict = judge_scenario(drop13.SCENARIO, config)
    assert verdict.feasible and verdict.slowdown > 1.5, verdict.feedback
    assert dict(mistake.scores)[CONFIG_CELL] == DROP.points[CONFIG_CELL] * verdict.score


def test_grading_json_patched_grader_mistake_is_infeasible_for_the_reason_it_names():
    mistake, config = _mistake_config("patches_the_grader_with_tp8")
    verdict = judge_scenario(drop13.SCENARIO, config)
    assert not verdict.feasible and mistake.feedback in verdict.feedback


def test_the_configuration_explorer_on_the_scenario_ranks_like_the_search():
    from threeaxes.cost import search
    from threeaxes.widgets import ConfigExplorer

    s = drop13.SCENARIO
    explorer = ConfigExplorer(model="llama-30b", cluster="a100-80gb", n_gpus=32,
                              global_batch=s["global_batch"], seq_len=s["model"].seq_len, rows=5)
    # the widget plans with the planner's defaults, which is what the scenario assumes
    assert s["assumptions"] == {}
    ranked = search(s["model"], s["cluster"], s["global_batch"], only_fitting=True, top=5)
    assert [r.label for r in explorer.data.rows] == [r.label for r in ranked]
    explorer.set(pick=3)                                  # move the "show row" slider
    assert explorer.data.chosen.label == ranked[2].label
    assert f"{ranked[2].memory.total / GB:.1f} GB per GPU" in explorer.message.value


@pytest.mark.parametrize("model_spec, cluster_spec, got, words", [
    # 40 heads, 2 key/value heads, 43 layers (pp 1 or 43) on 344 GPUs: tp=4 would need 4 key/value heads
    (dict(name="m", n_layers=43, d_model=5120, n_heads=40, n_kv_heads=2), ["a100-80gb", 344], 4,
     "key/value heads"),
    # 80 layers of 56 heads on 128 GPUs: tp * pp = 10 (tp 2, pp 5) fits but 10 does not divide 128
    (dict(name="m", n_layers=80, d_model=7168, n_heads=56, n_kv_heads=8), ["a100-80gb", 128], 10,
     "must divide the cluster's GPUs"),
])
def test_the_hidden_test_names_a_rule_left_out(model_spec, cluster_spec, got, words):
    model, cluster = drop13.model_from(model_spec), drop13.cluster_from(cluster_spec)
    assert drop13.model_parallel_floor(model, cluster) != got
    assert words in drop13.floor_mistake(got, model, cluster)
