"""Issue 42: in drops 13 and 14 a student who types the fastest fitting layout (the row a
ranking would show first) and answers nothing else earns at most half of the core's
points, graded through the real nbgrader path (release, autograde), as `make grade` does.

The row is the search's best, computed here (autograder.references.sizing); the notebooks
show no ranking before the graded answers, so it is the only row worth copying. The test
also checks it is not vacuous: that row earns the pick's whole point."""
import pytest
from grading_harness import CELL_TIMEOUT_S, Course, set_answer

from autograder import drop_minutes
from autograder.references.sizing import best_in_scenario
from threeaxes.course import POINTS
from threeaxes.scenarios import drop13, drop14

DROPS = {13: ("drop13-size-30b-on-32", drop13.SCENARIO), 14: ("drop14-defend-70b-on-64", drop14.SCENARIO)}
STUDENT = "top_row_only"


def fastest_row(scenario) -> dict:
    r = best_in_scenario(scenario)
    return dict(dp=r.dp, tp=r.tp, pp=r.pp, micro_batch=r.micro_batch, zero_stage=r.zero_stage,
                recompute=r.recompute, virtual_stages=r.virtual_stages,
                sequence_parallel=r.sequence_parallel)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, released):
    course = Course(tmp_path_factory.mktemp("top_row"), [name for name, _ in DROPS.values()], released=released,
                    share_limits=True)
    for name, scenario in DROPS.values():
        nb = set_answer(course.released(name), "my_config_answer", f"my_config = {fastest_row(scenario)!r}")
        course.submit(STUDENT, name, nb)
    course.autograde(f"--Execute.timeout={CELL_TIMEOUT_S}", jobs=2)
    return course


@pytest.mark.slow
@pytest.mark.parametrize("number", DROPS)
def test_the_fastest_row_alone_earns_at_most_half_the_core(graded, number):
    name, _ = DROPS[number]
    scores = graded.scores(name, STUDENT)
    core = drop_minutes.grade_ids(number)["core"]
    assert scores["my_config_fits_and_is_near_the_best"] == 1.0        # the row is a full-marks pick
    earned = sum(scores[g] for g in core)
    assert earned <= POINTS[number][0] / 2, (number, {g: scores[g] for g in core})
    print(f"drop {number}: the fastest row alone earns {earned:g} of the core's {POINTS[number][0]} points")
