"""Drop 2 through the real nbgrader CLI: exact scores for typical submissions.

Points (from the source notebook): dp_grads_match_single_process 3,
dp_rank_holds_full_model_state 1, ring_all_reduce_sends_2_n_minus_1_over_n_of_grads 1.
The written answer is graded by hand and is not counted here.
"""
import pytest

from grading_harness import released_course, set_answer

DROP = "drop02-data-parallel"
GRADS = "dp_grads_match_single_process"
POINTS = {GRADS: 3.0,
          "dp_rank_holds_full_model_state": 1.0,
          "ring_all_reduce_sends_2_n_minus_1_over_n_of_grads": 1.0}
pytestmark = pytest.mark.slow

# Typical mistakes in the student's average_gradients.
NO_DIVIDE = """
def average_gradients(model, world_size):
    for p in model.parameters():
        comms.all_reduce(p.grad, axis="dp")
"""
NO_ALL_REDUCE = """
def average_gradients(model, world_size):
    for p in model.parameters():
        p.grad /= world_size
"""
# A wrong function, plus patches meant to fool the grading: a reference check
# that always passes, a check_on_ranks that never launches anything, and the
# package's own average_gradients replaced by the wrong one.
MONKEYPATCH = NO_DIVIDE + """
import threeaxes.data_parallel
import threeaxes.grading
import threeaxes.grading.drop02


def check_average_gradients(rank, world_size, student_fn):
    return {"ok": True, "message": "looks fine", "max_abs_diff": 0.0}


check_average_gradients.__module__ = "threeaxes.grading.drop02"
threeaxes.grading.drop02.check_average_gradients = check_average_gradients
threeaxes.grading.check_on_ranks = lambda check, n, *args, **kw: [check(r, n, *args) for r in range(n)]
threeaxes.data_parallel.average_gradients = lambda model, **kw: average_gradients(model, 4)
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One course, five students, one autograde run (each notebook runs once)."""
    course = released_course(tmp_path_factory, DROP)
    solved = course.solved_release(DROP)
    course.submit("no_divide", DROP, set_answer(solved, "average_gradients_answer", NO_DIVIDE))
    course.submit("no_all_reduce", DROP, set_answer(solved, "average_gradients_answer", NO_ALL_REDUCE))
    course.submit("monkeypatch", DROP, set_answer(solved, "average_gradients_answer", MONKEYPATCH))
    course.autograde(DROP)
    return course


def test_the_solved_source_gets_full_marks(graded):
    assert graded.scores(DROP, "solved_source") == POINTS
    assert graded.max_scores(DROP, "solved_source") == POINTS


def test_the_untouched_release_gets_zero_on_every_autograded_cell(graded):
    assert graded.scores(DROP, "untouched_release") == {k: 0.0 for k in POINTS}


def test_forgetting_to_divide_loses_exactly_the_gradient_points(graded):
    assert graded.scores(DROP, "no_divide") == {**POINTS, GRADS: 0.0}


def test_skipping_the_all_reduce_loses_exactly_the_gradient_points(graded):
    assert graded.scores(DROP, "no_all_reduce") == {**POINTS, GRADS: 0.0}


def test_patching_threeaxes_in_the_notebook_does_not_earn_the_points(graded):
    assert graded.scores(DROP, "monkeypatch") == {**POINTS, GRADS: 0.0}


def test_feedback_says_what_to_fix_and_hides_the_hidden_tests(graded):
    graded.generate_feedback(DROP)
    assert "2x too large" in graded.feedback_html(DROP, "no_divide")
    assert "never combined the ranks" in graded.feedback_html(DROP, "no_all_reduce")
    graded.assert_feedback_hides_hidden_tests(DROP, "no_divide")
