"""The visible checks' stored cases (threeaxes/grading/cases/, written by
`python -m autograder.cases`): what they hold is what the references give, the
notebook's solution passes them, and each catalogued mistake is caught and named."""
import json

import nbformat
import pytest
from grading_harness import ROOT

from autograder import cases, spec
from threeaxes.grading import visible

FOLDERS = sorted(p for p in (ROOT / "source").glob("drop*") if (ROOT / "threeaxes" / "grading" / "cases"
                                                                  / f"{p.name[:6]}.json").is_file())


def wrappers(setup) -> list[str]:
    """The functions a visible check's setup defines around the student's (`name = lambda`)."""
    return [line.split("=")[0].strip() for line in setup if "= lambda" in line]


def exercises(folder):
    return [e.entry for e in spec.load(folder / "grading.json").exercises if e.visible]


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
        said = capsys.readouterr().out.strip()
        assert said, f"{drop} {answer}: the check printed nothing on a pass"
        assert len(exercise["mistakes"]) >= 5, f"{drop} {answer}: catalogue at least 5 mistakes"
        if visible.load(drop)[answer].get("sealed"):      # the form here, the value when graded
            assert "checked when your notebook is graded" in said and "right" not in said, said
            continue
        for mistake in exercise["mistakes"]:
            wrong = cases.defined("\n".join(mistake["code"]), spec["call"], setup)
            with pytest.raises(AssertionError) as caught:
                visible.check(drop, answer, wrong)
            said = str(caught.value)
            assert mistake["says"] in said, (
                f"{drop} {answer}: the mistake {mistake['name']} was not named: {said}")
            # the student reads their own function's name, not a wrapper the check defines
            for wrapper in wrappers(setup):
                assert f"{wrapper}(" not in said, f"{drop} {answer}: names the check's {wrapper}: {said}"


SEALED = [(folder, e["answer"]) for folder in FOLDERS for e in exercises(folder)
          if visible.load(folder.name[:6])[e["answer"]].get("sealed")]


@pytest.mark.parametrize("folder, answer", SEALED, ids=lambda x: getattr(x, "name", x)[:24])
def test_a_fixed_answers_visible_check_stores_its_form_and_nothing_that_gives_its_value_away(folder, answer):
    """A digest of a fixed answer to 6 significant digits inverts offline in a minute (issue 32):
    the package keeps the form (a positive number, a dict of these keys, a string) alone, and
    no mistake's value either (each says how it differs from the answer); the mistakes' sentences
    only where the exercise asks for them, and none spelling the answer."""
    drop = folder.name[:6]
    stored = visible.load(drop)[answer]
    exercise = next(e for e in exercises(folder) if e["answer"] == answer)
    spec = exercise["visible"]
    nb = nbformat.read(next(folder.glob("*.ipynb")), as_version=4)
    solution = cases.defined(cases.solution_code(nb, answer), spec["call"], spec.get("setup", []))
    value = visible.plain(visible._answer_for(stored, solution, []), stored["form"], "answer")
    text = json.dumps(stored)
    assert "sha256" not in text and "want" not in text and not stored["mistakes"], text
    # "slips": the mistakes' sentences for the reveal (threeaxes.grading.slips), no value among them
    assert set(stored) <= {"call", "form", "value", "sealed", "cases", "mistakes", "rel", "slips"}, sorted(stored)
    assert ("slips" in stored) == bool(spec.get("reveal")), "slips only where the exercise asks for a reveal"

    def leaves(v):
        return [x for item in (v.values() if type(v) is dict else v) for x in leaves(item)] \
            if type(v) in (dict, list) else [v]
    for leaf in leaves(value):          # no value of the answer, in any spelling
        assert all(spelled not in text for spelled in {json.dumps(leaf), repr(leaf), f"{leaf:g}"
                                                       if type(leaf) in (int, float) else str(leaf)}), leaf
    # a value of the wrong form fails here, saying which form; the value itself is not judged
    with pytest.raises(AssertionError, match="should"):
        visible.check(drop, answer, (lambda *a: None) if not spec.get("value") else None, show=False)
    if stored["form"] == "number":
        with pytest.raises(AssertionError, match="positive number"):
            visible.check(drop, answer, -1.0, show=False)
        visible.check(drop, answer, 1234.5, show=False)        # a wrong value of the right form passes here
