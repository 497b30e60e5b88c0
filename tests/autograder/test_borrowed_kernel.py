"""Points only for the student's own code, in one sandboxed kernel (autograder/judging/borrowed.py):
the kernel's copy of a withheld function has no body, and each route to it (a call, an alias,
getattr, importlib, sys.modules, a copy of its code, a subprocess, a stash in an added cell,
a hook, a thread, another exercise's test, a moved instructor cell) costs its exercise the
points, while a demonstration that calls it still runs and an answer of one's own still passes."""
import os
import textwrap
from pathlib import Path

import nbformat
import pytest
from borrowed_helpers import code_cell, exercise, make_notebook, short_folder

from autograder import withheld
from autograder.course import PACKAGE
from autograder.judging import borrowed
from autograder.judging import oracle as oracle_module
from autograder.plugins.execute import NOT_RUN


@pytest.fixture
def short_dir():
    with short_folder() as folder:
        yield folder


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
    nb.cells.append(code_cell(DEMO))
    guard = borrowed.Guard([exercise(f"{n}_answer", f"{n}_test") for n in names],
                           [borrowed.place_of(nb.cells[0], 0)])
    for name in names:
        if name == "stash":   # a cell the student added: the result computed ahead, then handed in
            nb.cells.append(code_cell(STASH))
            source = "def f_stash(s, b):\n    return stash if (s, b) == ([2, 2, 4, 4], 4) else []"
        else:
            source = OWN if name == "own" else ROUTES[name]
        nb.cells.append(code_cell(source, grade=False, solution=True, grade_id=f"{name}_answer"))
        nb.cells.append(code_cell(_test(name), grade=True, solution=False, grade_id=f"{name}_test"))
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
    guard = borrowed.Guard([a, exercise("b_answer", "b_test")], borrowed.instructor_places(source))
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
    return make_notebook([code_cell(DEMO, id="demo"),
                          code_cell("f_a = ...", grade=False, solution=True, grade_id="a_answer", id="a-answer"),
                          code_cell(_test("a"), grade=True, solution=False, grade_id="a_test", id="a-test"),
                          code_cell(LATER, id="later"),
                          code_cell("f_b = ...", grade=False, solution=True, grade_id="b_answer", id="b-answer"),
                          code_cell(_test("b"), grade=True, solution=False, grade_id="b_test", id="b-test"),
                          code_cell("print('closing', plan_buckets([4, 4, 8], 8))", id="closing")])


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
