"""The configuration exercises' visible check (threeaxes/grading/visible_config.py) on the
data `python -m autograder.apps.config_cases` stores: the stored data is what the search
gives now, the notebook's solution passes, each catalogued mistake (a layout that
breaks one rule the drop teaches) is named in the student's terms, and an answer in
the wrong form says what is expected."""
import json
import re

import nbformat
import pytest
from grading_harness import ROOT

from autograder import cases, spec
from autograder.apps import config_cases
from threeaxes.grading import visible_config
from threeaxes.grading.sizing import plain_config

FOLDERS = sorted(p for p in (ROOT / "source").glob("drop*")
                 if (ROOT / "threeaxes" / "grading" / "cases" / f"{p.name[:6]}.config.json").is_file())


def exercises(folder):
    return [e.entry for e in spec.load(folder / "grading.json").exercises if e.visible_config]


def test_every_configuration_exercise_has_its_data():
    names = {p.name[:6] for p in FOLDERS}
    for folder in sorted((ROOT / "source").glob("drop*")):
        if exercises(folder):
            assert folder.name[:6] in names, f"run python -m autograder.apps.config_cases {folder.name[:6]}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_the_stored_data_is_what_the_search_gives(folder):
    stored = visible_config.load(folder.name[:6])
    fresh = json.loads(json.dumps(config_cases.drop_data(folder)))   # refuses unnamed mistakes
    assert fresh == stored, f"stale; run python -m autograder.apps.config_cases {folder.name[:6]}"
    for data in stored.values():          # the student's side never holds the best layout
        assert set(data) == {"name", "scenario", "margin", "micro_batch", "bubble_target",
                             "best_step_s", "passed", "mistakes"}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_the_solution_passes_and_each_mistake_is_named(folder, capsys):
    drop = folder.name[:6]
    nb = nbformat.read(next(folder.glob("*.ipynb")), as_version=4)
    for exercise in exercises(folder):
        spec, answer = exercise["visible_config"], exercise["answer"]
        setup = spec.get("setup", [])
        solution = cases.defined(cases.solution_code(nb, answer), spec["name"], setup)
        visible_config.check(drop, answer, solution)
        assert spec["passed"] in capsys.readouterr().out
        rules = {m["rule"] for m in exercise["mistakes"]}
        assert len(exercise["mistakes"]) >= 5 and {"memory", "slow"} <= rules, answer
        assert rules & {"tp_heads", "tp_node"} and rules & {"pp_layers"}, answer
        for mistake in exercise["mistakes"]:
            wrong = cases.defined("\n".join(mistake["code"]), spec["name"], setup)
            if mistake["rule"] in visible_config.PRINTED_ONLY:    # costs part of the points: said, not raised
                visible_config.check(drop, answer, wrong)
                said = capsys.readouterr().out
                assert spec["passed"] not in said, mistake["name"]
                # a test cell whose points hang on that rule fails with the same words
                with pytest.raises(AssertionError, match=re.escape(mistake["says"])):
                    visible_config.check(drop, answer, wrong, fail_on=(mistake["rule"],))
            else:
                with pytest.raises(AssertionError) as caught:
                    visible_config.check(drop, answer, wrong)
                said = str(caught.value)
            assert mistake["says"] in said, f"{drop} {answer}: {mistake['name']} not named: {said}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_an_answer_in_the_wrong_form_says_what_is_expected(folder):
    drop = folder.name[:6]
    for exercise in exercises(folder):
        answer, name = exercise["answer"], exercise["visible_config"]["name"]
        nb = nbformat.read(next(folder.glob("*.ipynb")), as_version=4)
        right = plain_config(cases.defined(cases.solution_code(nb, answer), name,
                                           exercise["visible_config"].get("setup", [])), name)
        misspelled = {("micro_batchs" if k == "micro_batch" else k): v for k, v in right.items()}
        for wrong, says in [((right["dp"], right["tp"], right["pp"]), "should be a dict"),
                            (misspelled, "has keys ['micro_batchs']"),
                            ({**right, "tp": str(right["tp"])}, "should be a whole number"),
                            ({k: v for k, v in right.items() if k != "pp"}, "missing ['pp']")]:
            with pytest.raises(AssertionError, match=f"^{re.escape(name)}.*{re.escape(says)}"):
                visible_config.check(drop, answer, wrong)


def test_a_slower_layout_is_marked_and_says_what_it_earns(capsys):
    """Drop 10's full recomputation fits but is slow: the check passes, marks the line with ✗
    and says it earns half the cell's points; drop 12's micro-batch of two names the cell it costs."""
    visible_config.check("drop10", "fix_config_answer",
                         dict(dp=8, tp=4, pp=1, micro_batch=2, zero_stage=1, recompute="full"), points=2)
    said = capsys.readouterr().out
    assert "✗ full recomputation" in said and "half marks when graded (1 of 2 points)" in said, said
    assert said.count(" s, ") == 1, "the step time is said once"
    visible_config.check("drop12", "my_config_answer",
                         dict(dp=2, tp=8, pp=8, micro_batch=2, zero_stage=1, sequence_parallel=True), points=2)
    said = capsys.readouterr().out
    assert "✗ the scenario keeps micro-batches of one sequence" in said
    assert "the test cell that grades the scenario's micro-batch scores 0" in said, said
