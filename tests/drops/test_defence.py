"""The graded defence of drops 13 and 14 (autograder/references/defence.py), judged in
process: the reference's numbers against derivations by hand written here, the solution
passing, every catalogued mistake failing on its part only and named, the 3% tolerance
far below the gap to every mistake, and the rivals' verdicts as the notebooks say them."""
from pathlib import Path

import nbformat
import pytest

from autograder import spec
from autograder.cases import defined, solution_code
from autograder.references import defence
from autograder.references import drop13 as reference13
from autograder.references import drop14 as reference14
from threeaxes.scenarios import drop13, drop14

ROOT = Path(__file__).resolve().parents[2]
DROPS = {"drop13": ("drop13-size-30b-on-32", drop13), "drop14": ("drop14-defend-70b-on-64", drop14)}
SETUP = {"drop13": reference13.DEFENCE_SETUP, "drop14": reference14.DEFENCE_SETUP}
ANSWER = "my_defence_answer"


def exercise(drop):
    folder = ROOT / "source" / DROPS[drop][0]
    nb = nbformat.read(folder / f"{DROPS[drop][0]}.ipynb", as_version=4)
    return spec.load(folder / "grading.json").exercise(ANSWER).entry, nb


def bound(code, setup):
    return defined(code, "my_defence", setup), defined(code, "rivals", setup)


def my_config(drop):
    _, nb = exercise(drop)
    return defined(solution_code(nb, "my_config_answer"), "my_config", SETUP[drop])


def test_drop13_numbers_by_hand():
    # LLaMA-30B: N = 32.5e9, s = 2048, h = 6656, L = 60; dp=4 tp=2 pp=4 b=1, ZeRO-1, sp: m = 128.
    s, h, L, N, m = 2048, 6656, 60, drop13.SCENARIO["model"].n_params, 128
    got = defence.numbers_reference(drop13.SCENARIO, dict(dp=4, tp=2, pp=4, micro_batch=1, zero_stage=1,
                                                          sequence_parallel=True))
    assert got["state_gb"] == pytest.approx(N / 8 * (2 + 2 + 12 / 4) / 1e9, rel=1e-12)
    assert got["bubble"] == pytest.approx(3 / 131, rel=1e-12)
    # the stage's edges cross nodes (dp x tp = 8 fills one node); the replicas stay inside it
    assert got["slow_link_gb"] == pytest.approx(2 * m * 2 * s * h / 2 / 1e9, rel=1e-12)
    # L layers' worth of 34 s h / t, plus the embedding's masks (under 1%)
    assert got["activation_gb"] == pytest.approx(34 * s * h / 2 * L / 1e9, rel=0.01)


def test_slow_links_by_zero_stage_by_hand():
    """A replica group over 32 GPUs crosses nodes: ring bytes of the 2-byte slice."""
    N, n = drop13.SCENARIO["model"].n_params, 32
    base = dict(dp=32, tp=1, pp=1, micro_batch=1)          # m = 16
    for zero, copies in ((0, 2), (1, 2), (2, 16 + 1), (3, 3 * 16)):
        got = defence.slow_link_bytes(drop13.SCENARIO, dict(base, zero_stage=zero))
        assert got == pytest.approx(copies * (n - 1) / n * 2 * N, rel=1e-12), zero
    # four replicas of tp = 2 fill one node: nothing crosses but the pipeline
    assert defence.slow_link_bytes(drop13.SCENARIO, dict(dp=4, tp=2, pp=4, micro_batch=1)) == \
        pytest.approx(2 * 128 * 2 * 2048 * 6656, rel=1e-12)


@pytest.mark.parametrize("drop", DROPS)
def test_the_solution_passes(drop, capsys):
    entry, nb = exercise(drop)
    setup = SETUP[drop]
    numbers, rivals = bound(solution_code(nb, ANSWER), setup)
    scenario, module = DROPS[drop][1].SCENARIO, DROPS[drop][1]
    defence.judge_numbers(drop, scenario, my_config(drop), numbers)
    defence.judge_rivals(drop, scenario, module.RIVALS, rivals)
    assert "within 3%" in capsys.readouterr().out   # the rivals' line


