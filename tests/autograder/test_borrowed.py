"""Points only for the student's own code (autograder/judging/borrowed.py).

Each exercise's entry in its drop's grading.json names what it may not call; a
graded kernel holds no body for those functions, the grader answers them and
puts each call down to the cell that made it. Here: every name exists, the
kernel's copy really lacks the body, the grader answers as data, and in one
sandboxed kernel each route to the function (a call, an alias, getattr,
importlib, sys.modules, a copy of its code, a subprocess, a stash in an added
cell) costs its exercise the points, while a demonstration that calls it still
runs and an answer of one's own still passes. The drops' attack submissions
(grading.json "mistakes" whose names start with "calls_") are graded by
tests/drops/test_grading.py like every other mistake.
"""
import json
import os
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest
from grading_harness import answer_ids, autograded_ids, drops

from autograder import spec, withheld
from autograder.course import PACKAGE, grading_file, notebook
from autograder.judging import borrowed
from autograder.judging import oracle as oracle_module
from autograder.plugins.execute import NOT_RUN

DROPS = [d.name for d in drops()]


def exercises(drop):
    return withheld.load_exercises(grading_file(drop))


@pytest.mark.parametrize("drop", DROPS)
def test_every_graded_exercise_names_what_it_may_not_call_and_each_name_exists(drop):
    nb = nbformat.read(notebook(drop), as_version=4)
    listed = exercises(drop)
    assert sorted(e.answer for e in listed) == sorted(answer_ids(nb)), "one entry per answer cell"
    assert sorted(t for e in listed for t in e.tests) == sorted(autograded_ids(nb)), (
        "every auto-graded test cell belongs to exactly one exercise")
    for e in listed:
        assert e.forbid and e.why and e.may, e.answer
        for name in e.forbid:
            obj = withheld.resolve(name)        # importable, or this raises naming it
            assert callable(obj), name
            assert withheld.definition(name).startswith("threeaxes."), name


@pytest.mark.parametrize("drop", DROPS)
def test_every_drop_has_an_attack_that_calls_the_package(drop):
    attacks = [m for m in spec.load(grading_file(drop)).mistakes if m.name.startswith("calls_")]
    assert attacks, f"{drop}: add a mistake named calls_... that answers by calling a forbidden name"
    forbidden = {n.rsplit(".", 1)[-1] for e in exercises(drop) for n in e.forbid}
    for m in attacks:
        assert any(name in m.feedback for name in forbidden), m.name



@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return withheld.stub_package({"threeaxes.data_parallel.buckets:plan_buckets"},
                                 tmp_path_factory.mktemp("withheld"))


def test_the_kernels_copy_holds_no_body(package):
    text = (package / "data_parallel" / "buckets.py").read_text()
    body = (PACKAGE / "data_parallel" / "buckets.py").read_text()
    assert "def plan_buckets(*args, **kwargs):" in text
    assert "_withheld_call('threeaxes.data_parallel.buckets:plan_buckets'" in text
    assert "for " not in text.split("def plan_buckets")[1] and "for " in body.split("def plan_buckets")[1]


