"""Hidden tests that draw cases telling every catalogued mistake apart
(autograder/references/catalogue.py): for each exercise whose hidden test uses them,
the solution passes, each catalogued mistake loses on the drawn cases and is named,
and no drawn case shows up in what the student is told."""
import importlib
import random
import re

import nbformat
import pytest

from autograder import cases
from autograder.references import catalogue

from grading_harness import ROOT

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
    spec = catalogue.exercise(drop, answer)["visible"]
    draw = getattr(importlib.import_module(f"autograder.references.{module}"), draw)
    rng = random.Random(1234)
    drawn = catalogue.telling(drop, answer, draw, rng)
    assert len(drawn) >= 3
    solution = cases.defined(cases.solution_code(nb, answer), spec["call"], spec.get("setup", []))
    catalogue.judge(drop, answer, solution, drawn)
    for name, (wrong, says) in catalogue.mistakes(drop, answer).items():
        with pytest.raises(AssertionError) as caught:
            catalogue.judge(drop, answer, wrong, drawn)
        said = str(caught.value)
        assert says in said or "raised" in said, (name, said)
        assert not any(repr(args) in said for args in drawn), "the hidden case is shown"
