"""Each cell's time limit comes from the model solution's time for it (autograder/judging/cell_seconds.py):
a loop is stopped at about the floor, named with the limit it hit; a legit answer never is."""
import sys

import nbformat
import pytest

from autograder.judging import cell_seconds
from autograder.judging.cell_seconds import Limits, measured
from autograder.plugins.execute import model_seconds, run_notebook
from autograder.runtime.forked_kernel import TIMEOUT
from autograder.runtime.kernel_session import KernelHost, KernelSession


def _code(source, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "points": 1, "locked": False, **nbgrader}
    return cell


def _answer(source, grade_id="a"):
    return _code(source, solution=True, grade=False, grade_id=grade_id)


def _test(source, grade_id="t"):
    return _code(source, solution=False, grade=True, grade_id=grade_id)


def test_the_limit_is_a_multiple_of_the_model_within_a_floor_and_the_course_limit():
    limits = Limits(timeout=30, factor=10, floor_s=4,
                    seconds={"id:quick": 0.05, "id:some": 1.5, "id:slow": 7.0})
    # 10 x 0.05 = 0.5 s is under the floor; 10 x 1.5 = 15 s; 10 x 7 = 70 s is over the course's 30 s
    assert [limits.of(_answer("", g))[0] for g in ("quick", "some", "slow")] == [4, 15, 30]
    assert "10 x the model solution's 1.50 s" in limits.of(_answer("", "some"))[1]
    # a cell the model does not have (an added one, or another grade id): the course's limit
    assert limits.of(_code("print('mine')"))[0] == 30
    assert limits.of(_answer("", "other"))[0] == 30
    assert Limits(timeout=30, factor=0, seconds={"id:quick": 0.05}).of(_answer("", "quick"))[0] == 30


def test_a_cell_that_is_not_graded_is_matched_by_its_code():
    limits = Limits(timeout=30, floor_s=3, seconds={cell_seconds.key(_code("demo()\n")): 2.0})
    assert limits.of(_code("  demo()"))[0] == 20
    assert limits.of(_code("demo(); more()"))[0] == 30


def test_only_the_hosts_own_time_limit_error_is_reworded():
    limits = Limits(timeout=30, floor_s=5, seconds={"id:a": 0.1})
    theirs = {"output_type": "error", "ename": "TimeoutError", "evalue": "mine", "traceback": []}
    out = limits.stopped(_answer("", "a"), [theirs, dict(TIMEOUT)], "the answer cell a")
    assert out[0] == theirs
    assert out[1]["evalue"].startswith("the answer cell a was stopped at its grading time limit of 5.0 s")
    assert "at least 5 s" in out[1]["evalue"]


def _model():
    nb = nbformat.v4.new_notebook()
    nb.cells = [_code("import time\nx = 1"), _answer("time.sleep(0.3)\nanswer = x + 1"),
                _test("assert answer == 2"), _code("print('after')")]
    return nb


def test_the_model_is_measured_once_per_notebook_and_again_when_it_changes(tmp_path):
    folder = tmp_path / "source" / "drop99"
    folder.mkdir(parents=True)
    nbformat.write(_model(), folder / "drop99.ipynb")
    runs = []

    def measure(model):
        runs.append(len(model.cells))
        return {"id:a": 0.3}

    assert measured(tmp_path, "drop99", "drop99", measure) == {"id:a": 0.3}
    assert measured(tmp_path, "drop99", "drop99", measure) == {"id:a": 0.3}
    assert runs == [4]
    changed = _model()
    changed.cells.append(_code("print('new')"))
    nbformat.write(changed, folder / "drop99.ipynb")
    measured(tmp_path, "drop99", "drop99", measure)
    assert runs == [4, 5]
    assert measured(tmp_path, "drop99", "missing", measure) == {}
    assert measured(tmp_path, "../drop99", "drop99", measure) == {}


@pytest.fixture(params=[True, False], ids=["sandboxed", "not sandboxed"])
def isolate(request):
    if request.param and not sys.platform.startswith("linux"):
        pytest.skip("namespaces are Linux only")
    return request.param


def test_the_model_run_times_each_cell_it_runs(isolate):
    seconds = model_seconds(_model(), isolate=isolate, files={}, withheld=None, timeout=30)
    # the opening ran in the host: not timed (a submission that changes it runs it under the course's limit)
    assert set(seconds) == {"id:a", "id:t"}
    assert 0.3 <= seconds["id:a"] < 5


def test_a_loop_is_stopped_at_about_the_floor_and_a_legit_answer_is_not(isolate):
    host = KernelHost(isolate=isolate)
    limits = Limits(timeout=30, factor=10, floor_s=3, seconds={"id:a": 0.01, "id:b": 0.2})
    nb = nbformat.v4.new_notebook()
    nb.cells = [_answer("while True:\n    pass", "a"), _answer("import time\ntime.sleep(1.0)\nb = 2", "b"),
                _test("assert b == 2")]
    try:
        with KernelSession(host, timeout=30) as kernel:
            run_notebook(nb, kernel, 30, limits=limits)
    finally:
        host.close()
    # the interrupt's own traceback, then what the grader says of it
    looped = [o for o in nb.cells[0].outputs if o["output_type"] == "error" and o["ename"] == "TimeoutError"]
    assert len(looped) == 1
    assert "the answer cell a was stopped at its grading time limit of 3.0 s" in looped[0]["evalue"]
    assert "10 x the model solution's 0.01 s" in looped[0]["evalue"]
    # stopped by its own 3 s limit (named above), not the course's 30 s; how long a loop costs a
    # class is benchmarks/grade_class.py's figure, not a bound here
    assert not [o for o in nb.cells[1].outputs if o["output_type"] == "error"]   # 1 s within its 3 s floor
    assert not [o for o in nb.cells[2].outputs if o["output_type"] == "error"]