@pytest.fixture
def short_dir():
    """A folder with a short path: a Unix socket's path may not pass 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="oracle-") as folder:
        yield Path(folder)


def test_the_grader_answers_as_data_and_records_each_call(short_dir, monkeypatch):
    from threeaxes.data_parallel import plan_buckets
    from threeaxes.grading.wire import oracle as client

    oracle = oracle_module.Oracle({"threeaxes.data_parallel.buckets:plan_buckets"}, short_dir)
    try:
        monkeypatch.setenv(client.ENV, oracle.socket_path)
        got = client.call("threeaxes.data_parallel.buckets:plan_buckets", ([8, 4, 4], 8), {})
        assert got == plan_buckets([8, 4, 4], 8)
        with pytest.raises(PermissionError):     # only what this drop withholds
            client.call("threeaxes.cost.planner:search", (), {})
        # a request is data: a function of a package the grader does not trust stays a placeholder
        evil = {"path": "threeaxes.data_parallel.buckets:plan_buckets",
                "args": {"__tuple__": [{"__import__": "os:system"}, 8]}, "kwargs": {"__dict__": []}}
        reply = oracle.answer(json.dumps(evil).encode())
        assert "__raised__" in reply
        assert oracle.calls == ["threeaxes.data_parallel.buckets:plan_buckets"] * 2
    finally:
        oracle.close()


def test_what_the_cost_model_returns_crosses_the_wire_as_itself():
    """Withheld functions return NamedTuples (plan's results) and Fractions (schedules' bubbles)."""
    from fractions import Fraction

    from threeaxes.cost import get_cluster, get_model, model_state_bytes, plan
    from threeaxes.grading import wire

    result = plan(get_model("13B"), get_cluster("a100-80gb", n_nodes=4), 512, dp=4, tp=8, pp=1, micro_batch=1)
    for value in (model_state_bytes(1e9, dp=2, zero_stage=1), Fraction(3, 11), result):
        back = wire.Answers(None).decode(json.loads(json.dumps(wire.encode(value))))
        assert type(back) is type(value) and back == value


def _exercise(answer, test):
    return withheld.Exercise(answer, (test,), ("threeaxes.data_parallel.plan_buckets",),
                             "plans the buckets", "plain Python")


def test_calls_count_against_open_exercises_only_from_student_cells():
    path = "threeaxes.data_parallel.buckets:plan_buckets"
    source = _notebook([_cell("demo()", id="demo"), _cell("a = 1", grade=False, solution=True, grade_id="a_answer"),
                        _cell("a", grade=True, solution=False, grade_id="a_test"),
                        _cell("b = 1", grade=False, solution=True, grade_id="b_answer"),
                        _cell("b", grade=True, solution=False, grade_id="b_test")])
    guard = borrowed.Guard([_exercise("a_answer", "a_test"), _exercise("b_answer", "b_test")],
                           borrowed.instructor_places(source))
    assert guard.is_instructors(source.cells[0], 0) and not guard.is_instructors(_cell("demo(); x = 1", id="demo"), 0)
    assert guard.verdict("a_test") is None                     # a judged, nothing borrowed
    guard.note([path], "the answer cell b_answer")             # counts for b only: a is judged
    out = guard.verdict("b_test")
    assert out["ename"] == borrowed.ENAME and "plan_buckets" in out["evalue"]
    assert "b_answer" in out["evalue"] and "plain Python" in out["evalue"]
    from threeaxes.data_parallel import plan_buckets
    alias = borrowed.Guard([_exercise("c_answer", "c_test")], ())
    alias.note_answers({"mine": plan_buckets}, "c_test")
    assert "`mine` is that function" in alias.verdict("c_test")["evalue"]


# -- instructor cells by place and id; every call once the student's part has begun ------------
PATH = "threeaxes.data_parallel.buckets:plan_buckets"


def _notebook(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def _two_exercises():
    """demo | a's answer | a's test | an instructor's explorer | b's answer | b's test | a closing figure."""
    return _notebook([_cell("demo()", id="demo"),
                      _cell("a = 1", grade=False, solution=True, grade_id="a_answer", id="a-answer"),
                      _cell("a", grade=True, solution=False, grade_id="a_test", id="a-test"),
                      _cell("explore()", id="explore"),
                      _cell("b = 1", grade=False, solution=True, grade_id="b_answer", id="b-answer"),
                      _cell("b", grade=True, solution=False, grade_id="b_test", id="b-test"),
                      _cell("closing()", id="closing")])


