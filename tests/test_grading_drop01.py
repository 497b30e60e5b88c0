"""Drop 1 through the real nbgrader CLI: exact scores for typical submissions.

Points (from the source notebook): training_bytes_match_adam_accounting 2,
largest_trainable_model_on_80gb 1, each_axis_splits_and_sends_the_right_thing 2.
"""
import re

import pytest

from grading_harness import released_course, set_answer

DROP = "drop01-three-kinds-of-parallel"
POINTS = {"training_bytes_match_adam_accounting": 2.0,
          "largest_trainable_model_on_80gb": 1.0,
          "each_axis_splits_and_sends_the_right_thing": 2.0}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One course, six students, one autograde run (each notebook runs once)."""
    course = released_course(tmp_path_factory, DROP)
    solved = course.solved_release(DROP)
    course.submit("solved_release", DROP, solved)
    # Mixed precision counted without the fp32 master copy: 8 optimizer bytes, not 12.
    course.submit("forgets_master_copy", DROP, set_answer(solved, "training_bytes_answer", (
        "def training_bytes(n_params, precision):\n"
        "    split = {'fp32': (4, 4, 8), 'mixed': (2, 2, 8)}[precision]\n"
        "    return dict(zip(('params', 'grads', 'optimizer'), (b * n_params for b in split)))\n")))
    # An answer that claims to equal everything.
    course.submit("always_equal", DROP, set_answer(solved, "largest_model_answer", (
        "class Sneaky:\n"
        "    __eq__ = lambda self, other: True\n"
        "    __lt__ = __gt__ = __le__ = __ge__ = __eq__\n"
        "    __float__ = lambda self: 5.0\n"
        "largest_model_billion = Sneaky()\n")))
    course.submit("infinite_loop", DROP, set_answer(solved, "largest_model_answer", "while True:\n    pass\n"))
    course.autograde(DROP, "--Execute.timeout=20")
    return course


def test_the_solved_source_gets_full_marks(graded):
    assert graded.scores(DROP, "solved_source") == POINTS
    assert graded.max_scores(DROP, "solved_source") == POINTS


def test_a_release_with_the_solutions_typed_in_gets_full_marks(graded):
    assert graded.scores(DROP, "solved_release") == POINTS


def test_the_untouched_release_gets_zero_on_every_autograded_cell(graded):
    assert graded.scores(DROP, "untouched_release") == {k: 0.0 for k in POINTS}


def test_one_wrong_answer_loses_exactly_that_cells_points(graded):
    assert graded.scores(DROP, "forgets_master_copy") == {**POINTS, "training_bytes_match_adam_accounting": 0.0}


def test_an_answer_that_equals_everything_earns_nothing(graded):
    assert graded.scores(DROP, "always_equal") == {**POINTS, "largest_trainable_model_on_80gb": 0.0}


def test_an_infinite_loop_times_out_in_its_cell_and_the_rest_is_graded(graded):
    assert graded.scores(DROP, "infinite_loop") == {**POINTS, "largest_trainable_model_on_80gb": 0.0}


def test_feedback_and_export_do_not_reveal_hidden_tests(graded):
    graded.generate_feedback(DROP)
    html = graded.feedback_html(DROP, "forgets_master_copy")
    assert "remember the fp32 master copy" in html          # the failing check's message reaches the student
    graded.assert_feedback_hides_hidden_tests(DROP, "forgets_master_copy")
    csv = graded.export_csv()
    assert re.search(r"solved_source.*,5\.0", csv), csv
