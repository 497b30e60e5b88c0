"""The guard of autograder/judging/borrowed.py, in this process: which cells are the
instructor's (by place and id, not text), which exercises a call to a withheld function
costs, and how it finds that function in the values the judge then uses."""
from borrowed_helpers import PATH, code_cell, exercise, make_notebook

from autograder.judging import borrowed


def test_calls_count_against_open_exercises_only_from_student_cells():
    path = "threeaxes.data_parallel.buckets:plan_buckets"
    source = make_notebook([code_cell("demo()", id="demo"),
                            code_cell("a = 1", grade=False, solution=True, grade_id="a_answer"),
                            code_cell("a", grade=True, solution=False, grade_id="a_test"),
                            code_cell("b = 1", grade=False, solution=True, grade_id="b_answer"),
                            code_cell("b", grade=True, solution=False, grade_id="b_test")])
    guard = borrowed.Guard([exercise("a_answer", "a_test"), exercise("b_answer", "b_test")],
                           borrowed.instructor_places(source))
    assert guard.is_instructors(source.cells[0], 0)
    assert not guard.is_instructors(code_cell("demo(); x = 1", id="demo"), 0)
    assert guard.verdict("a_test") is None                     # a judged, nothing borrowed
    guard.note([path], "the answer cell b_answer")             # counts for b only: a is judged
    out = guard.verdict("b_test")
    assert out["ename"] == borrowed.ENAME and "plan_buckets" in out["evalue"]
    assert "b_answer" in out["evalue"] and "plain Python" in out["evalue"]
    from threeaxes.data_parallel import plan_buckets
    alias = borrowed.Guard([exercise("c_answer", "c_test")], ())
    alias.note_answers({"mine": plan_buckets}, "c_test")
    assert "`mine` is that function" in alias.verdict("c_test")["evalue"]


# -- instructor cells by place and id; every call once the student's part has begun ------------
def _two_exercises():
    """demo | a's answer | a's test | an instructor's explorer | b's answer | b's test | a closing figure."""
    return make_notebook([code_cell("demo()", id="demo"),
                          code_cell("a = 1", grade=False, solution=True, grade_id="a_answer", id="a-answer"),
                          code_cell("a", grade=True, solution=False, grade_id="a_test", id="a-test"),
                          code_cell("explore()", id="explore"),
                          code_cell("b = 1", grade=False, solution=True, grade_id="b_answer", id="b-answer"),
                          code_cell("b", grade=True, solution=False, grade_id="b_test", id="b-test"),
                          code_cell("closing()", id="closing")])


def test_once_the_first_student_cell_runs_no_open_exercise_gets_a_withheld_answer_whatever_runs():
    source = _two_exercises()
    guard = borrowed.Guard([exercise("a_answer", "a_test"), exercise("b_answer", "b_test")],
                           borrowed.instructor_places(source))
    cells = source.cells
    assert guard.enter(cells[0], 0) and guard.refuses(PATH) is None      # the opening: answered
    assert not guard.enter(cells[1], 1)                                   # a's answer: the student's
    assert "a_answer, b_answer" in guard.refuses(PATH)                    # refused from now on
    guard.note([PATH], "your code, run by this test", test="a_test")      # a's test's call: refused for
    assert guard.verdict("a_test")["ename"] == borrowed.ENAME              # both, counted against a
    assert guard.enter(cells[3], 3)                                       # the explorer is the instructor's,
    assert "b_answer" in guard.refuses(PATH)                              # but a hook or thread runs with it
    assert "a_answer" not in guard.refuses(PATH)                          # a is judged
    guard.note([PATH], "a cell you added or changed")                     # a student cell's: every open one
    assert guard.verdict("b_test")["ename"] == borrowed.ENAME
    assert guard.enter(cells[6], 6) and guard.refuses(PATH) is None       # every exercise judged: answered


def test_an_instructor_cell_is_known_by_its_place_and_id_not_its_text():
    source = _two_exercises()
    places = borrowed.instructor_places(source)
    explore = source.cells[3]
    copy = code_cell(explore.source, id=explore.id)      # the same text and id, placed before the answer
    moved = make_notebook([source.cells[0], copy, *source.cells[1:]])
    assert not borrowed.opening_is_instructors(moved, places)             # no shared opening for it
    assert borrowed.opening_is_instructors(source, places)
    guard = borrowed.Guard([exercise("a_answer", "a_test"), exercise("b_answer", "b_test")], places)
    assert guard.enter(moved.cells[0], 0)
    assert not guard.enter(copy, 1) and guard.refuses(PATH)               # the copy is the student's
    borrowed_id = code_cell(explore.source, id="demo")                    # the text at its place, another
    assert not borrowed.Guard([], places).is_instructors(borrowed_id, 3)   # instructor cell's id
    fresh_id = code_cell(explore.source, id="f00dcafe")     # a notebook saved without ids gets random ones
    assert borrowed.Guard([], places).is_instructors(fresh_id, 3)
    assert not borrowed.Guard([], places).is_instructors(code_cell("explore() ", id="explore"), 2)   # moved
    assert not borrowed.Guard([], places).is_instructors(code_cell("explore(1)", id="explore"), 3)   # changed
    assert not borrowed.Guard([], places).is_instructors(code_cell("demo()", id="demo", grade=True,
                                                                   solution=True, grade_id="x"), 0)


