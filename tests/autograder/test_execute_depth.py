"""The grader runs no code cell after a notebook's last graded code cell (autograder/plugins/execute.py):
a drop's depth can change no grade, so it is left to nbval and the student's own notebook,
and the autograded notebook says so in each such cell."""

import nbformat

from autograder.plugins.execute import NOT_RUN, run_notebook


class _RecordingKernel:
    """Runs nothing; remembers which cells it was asked to run, and answers no names."""

    def __init__(self):
        self.ran = []
        self.answers = self

    def run_cell(self, source, timeout):
        self.ran.append(source)
        return [nbformat.v4.new_output("stream", name="stdout", text=f"ran {source}\n")]

    def get(self, names):
        return {}


def _code(source, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "points": 1, "locked": False, **nbgrader}
    return cell


def _graded(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    kernel = _RecordingKernel()
    run_notebook(nb, kernel, 10)
    return nb, kernel.ran


def test_the_depth_after_the_last_test_cell_is_not_run_and_says_so():
    nb, ran = _graded([_code("opening()"),
                       _code("answer = 1", solution=True, grade=False, grade_id="a"),
                       _code("print('test')", solution=False, grade=True, grade_id="t"),
                       _code("explore()"),
                       _code("   "),
                       _code("torch_api()")])
    assert ran == ["opening()", "answer = 1"]
    assert [o["text"] for o in nb.cells[3].outputs] == [NOT_RUN]
    assert nb.cells[4].outputs == []                       # an empty cell shows nothing
    assert [o["text"] for o in nb.cells[5].outputs] == [NOT_RUN]
    assert nb.cells[5].execution_count is None


def test_a_later_written_answer_does_not_run_the_cells_before_it():
    # a written answer (a markdown cell nbgrader scores by hand) is the student's words: the code
    # between the last graded code cell and it (the reveal, the explorers) changes no score
    written = nbformat.v4.new_markdown_cell("why?")
    written.metadata["nbgrader"] = {"schema_version": 3, "points": 1, "solution": True,
                                    "grade": True, "grade_id": "w", "locked": False}
    nb, ran = _graded([_code("answer = 1", solution=True, grade=False, grade_id="a"),
                       _code("explore()"),
                       written,
                       _code("after()")])
    assert ran == ["answer = 1"]
    assert [o["text"] for o in nb.cells[1].outputs] == [NOT_RUN]
    assert [o["text"] for o in nb.cells[3].outputs] == [NOT_RUN]


def test_a_code_answer_graded_by_hand_keeps_the_cells_before_it_running():
    # a code answer scored by hand (solution and grade, no test) shows its outputs to the grader
    nb, ran = _graded([_code("answer = 1", solution=True, grade=False, grade_id="a"),
                       _code("explore()"),
                       _code("plot_mine()", solution=True, grade=True, grade_id="by_hand"),
                       _code("after()")])
    assert ran == ["answer = 1", "explore()", "plot_mine()"]
    assert [o["text"] for o in nb.cells[3].outputs] == [NOT_RUN]


def test_a_notebook_without_graded_cells_runs_none():
    nb, ran = _graded([_code("a()"), _code("b()")])
    assert ran == [] and all(c.outputs[0]["text"] == NOT_RUN for c in nb.cells)