def test_once_the_first_student_cell_runs_no_open_exercise_gets_a_withheld_answer_whatever_runs():
    source = _two_exercises()
    guard = borrowed.Guard([_exercise("a_answer", "a_test"), _exercise("b_answer", "b_test")],
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
    copy = _cell(explore.source, id=explore.id)          # the same text and id, placed before the answer
    moved = _notebook([source.cells[0], copy, *source.cells[1:]])
    assert not borrowed.opening_is_instructors(moved, places)             # no shared opening for it
    assert borrowed.opening_is_instructors(source, places)
    guard = borrowed.Guard([_exercise("a_answer", "a_test"), _exercise("b_answer", "b_test")], places)
    assert guard.enter(moved.cells[0], 0)
    assert not guard.enter(copy, 1) and guard.refuses(PATH)               # the copy is the student's
    borrowed_id = _cell(explore.source, id="demo")                        # the text at its place, another
    assert not borrowed.Guard([], places).is_instructors(borrowed_id, 3)   # instructor cell's id
    fresh_id = _cell(explore.source, id="f00dcafe")     # a notebook saved without ids gets random ones
    assert borrowed.Guard([], places).is_instructors(fresh_id, 3)
    assert not borrowed.Guard([], places).is_instructors(_cell("explore() ", id="explore"), 2)   # moved
    assert not borrowed.Guard([], places).is_instructors(_cell("explore(1)", id="explore"), 3)   # changed
    assert not borrowed.Guard([], places).is_instructors(_cell("demo()", id="demo", grade=True,
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
        guard = borrowed.Guard([_exercise("c_answer", "c_test")], ())
        guard.note_answers({"answer": value}, "c_test")
        out = guard.verdict("c_test")
        assert out and out["ename"] == borrowed.ENAME and "plan_buckets" in out["evalue"], name
    import threeaxes.data_parallel as module

    plain = {"n": 3, "cfg": ToyConfig(), "module": module, "cls": ToyConfig, "rows": [[1.5, "x"]] * 3,
             "fn": functools.partial(sorted, [3, 1])}
    guard = borrowed.Guard([_exercise("c_answer", "c_test")], ())
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

    nb = _notebook([_cell("answer = ...", grade=False, solution=True, grade_id="c_answer"),
                    _cell("assert answer([8, 4, 4], 8) == [[0], [1, 2]]\nprint('right')",
                          grade=True, solution=False, grade_id="c_test")])
    guard = guard or borrowed.Guard([_exercise("c_answer", "c_test")], ())
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
    guard = borrowed.Guard([_exercise("c_answer", "c_test")], ())
    monkeypatch.setattr(guard, "note_answers", lambda values, test: 1 / 0)
    outputs = _judged(_FakeAnswers({"answer": sorted}), guard)
    assert [o["ename"] for o in outputs] == [ENAME_UNCHECKED] and "ZeroDivisionError" in outputs[0]["evalue"]


# -- the oracle's limits ----------------------------------------------------------------------
def _ask(socket_path, data: bytes, timeout=60):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        try:
            s.sendall(data)
        except OSError:            # refused before the whole request went: the reply is waiting
            pass
        return json.loads(s.makefile("rb").readline())


def test_the_oracle_caps_requests_replies_and_the_time_a_call_takes(short_dir):
    import threading

    oracle = oracle_module.Oracle({"time:sleep", "operator:mul", "operator:add"}, short_dir, timeout=3)
    try:
        # an endless line: read up to the cap, then refused; the grader holds no more of it
        stop, sent = threading.Event(), [0]

        def endless():
            import socket

            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(oracle.socket_path)
                chunk = b"x" * (1 << 20)
                try:
                    while not stop.is_set() and sent[0] < 256 << 20:
                        s.sendall(chunk)
                        sent[0] += len(chunk)
                except OSError:
                    pass
        writer = threading.Thread(target=endless)
        writer.start()
        writer.join(30)
        stop.set()
        assert not writer.is_alive() and sent[0] < oracle_module.MAX_REQUEST_BYTES + (16 << 20), sent[0]
        assert "over" in oracle.answer(b"x" * (oracle_module.MAX_REQUEST_BYTES + 1))
        # a small request whose answer would be huge: refused in the worker, not sent
        big = {"path": "operator:mul", "args": {"__tuple__": ["x" * 1000, 20_000]}, "kwargs": {"__dict__": []}}
        reply = _ask(oracle.socket_path, json.dumps(big).encode() + b"\n")
        assert reply["__raised__"][0][0] == "MemoryError" and "MiB" in reply["__raised__"][1]
        # a call that runs too long is stopped (its worker killed); the next call is answered
        slow = {"path": "time:sleep", "args": {"__tuple__": [600]}, "kwargs": {"__dict__": []}}
        reply = _ask(oracle.socket_path, json.dumps(slow).encode() + b"\n")
        assert reply["__raised__"][0][0] == "TimeoutError"   # the worker's limit, not the 600 s
        add = {"path": "operator:add", "args": {"__tuple__": [2, 3]}, "kwargs": {"__dict__": []}}
        assert _ask(oracle.socket_path, json.dumps(add).encode() + b"\n") == 5
    finally:
        oracle.close()


# -- one sandboxed kernel, every route --------------------------------------------------------
ROUTES = {
    "direct": "from threeaxes.data_parallel import plan_buckets\n"
              "def f_direct(s, b):\n    return plan_buckets(s, b)",
    "alias": "import threeaxes.data_parallel as dpar\nf_alias = dpar.plan_buckets",
    "getattr": "def f_getattr(s, b):\n"
               "    mod = __import__('threeaxes.data_parallel', fromlist=['x'])\n"
               "    return getattr(mod, 'plan_' + 'buckets')(s, b)",
    "importlib": "import importlib\n"
                 "def f_importlib(s, b):\n"
                 "    return importlib.import_module('threeaxes.data_parallel.buckets').plan_buckets(s, b)",
    "sys_modules": "import sys, threeaxes.data_parallel.buckets\n"
                   "def f_sys_modules(s, b):\n"
                   "    return sys.modules['threeaxes.data_parallel.buckets'].plan_buckets(s, b)",
    "code_copy": "import types\nfrom threeaxes.data_parallel import plan_buckets as pb\n"
                 "f_code_copy = types.FunctionType(pb.__code__, pb.__globals__, 'mine')",
    "subprocess": "import json, subprocess, sys\n"
                  "def f_subprocess(s, b):\n"
                  "    code = f'import json; from threeaxes.data_parallel import plan_buckets as p; '\\\n"
                  "           f'print(json.dumps(p({s!r}, {b!r})))'\n"
                  "    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)\n"
                  "    return json.loads(out.stdout)",
}
OWN = ("def f_own(s, b):\n    out, cur, n = [], [], 0\n    for i, x in enumerate(s):\n"
       "        if cur and n + x > b:\n            out.append(cur)\n            cur, n = [], 0\n"
       "        cur.append(i)\n        n += x\n    return out + ([cur] if cur else [])")
DEMO = "from threeaxes.data_parallel import plan_buckets\nprint('demo', plan_buckets([4, 4, 8], 8))"
STASH = "from threeaxes.data_parallel import plan_buckets\nstash = plan_buckets([2, 2, 4, 4], 4)"


def _cell(source, id=None, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if id:
        cell.id = id
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": not nbgrader.get("solution"),
                                     "points": 1, "task": False, **nbgrader}
    return cell


def _test(name):
    return textwrap.dedent(f"""\
        from threeaxes.data_parallel import plan_buckets as reference
        for s, b in (([4, 4, 8], 8), ([3, 1, 4, 1, 5], 5)):
            assert f_{name}(s, b) == reference(s, b), "wrong buckets"
        print("right")""")


def test_each_route_to_a_withheld_function_costs_its_exercise_the_points(package, short_dir):
    from autograder.plugins.execute import run_notebook
    from autograder.runtime.kernel_session import KernelSession

    names = [*ROUTES, "own", "stash"]
    nb = nbformat.v4.new_notebook()
    nb.cells.append(_cell(DEMO))
    guard = borrowed.Guard([_exercise(f"{n}_answer", f"{n}_test") for n in names],
                           [borrowed.place_of(nb.cells[0], 0)])
    for name in names:
        if name == "stash":   # a cell the student added: the result computed ahead, then handed in
            nb.cells.append(_cell(STASH))
            source = "def f_stash(s, b):\n    return stash if (s, b) == ([2, 2, 4, 4], 4) else []"
        else:
            source = OWN if name == "own" else ROUTES[name]
        nb.cells.append(_cell(source, grade=False, solution=True, grade_id=f"{name}_answer"))
        nb.cells.append(_cell(_test(name), grade=True, solution=False, grade_id=f"{name}_test"))
    oracle = oracle_module.Oracle(guard.paths, short_dir)
    try:
        with KernelSession(isolate=True, timeout=60, package=package,
                           oracle_socket=oracle.socket_path) as kernel:
            run_notebook(nb, kernel, 60, guard, oracle)
    finally:
        oracle.close()
    outcome = {c.metadata["nbgrader"]["grade_id"]: c.outputs for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade")}
    from threeaxes.data_parallel import plan_buckets
    # the demonstration still runs: the grader computed it
    assert nb.cells[0].outputs[0]["text"] == f"demo {plan_buckets([4, 4, 8], 8)}\n"
    assert [o["text"] for o in outcome["own_test"]] == ["right\n"]       # one's own code passes
    for name in [*ROUTES, "stash"]:
        errors = [o for o in outcome[f"{name}_test"] if o["output_type"] == "error"]
        assert errors and errors[0]["ename"] == borrowed.ENAME, (name, outcome[f"{name}_test"])
        assert "threeaxes.data_parallel.plan_buckets" in errors[0]["evalue"], name
    assert "a cell you added or changed" in outcome["stash_test"][0]["evalue"]
    # the kernel's stub named as the answer: seen as the function itself, or called in the kernel
    assert any(said in outcome["alias_test"][0]["evalue"]
               for said in ("`f_alias` is that function", "your code, run by this test"))


# Attacks that once earned points (issue 32): code of the student's that calls the withheld
# function while an instructor's cell runs (a hook, an input transformer, a thread, a profiler),
# exercise a's function computing exercise b's answer while a's test runs, and an exact copy
# of an instructor's cell placed before the answer. Each would fill `stash`, which b's answer
# hands in; none may.
_TRY = """
import sys, threading, time
from threeaxes.data_parallel import plan_buckets
stash, refused = {}, {}
def _try(route):
    if route in stash or route in refused:
        return
    try:
        stash[route] = plan_buckets([2, 2, 4, 4], 4)
    except Exception as exc:
        refused[route] = f"{type(exc).__name__}: {exc}"
"""
HOOKS = _TRY + """
ip = get_ipython()
ip.events.register("pre_run_cell", lambda *a, **k: _try("pre_run_cell"))
ip.input_transformers_cleanup.append(lambda lines: (_try("input_transformer"), lines)[1])
def _loop():
    for _ in range(400):
        if 'later_ran' in globals():
            _try("thread")
            return
        time.sleep(0.025)
threading.Thread(target=_loop, daemon=True).start()
def _profile(frame, event, arg):
    if 'later_ran' in globals() and "profile" not in stash and "profile" not in refused:
        sys.setprofile(None)
        _try("profile")
sys.setprofile(_profile)
"""
CROSSING = (OWN.replace("def f_own", "def f_a")
            .replace("    return out", "    _try('exercise a\\'s test')\n    return out"))
LATER = "later_ran = True\ntime.sleep(0.5)\nprint('the explorer')"
B_ANSWER = "def f_b(s, b):\n    return next(iter(stash.values()), [])"


def _run_attack(package, short_dir, nb, source):
    from autograder.plugins.execute import run_notebook
    from autograder.runtime.kernel_session import KernelSession

    a = withheld.Exercise("a_answer", ("a_test",), ("threeaxes.cost.model_state_bytes",), "counts", "arithmetic")
    guard = borrowed.Guard([a, _exercise("b_answer", "b_test")], borrowed.instructor_places(source))
    oracle = oracle_module.Oracle(guard.paths, short_dir)
    try:
        with KernelSession(isolate=True, timeout=60, package=package,
                           oracle_socket=oracle.socket_path) as kernel:
            run_notebook(nb, kernel, 60, guard, oracle)
            got = kernel.answers.get(["stash", "refused"])
    finally:
        oracle.close()
    return {c.metadata["nbgrader"]["grade_id"]: c.outputs for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")}, got


def _attack_source():
    return _notebook([_cell(DEMO, id="demo"),
                      _cell("f_a = ...", grade=False, solution=True, grade_id="a_answer", id="a-answer"),
                      _cell(_test("a"), grade=True, solution=False, grade_id="a_test", id="a-test"),
                      _cell(LATER, id="later"),
                      _cell("f_b = ...", grade=False, solution=True, grade_id="b_answer", id="b-answer"),
                      _cell(_test("b"), grade=True, solution=False, grade_id="b_test", id="b-test"),
                      _cell("print('closing', plan_buckets([4, 4, 8], 8))", id="closing")])


def test_withheld_calls_from_hooks_threads_and_other_exercises_tests_are_refused(package, short_dir):
    import copy

    source = _attack_source()
    nb = copy.deepcopy(source)
    nb.cells[1].source = HOOKS + "\n" + CROSSING
    nb.cells[4].source = B_ANSWER
    outcome, got = _run_attack(package, short_dir, nb, source)
    from threeaxes.data_parallel import plan_buckets

    assert got["stash"] == {}, got
    assert set(got["refused"]) == {"pre_run_cell", "input_transformer", "thread", "profile",
                                   "exercise a's test"}, got
    assert all("PermissionError" in why and "b_answer" in why for why in got["refused"].values())
    assert [o["text"] for o in outcome["a_test"]] == ["right\n"]           # a's own work still passes
    assert [o["output_type"] for o in outcome["b_test"]] == ["error"]      # b scores 0: nothing in stash
    assert nb.cells[0].outputs[0]["text"] == f"demo {plan_buckets([4, 4, 8], 8)}\n"   # the opening
    # after the last graded cell nothing runs: no withheld call can reach a grade from there
    assert [o["text"] for o in nb.cells[6].outputs] == [NOT_RUN]


def test_a_copy_of_an_instructors_cell_before_the_answer_gets_no_withheld_answer(package, short_dir):
    import copy

    source = _attack_source()
    source.cells[3].source = "later = plan_buckets([2, 2, 4, 4], 4)"
    nb = copy.deepcopy(source)
    nb.cells[1].source = OWN.replace("def f_own", "def f_a")
    nb.cells[4].source = "def f_b(s, b):\n    return later"
    nb.cells.insert(1, copy.deepcopy(source.cells[3]))      # the same code, id and metadata, moved up
    outcome, _ = _run_attack(package, short_dir, nb, source)
    assert "PermissionError" in str(nb.cells[1].outputs), nb.cells[1].outputs
    assert [o["text"] for o in outcome["a_test"]] == ["right\n"]
    assert outcome["b_test"][0]["ename"] == borrowed.ENAME
    assert "a cell you added or changed" in outcome["b_test"][0]["evalue"]


def test_without_a_grader_the_withheld_copy_says_so(package):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(package).parent)}
    env.pop("THREEAXES_ORACLE", None)
    out = subprocess.run([sys.executable, "-c", "from threeaxes.data_parallel import plan_buckets\n"
                          "plan_buckets([4], 4)"], capture_output=True, text=True, env=env, cwd="/")
    assert "NotInGradedRun" in out.stderr and "withheld" in out.stderr


# -- while a student works: the visible check says the same --------------------------------
def test_the_packages_copy_of_the_exercises_is_grading_jsons():
    assert (PACKAGE / "grading" / "own_work_data.py").read_text() == borrowed.package_source(), (
        "run `python -m autograder.judging.borrowed` after editing a grading.json's exercises")


@pytest.mark.parametrize("drop", DROPS)
def test_every_test_cell_starts_with_its_exercises_visible_check(drop):
    nb = nbformat.read(notebook(drop), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    for e in exercises(drop):
        for test in e.tests:
            assert f'own_work.check("{drop[:6]}", "{e.answer}")' in cells[test].split("### BEGIN HIDDEN")[0]


def test_the_visible_check_names_the_call_with_the_graders_message():
    from IPython.core.interactiveshell import InteractiveShell

    from threeaxes.grading import own_work

    shell = InteractiveShell.instance()
    answer = ("# Graded on your own code: ...\nimport threeaxes.data_parallel as dpar\n"
              "def all_reduce_sizes(sizes, cap):\n    return dpar.plan_buckets(sizes[::-1], cap)")
    shell.run_cell(answer, store_history=True)
    with pytest.raises(AssertionError) as caught:
        own_work.check("drop05", "all_reduce_sizes_answer")
    e = next(x for x in exercises("drop05-data-parallel-trace") if x.answer == "all_reduce_sizes_answer")
    assert str(caught.value) == borrowed.message_for(e, "threeaxes.data_parallel.plan_buckets",
                                                     "the answer cell all_reduce_sizes_answer")
    own = "# Graded on your own code: ...\ndef all_reduce_sizes(sizes, cap):\n    return [sum(sizes)]"
    shell.run_cell(own, store_history=True)
    own_work.check("drop05", "all_reduce_sizes_answer")          # one's own code: silent
    by_string = "# Graded on your own code: ...\nimport threeaxes.cost as c\nf = getattr(c, 'search')"
    shell.run_cell(by_string, store_history=True)
    with pytest.raises(AssertionError, match="threeaxes.cost.search"):
        own_work.check("drop13", "my_config_answer")