@pytest.mark.parametrize("drop", DROPS)
def test_every_mistake_fails_its_part_only_and_is_named(drop):
    entry, nb = exercise(drop)
    setup = SETUP[drop]
    scenario, rivals_of = DROPS[drop][1].SCENARIO, DROPS[drop][1].RIVALS
    assert len(entry["mistakes"]) >= 5
    parts = {m["part"] for m in entry["mistakes"]}
    assert parts == {"my_defence", "rivals"}
    for m in entry["mistakes"]:
        numbers, rivals = bound("\n".join(m["code"]), setup)
        judged = {"my_defence": lambda: defence.judge_numbers(drop, scenario, my_config(drop), numbers),
                  "rivals": lambda: defence.judge_rivals(drop, scenario, rivals_of, rivals)}
        with pytest.raises(AssertionError) as failed:
            judged[m["part"]]()
        assert m["says"] in str(failed.value), (m["name"], str(failed.value))
        other = ({"my_defence", "rivals"} - {m["part"]}).pop()
        judged[other]()          # the other part is the solution's


@pytest.mark.parametrize("drop", DROPS)
def test_the_tolerance_is_far_from_every_numbers_mistake(drop):
    """Each mistake's numbers are off by more than twice the tolerance a right count has."""
    entry, nb = exercise(drop)
    setup = SETUP[drop]
    want = defence.numbers_reference(DROPS[drop][1].SCENARIO, my_config(drop))
    for m in entry["mistakes"]:
        if m["part"] != "my_defence":
            continue
        numbers, _ = bound("\n".join(m["code"]), setup)
        assert any(abs(numbers[k] / want[k] - 1) > 2 * defence.NUMBER_REL[k] for k in want if want[k]), m["name"]


def test_the_rivals_lose_as_the_notebooks_say():
    """The reasons the solutions give, from the cost model as it is now."""
    reasons = {name: defence.rival_reference(drop13.SCENARIO, c)[0] for name, c in drop13.RIVALS.items()}
    assert reasons == {"zero3_only": "slow_links", "tp_across_nodes": "tp_heads"}
    reasons = {name: defence.rival_reference(drop14.SCENARIO, c)[0] for name, c in drop14.RIVALS.items()}
    assert reasons == {"deep_pipeline_no_dp": "tp_comm", "zero3_no_pipeline": "memory",
                       "tp_across_nodes": "tp_kv_heads"}


def test_a_rival_breaking_two_rules_may_be_answered_with_either(capsys):
    rivals = {"zero3_only": ("slow_links", defence.rival_reference(drop13.SCENARIO, drop13.RIVALS["zero3_only"])[1]),
              "tp_across_nodes": ("tp_node", 16 / 8)}
    defence.judge_rivals("drop13", drop13.SCENARIO, drop13.RIVALS, rivals)
    with pytest.raises(AssertionError, match="not what stops or slows"):
        defence.judge_rivals("drop13", drop13.SCENARIO, drop13.RIVALS, dict(rivals, tp_across_nodes=("memory", 2.0)))


def test_a_broken_my_config_has_no_numbers_and_objects_are_refused():
    bad = dict(dp=4, tp=8, pp=1, micro_batch=1, zero_stage=1)
    numbers = dict(state_gb=1.0, activation_gb=1.0, bubble=0.0, slow_link_gb=1.0)
    with pytest.raises(AssertionError, match="fix my_config first"):
        defence.judge_numbers("drop13", drop13.SCENARIO, bad, numbers)

    class Anything(float):
        def __eq__(self, other):
            return True
    with pytest.raises(AssertionError):
        defence.judge_numbers("drop13", drop13.SCENARIO, my_config("drop13"),
                              {k: Anything(1.0) for k in numbers})


def test_the_reveal_evaluates_the_layouts_it_is_given_and_ranks_nothing(monkeypatch, capsys):
    """widgets.config.candidate_breakdown: plan's own figures for the student's layout (and
    the fastest, when given), term by term; it never calls search."""
    import threeaxes.cost as cost
    import threeaxes.widgets.config as widget
    from threeaxes.widgets.config import candidate_breakdown

    def no_search(*args, **kwargs):
        raise AssertionError("the reveal's breakdown must not rank")
    monkeypatch.setattr(cost, "search", no_search)
    monkeypatch.setattr(widget, "search", no_search)
    config = dict(dp=4, tp=2, pp=4, micro_batch=1, zero_stage=1, sequence_parallel=True)
    fig = candidate_breakdown(drop13.SCENARIO, config)
    out = capsys.readouterr().out
    r = cost.plan(drop13.SCENARIO["model"], drop13.SCENARIO["cluster"], 512, **config)
    assert f"activations {r.memory.activations / cost.GB:.1f}" in out and f"= {r.time.total:.2f} s" in out
    assert "fits" in out and "fastest" not in out and len(fig.axes) >= 2
    candidate_breakdown(drop13.SCENARIO, config, best=r)
    assert "yours takes 1.00x the fastest step" in capsys.readouterr().out
