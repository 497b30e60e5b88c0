"""Issue 42: in drops 13 and 14 a student who types the fastest fitting layout (the row a
ranking would show first) and answers nothing else earns at most half of the core's
points, graded through `make grade`'s own path in the suite's one graded class
(tests/conftest.py's `graded_class`).

The row is the search's best, computed here (autograder.references.sizing); the notebooks
show no ranking before the graded answers, so it is the only row worth copying. The test
also checks it is not vacuous: that row earns the pick's whole point."""
import pytest
from top_row_students import DROPS, STUDENT

from autograder import drop_minutes
from threeaxes.course import drop


@pytest.fixture
def graded(graded_class, number):
    if DROPS[number][0] not in graded_class.assignments:
        pytest.skip(f"{DROPS[number][0]} is not graded in this run (THREEAXES_GRADE_ONLY)")
    return graded_class


@pytest.mark.slow
@pytest.mark.parametrize("number", DROPS)
def test_the_fastest_row_alone_earns_at_most_half_the_core(graded, number):
    name, _ = DROPS[number]
    scores = graded.scores(name, STUDENT)
    core = drop_minutes.grade_ids(number)["core"]
    assert scores["my_config_fits_and_is_near_the_best"] == 1.0        # the row is a full-marks pick
    earned = sum(scores[g] for g in core)
    assert earned <= drop(number).points[0] / 2, (number, {g: scores[g] for g in core})
    print(f"drop {number}: the fastest row alone earns {earned:g} of the core's {drop(number).points[0]} points")
