"""The visible checks' stored cases (threeaxes/grading/cases/, written by
`python -m autograder.cases`): what they hold is what the references give, the
notebook's solution passes them, and each catalogued mistake is caught and named."""
import json

import nbformat
import pytest

from autograder import cases
from threeaxes.grading import visible

from grading_harness import ROOT

FOLDERS = sorted(p for p in (ROOT / "source").glob("drop*") if (ROOT / "threeaxes" / "grading" / "cases"
                                                                  / f"{p.name[:6]}.json").is_file())


def exercises(folder):
    data = json.loads((folder / "grading.json").read_text())
    return [e for e in data["exercises"] if e.get("visible")]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_stored_cases_are_what_the_references_give(folder):
    """Arithmetic exercises are recomputed here; an exercise on ranks is covered by the
    next test (its solution must give the stored results)."""
    drop = folder.name[:6]
    stored = visible.load(drop)
    nb = nbformat.read(next(folder.glob("*.ipynb")), as_version=4)
    for exercise in exercises(folder):
        if exercise["visible"].get("ranks"):
            continue
        fresh = json.loads(json.dumps(cases.exercise_cases(drop, nb, exercise)))
        assert fresh == stored[exercise["answer"]], (
            f"{drop} {exercise['answer']}: stale; run python -m autograder.cases {drop}")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_the_solution_passes_and_each_catalogued_mistake_is_named(folder, capsys):
    drop = folder.name[:6]
    nb = nbformat.read(next(folder.glob("*.ipynb")), as_version=4)
    for exercise in exercises(folder):
        spec, answer = exercise["visible"], exercise["answer"]
        setup = spec.get("setup", [])
        solution = cases.defined(cases.solution_code(nb, answer), spec["call"], setup)
        visible.check(drop, answer, solution)
        # a pass says so: the exercise's own line (drop 2 and 6 say "equal one process")
        assert capsys.readouterr().out.strip(), f"{drop} {answer}: the check printed nothing on a pass"
        assert len(exercise["mistakes"]) >= 5, f"{drop} {answer}: catalogue at least 5 mistakes"
        for mistake in exercise["mistakes"]:
            wrong = cases.defined("\n".join(mistake["code"]), spec["call"], setup)
            with pytest.raises(AssertionError) as caught:
                visible.check(drop, answer, wrong)
            said = str(caught.value)
            assert mistake["says"] in said, (
                f"{drop} {answer}: the mistake {mistake['name']} was not named: {said}")