def test_an_answer_that_is_holds_or_wraps_a_withheld_function_is_seen_in_the_values_the_judge_uses():
    import dataclasses
    import functools

    from threeaxes.data_parallel import plan_buckets
    from threeaxes.toy import ToyConfig

    @dataclasses.dataclass
    class Holder:
        fn: object

    class Caller:
        __call__ = staticmethod(plan_buckets)

    hidden = {
        "named through __call__": plan_buckets.__call__,
        "a partial": functools.partial(plan_buckets, [4, 4]),
        "in a dict in a list": [{"fn": (1, plan_buckets)}],
        "a record's field": Holder(plan_buckets),
        "a decorated copy": functools.wraps(plan_buckets)(lambda *a: None),
        "an instance whose __call__ it is": Caller(),
        "a bound method of a partial": functools.partial(plan_buckets).__call__,
    }
    for name, value in hidden.items():
        guard = borrowed.Guard([exercise("c_answer", "c_test")], ())
        guard.note_answers({"answer": value}, "c_test")
        out = guard.verdict("c_test")
        assert out and out["ename"] == borrowed.ENAME and "plan_buckets" in out["evalue"], name
    import threeaxes.data_parallel as module

    plain = {"n": 3, "cfg": ToyConfig(), "module": module, "cls": ToyConfig, "rows": [[1.5, "x"]] * 3,
             "fn": functools.partial(sorted, [3, 1])}
    guard = borrowed.Guard([exercise("c_answer", "c_test")], ())
    guard.note_answers(plain, "c_test")                   # a module is not looked into: the test's own code
    assert guard.verdict("c_test") is None                # reads its attributes


class _FakeAnswers:
    """What run_notebook asks of a kernel's answers: each `get` returns the next of `replies`."""

    def __init__(self, *replies):
        self.replies, self.asked = list(replies), 0

    def get(self, names):
        self.asked += 1
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class _FakeKernel:
    def __init__(self, answers):
        self.answers = answers

    def run_cell(self, source, timeout):
        return []


def _judged(answers, guard=None):
    from autograder.plugins.execute import run_notebook

    nb = make_notebook([code_cell("answer = ...", grade=False, solution=True, grade_id="c_answer"),
                        code_cell("assert answer([8, 4, 4], 8) == [[0], [1, 2]]\nprint('right')",
                                  grade=True, solution=False, grade_id="c_test")])
    guard = guard or borrowed.Guard([exercise("c_answer", "c_test")], ())
    run_notebook(nb, _FakeKernel(answers), 10, guard, oracle=None)
    return nb.cells[1].outputs


def test_the_guard_looks_once_at_the_values_the_judge_then_uses():
    from threeaxes.data_parallel import plan_buckets

    # hidden from a first look (an error), then the grader's own function: one look, and it fails
    answers = _FakeAnswers(RuntimeError("not now"), {"answer": plan_buckets})
    outputs = _judged(answers)
    assert answers.asked == 1 and [o["output_type"] for o in outputs] == ["error"]
    assert "not now" in outputs[0]["evalue"]
    # harmless at the first look, the function at a second: the judge uses what the guard saw
    answers = _FakeAnswers({"answer": lambda s, b: [[9]]}, {"answer": plan_buckets})
    outputs = _judged(answers)
    assert answers.asked == 1 and outputs[0]["ename"] == "AssertionError"
    answers = _FakeAnswers({"answer": plan_buckets.__call__})
    outputs = _judged(answers)
    assert outputs[0]["ename"] == borrowed.ENAME and "`answer` is that function" in outputs[0]["evalue"]


def test_a_check_the_guard_cannot_make_fails_the_cell(monkeypatch):
    from autograder.plugins.execute import ENAME_UNCHECKED

    deep = [[] for _ in range(210_000)]         # more objects than the guard looks through
    outputs = _judged(_FakeAnswers({"answer": deep}))
    assert outputs[0]["ename"] == ENAME_UNCHECKED and "scores 0" in outputs[0]["evalue"]
    guard = borrowed.Guard([exercise("c_answer", "c_test")], ())
    monkeypatch.setattr(guard, "note_answers", lambda values, test: 1 / 0)
    outputs = _judged(_FakeAnswers({"answer": sorted}), guard)
    assert [o["ename"] for o in outputs] == [ENAME_UNCHECKED] and "ZeroDivisionError" in outputs[0]["evalue"]
