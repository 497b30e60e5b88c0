"""Points only for the student's own code (autograder/borrowed.py).

Each exercise's entry in its drop's grading.json names what it may not call; a
graded kernel holds no body for those functions, the grader answers them and
puts each call down to the cell that made it. Here: every name exists, the
kernel's copy really lacks the body, the grader answers as data, and in one
sandboxed kernel each route to the function (a call, an alias, getattr,
importlib, sys.modules, a copy of its code, a subprocess, a stash in an added
cell) costs its exercise the points, while a demonstration that calls it still
runs and an answer of one's own still passes. The drops' attack submissions
(grading.json "mistakes" whose names start with "calls_") are graded by
tests/test_grading.py like every other mistake.
"""
import json
import os
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograder import borrowed
from grading_harness import ROOT, answer_ids, autograded_ids, drops

DROPS = [d.name for d in drops()]


def exercises(drop):
    return borrowed.load_exercises(ROOT / "source" / drop / "grading.json")


@pytest.mark.parametrize("drop", DROPS)
def test_every_graded_exercise_names_what_it_may_not_call_and_each_name_exists(drop):
    nb = nbformat.read(ROOT / "source" / drop / f"{drop}.ipynb", as_version=4)
    listed = exercises(drop)
    assert sorted(e.answer for e in listed) == sorted(answer_ids(nb)), "one entry per answer cell"
    assert sorted(t for e in listed for t in e.tests) == sorted(autograded_ids(nb)), (
        "every auto-graded test cell belongs to exactly one exercise")
    for e in listed:
        assert e.forbid and e.why and e.may, e.answer
        for name in e.forbid:
            obj = borrowed.resolve(name)        # importable, or this raises naming it
            assert callable(obj), name
            assert borrowed.definition(name).startswith("threeaxes."), name


@pytest.mark.parametrize("drop", DROPS)
def test_every_drop_has_an_attack_that_calls_the_package(drop):
    data = json.loads((ROOT / "source" / drop / "grading.json").read_text())
    attacks = [m for m in data["mistakes"] if m["name"].startswith("calls_")]
    assert attacks, f"{drop}: add a mistake named calls_... that answers by calling a forbidden name"
    forbidden = {n.rsplit(".", 1)[-1] for e in exercises(drop) for n in e.forbid}
    for m in attacks:
        assert any(name in m["feedback"] for name in forbidden), m["name"]



@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return borrowed.stub_package({"threeaxes.data_parallel.buckets:plan_buckets"},
                                 tmp_path_factory.mktemp("withheld"))


def test_the_kernels_copy_holds_no_body(package):
    text = (package / "data_parallel" / "buckets.py").read_text()
    body = (ROOT / "threeaxes" / "data_parallel" / "buckets.py").read_text()
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
    from threeaxes.grading import oracle as client

    oracle = borrowed.Oracle({"threeaxes.data_parallel.buckets:plan_buckets"}, short_dir)
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
    return borrowed.Exercise(answer, (test,), ("threeaxes.data_parallel.plan_buckets",),
                             "plans the buckets", "plain Python")


def test_calls_count_against_open_exercises_only_from_student_cells():
    path = "threeaxes.data_parallel.buckets:plan_buckets"
    guard = borrowed.Guard([_exercise("a_answer", "a_test"), _exercise("b_answer", "b_test")], {"demo()"})
    assert guard.is_instructors("demo()\n") and not guard.is_instructors("demo(); x = 1")
    assert guard.verdict("a_test") is None                     # a judged, nothing borrowed
    guard.note([path], "the answer cell b_answer")             # counts for b only: a is judged
    out = guard.verdict("b_test")
    assert out["ename"] == borrowed.ENAME and "plan_buckets" in out["evalue"]
    assert "b_answer" in out["evalue"] and "plain Python" in out["evalue"]
    from threeaxes.data_parallel import plan_buckets
    alias = borrowed.Guard([_exercise("c_answer", "c_test")], set())
    alias.note_answers({"mine": plan_buckets}, "c_test")
    assert "`mine` is that function" in alias.verdict("c_test")["evalue"]


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


def _cell(source, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
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
    from autograder.execute import run_notebook
    from autograder.kernel_session import KernelSession

    names = [*ROUTES, "own", "stash"]
    guard = borrowed.Guard([_exercise(f"{n}_answer", f"{n}_test") for n in names], {DEMO})
    nb = nbformat.v4.new_notebook()
    nb.cells.append(_cell(DEMO))
    for name in names:
        if name == "stash":   # a cell the student added: the result computed ahead, then handed in
            nb.cells.append(_cell(STASH))
            source = "def f_stash(s, b):\n    return stash if (s, b) == ([2, 2, 4, 4], 4) else []"
        else:
            source = OWN if name == "own" else ROUTES[name]
        nb.cells.append(_cell(source, grade=False, solution=True, grade_id=f"{name}_answer"))
        nb.cells.append(_cell(_test(name), grade=True, solution=False, grade_id=f"{name}_test"))
    oracle = borrowed.Oracle(guard.paths, short_dir)
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
    assert "`f_alias` is that function" in outcome["alias_test"][0]["evalue"]


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
    assert (ROOT / "threeaxes/grading/own_work_data.py").read_text() == borrowed.package_source(), (
        "run `python -m autograder.borrowed` after editing a grading.json's exercises")


@pytest.mark.parametrize("drop", DROPS)
def test_every_test_cell_starts_with_its_exercises_visible_check(drop):
    nb = nbformat.read(ROOT / "source" / drop / f"{drop}.ipynb", as_version=4)
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
