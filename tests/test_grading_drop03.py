"""Drop 3 through the real nbgrader CLI: exact scores for typical submissions.

Points (from the source notebook): column_split_matches_full_matmul 3,
tp_block_all_reduces_twice_each_way 1, tp_all_reduce_bytes_are_batch_seq_width_values 2.
Every notebook runs once, in one autograde call.
"""
import pytest

from grading_harness import released_course, set_answer

DROP = "drop03-tensor-parallel"
POINTS = {"column_split_matches_full_matmul": 3.0,
          "tp_block_all_reduces_twice_each_way": 1.0,
          "tp_all_reduce_bytes_are_batch_seq_width_values": 2.0}
pytestmark = pytest.mark.slow

# Cuts w by rows instead of columns: each rank keeps w's rows and the matching
# columns of x, and all-reduces partial sums. y still equals x @ w.
ROW_SPLIT = '''
def column_parallel_matmul(x, w, tp_rank, tp):
    k = w.shape[0] // tp
    w_shard = w[tp_rank * k:(tp_rank + 1) * k, :]
    y_local = x[:, tp_rank * k:(tp_rank + 1) * k] @ w_shard
    y = comms.all_reduce(y_local.clone(), axis="tp")
    return w_shard, y_local, y
'''

# The row split again, plus every patch a notebook can make to the imported
# package: a fake reference check in threeaxes.grading.drop03 (its __module__
# forged so that check_on_ranks accepts it and cloudpickle ships it by value),
# a check_on_ranks that approves everything, and a broken tensor_parallel.
MONKEYPATCH = ROW_SPLIT + '''
import threeaxes.grading
import threeaxes.grading.drop03
import threeaxes.tensor_parallel


def _approve(rank, world_size, *args):
    return {"ok": True, "message": "looks fine", "max_abs_diff": 0.0}


_approve.__module__ = "threeaxes.grading.drop03"
threeaxes.grading.drop03.column_split_check = _approve
threeaxes.grading.drop03.exercise_tensors = lambda *args, **kwargs: None
threeaxes.grading.check_on_ranks = lambda check, n, *args, **kwargs: [_approve(r, n) for r in range(n)]
threeaxes.tensor_parallel.shard_block_state = lambda *args, **kwargs: {}
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = released_course(tmp_path_factory, DROP)
    solved = course.solved_release(DROP)
    course.submit("row_for_column", DROP, set_answer(solved, "column_split_answer", ROW_SPLIT))
    course.submit("monkeypatcher", DROP, set_answer(solved, "column_split_answer", MONKEYPATCH))
    course.autograde(DROP)
    return course


def test_the_solved_source_gets_full_marks(graded):
    assert graded.scores(DROP, "solved_source") == POINTS
    assert graded.max_scores(DROP, "solved_source") == POINTS


def test_the_untouched_release_gets_zero_on_every_autograded_cell(graded):
    assert graded.scores(DROP, "untouched_release") == {k: 0.0 for k in POINTS}


def test_swapping_rows_for_columns_loses_exactly_the_column_split_points(graded):
    assert graded.scores(DROP, "row_for_column") == {**POINTS, "column_split_matches_full_matmul": 0.0}


def test_patching_the_reference_in_the_notebook_earns_nothing(graded):
    assert graded.scores(DROP, "monkeypatcher") == {**POINTS, "column_split_matches_full_matmul": 0.0}


def test_feedback_says_it_was_the_row_split_and_hides_the_hidden_tests(graded):
    graded.generate_feedback(DROP)
    html = graded.feedback_html(DROP, "row_for_column")
    assert "that is the row split, not the column split" in html
    graded.assert_feedback_hides_hidden_tests(DROP, "row_for_column")
