"""Hidden tests that draw cases telling every catalogued mistake apart
(autograder/references/catalogue.py): for each exercise whose hidden test uses them,
the solution passes, each catalogued mistake loses on the drawn cases and is named,
and no drawn case shows up in what the student is told."""
import importlib
import random
import re

import nbformat
import pytest
from grading_harness import ROOT

from autograder import cases
from autograder.references import catalogue

CALL = re.compile(r'catalogue\.telling\("(drop\d\d)", "(\w+)", (drop\d\d)\.(\w+), rng')


def _uses():
    found = []
    for path in sorted((ROOT / "source").glob("drop*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            found += [(path, *m.groups()) for m in CALL.finditer(cell.source)]
    return found


USES = _uses()


def test_the_pattern_finds_the_hidden_tests_that_use_the_catalogue():
    assert USES, "no hidden test draws its cases with catalogue.telling"


@pytest.mark.parametrize("path, drop, answer, module, draw", USES, ids=lambda v: str(v)[-30:])
def test_solution_passes_and_each_mistake_is_named_without_the_case(path, drop, answer, module, draw):
    nb = nbformat.read(path, as_version=4)
    check = catalogue.record(drop, answer).visible
    draw = getattr(importlib.import_module(f"autograder.references.{module}"), draw)
    rng = random.Random(1234)
    drawn = catalogue.telling(drop, answer, draw, rng)
    assert len(drawn) >= 3
    solution = cases.defined(cases.solution_code(nb, answer), check.call, check.setup)
    catalogue.judge(drop, answer, solution, drawn)
    for name, (wrong, says) in catalogue.mistakes(drop, answer).items():
        with pytest.raises(AssertionError) as caught:
            catalogue.judge(drop, answer, wrong, drawn)
        said = str(caught.value)
        assert says in said or "raised" in said, (name, said)
        assert not any(repr(args) in said for args in drawn), "the hidden case is shown"


def _fixed_answers():
    """(notebook, drop, answer, test cell source) for each exercise whose visible check stores
    only the form of one fixed answer (threeaxes.grading.visible.shape)."""
    from threeaxes.grading import visible

    found = []
    for path in sorted((ROOT / "source").glob("drop*/*.ipynb")):
        drop = path.parent.name[:6]
        try:
            stored = visible.load(drop)
        except FileNotFoundError:
            continue
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                 for c in nbformat.read(path, as_version=4).cells}
        for answer, spec in stored.items():
            if spec.get("sealed"):
                found += [(path, drop, answer, cells[test]) for test in catalogue.record(drop, answer).tests]
    return found


FIXED = _fixed_answers()


@pytest.mark.parametrize("path, drop, answer, source", FIXED, ids=lambda v: str(v)[-30:])
def test_a_fixed_answers_hidden_test_checks_its_value_and_names_each_mistake(path, drop, answer, source):
    """Its visible check stores the form alone (issue 32), so the value is checked, and each
    catalogued mistake named, by the hidden test: `catalogue.judge_fixed`."""
    hidden = source.split("### BEGIN HIDDEN TESTS")[1]
    call = re.search(rf'catalogue\.judge_fixed\("{drop}", "{answer}",[^\n]*(\n[^\n]*)?', hidden)
    assert call, f"{drop} {answer}: the hidden test should check the value with catalogue.judge_fixed"
    part = re.search(r'part="(\w+)"', call.group(0))
    part = part.group(1) if part else None
    nb = nbformat.read(path, as_version=4)
    check = catalogue.record(drop, answer).visible
    solution = cases.defined(cases.solution_code(nb, answer), check.call, check.setup)
    catalogue.judge_fixed(drop, answer, solution, part=part)
    named = 0
    for name, (wrong, says) in catalogue.mistakes(drop, answer).items():
        try:
            catalogue.judge_fixed(drop, answer, wrong, part=part)
        except AssertionError as caught:
            assert says in str(caught) or "should" in str(caught), (name, str(caught))
            named += 1
    assert named >= (1 if part else len(catalogue.mistakes(drop, answer)))
