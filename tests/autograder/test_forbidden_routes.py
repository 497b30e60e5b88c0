"""No route of the package to an exercise's answer is left open (autograder/withheld.py).

`forbidden_routes.py` calls every public function of `threeaxes` (and the methods of what they
return, and the functions that take that) on each exercise's visible cases, with the functions
the exercise withholds raising as the kernel's refused stubs do, and keeps those that still give
the answer, judged against the drop's reference (autograder/references/), never against the
package. Each is a way to score with no work of one's own: this test names it.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from forbidden_routes import PROBED_FORMS

from autograder import spec
from autograder.withheld import load_exercises

ROOT = Path(__file__).resolve().parents[2]

# Routes still open, each with the change that closes it ({"drop/answer": why}); its test fails
# (strict) once the route is closed, so the entry leaves with the fix.
KNOWN_OPEN: dict = {}


def _exercises():
    found = []
    for path in sorted((ROOT / "source").glob("drop*/grading.json")):
        for e in (exercise.entry for exercise in spec.load(path).exercises):
            vis = e.get("visible") or {}
            if not vis.get("ranks") and "reference" in vis and vis.get("form") in PROBED_FORMS:
                key = f"{path.parent.name[:6]}/{e['answer']}"
                marks = [pytest.mark.xfail(strict=True, reason=KNOWN_OPEN[key])] if key in KNOWN_OPEN else []
                found.append(pytest.param(path, e["answer"], id=key, marks=marks))
    return found


@pytest.fixture(scope="module")
def routes():
    """{"open": {drop/answer: [route]}, "unwithheld": {...}}, found in a process of its own
    (memory and time bounded)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "forbidden_routes.py")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("grading, answer", _exercises())
def test_every_route_to_the_answer_is_withheld(routes, grading, answer):
    open_ = routes["open"][f"{grading.parent.name[:6]}/{answer}"]
    assert not open_, (f"{grading.parent.name}/grading.json, {answer}: {open_[0]} gives the answer with "
                       f"every function in 'forbid' refused ({len(open_)} such routes: "
                       f"{open_[:4]})")


def test_the_probe_finds_the_routes_a_reader_knows(routes):
    """The cost model's bubble, the schedules' own count and the simulator all give drop 4's
    bubble once nothing is withheld: the probe must find them, or a clean result above means
    nothing."""
    found = routes["unwithheld"]["drop04/bubble_fraction_answer"]
    assert "threeaxes.cost.bubble.bubble_fraction" in found
    assert "threeaxes.pipeline.schedules.gpipe(...).bubble_fraction()" in found
    assert any(label.startswith("threeaxes.pipeline.simulate.simulate(") for label in found)
    assert "threeaxes.pipeline.stages.split_stages" in routes["unwithheld"]["drop04/stage_layers_answer"]


def test_a_mistyped_forbid_entry_names_the_file_and_the_key(tmp_path):
    folder = tmp_path / "drop99-example"
    folder.mkdir()
    entry = {"answer": "a_answer", "tests": ["a"], "why": "w", "may": "m",
             "forbid": ["threeaxes.cost.bubble_fraction", "threeaxes.cost.bubble_fractoin"]}
    (folder / "grading.json").write_text(json.dumps({"exercises": [entry]}))
    with pytest.raises(ValueError, match=r"drop99-example/grading.json: exercises\[0\]\.forbid\[1\] = "
                                         r"'threeaxes.cost.bubble_fractoin'"):
        load_exercises(folder / "grading.json")
    entry["forbid"] = ["threeaxes.cost.bubble_fraction"]
    stale = {**entry, "in_kernel": ["threeaxes.pipeline.simulate"]}
    (folder / "grading.json").write_text(json.dumps({"exercises": [stale]}))
    with pytest.raises(ValueError, match=r"exercises\[0\] has the key 'in_kernel': move its names into 'forbid'"):
        load_exercises(folder / "grading.json")
    del entry["why"]
    (folder / "grading.json").write_text(json.dumps({"exercises": [entry]}))
    with pytest.raises(ValueError, match=r"exercises\[0\] needs the keys"):
        load_exercises(folder / "grading.json")


_PLAN_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
import threeaxes
assert threeaxes.__file__.startswith(sys.argv[1]), threeaxes.__file__
from threeaxes.pipeline import gpipe, make_plan, peak_in_flight, simulate
plan = gpipe(4, 8)
for name, call in (("bubble", plan.bubble_fraction), ("simulated", lambda: simulate(plan).idle_fraction),
                   ("gantt", lambda: len(simulate(plan).events[3])),
                   ("held", lambda: peak_in_flight(make_plan("1f1b", 4, 8), 0))):
    try:
        print(name, call())
    except Exception as exc:
        print(name, type(exc).__name__)
"""
PLAN_PATHS = {"threeaxes.pipeline.schedules:Plan.bubble_fraction", "threeaxes.pipeline.simulate:simulate",
              "threeaxes.pipeline.simulate:peak_in_flight"}


def test_a_plan_crosses_to_the_grader_which_refuses_its_functions_while_their_exercise_is_open(tmp_path):
    """A Plan is data the wire carries, so a Plan's bubble, the simulator and the peak count are
    withheld like any function: the kernel's copy holds a stub, the grader computes the call
    (the opening's figures), and from the first student-written cell on refuses it while an
    exercise that forbids it is open."""
    import tempfile

    from autograder import withheld
    from autograder.judging import borrowed
    from autograder.judging import oracle as oracle_module
    from threeaxes.grading.wire import oracle as client

    package = withheld.stub_package(PLAN_PATHS, tmp_path)
    text = (package / "pipeline" / "schedules.py").read_text()
    assert "def bubble_fraction(*args, **kwargs):" in text and "Fraction(self.idle_slots()" not in text
    exercise = withheld.Exercise("b_answer", ("b_test",), ("threeaxes.pipeline.schedules.Plan.bubble_fraction",
                                                           "threeaxes.pipeline.simulate",
                                                           "threeaxes.pipeline.peak_in_flight"), "counts", "arithmetic")
    with tempfile.TemporaryDirectory(prefix="oracle-") as folder:
        oracle = oracle_module.Oracle(PLAN_PATHS, Path(folder))
        oracle.guard = borrowed.Guard([exercise], ())
        env = {"PATH": "/usr/bin:/bin", client.ENV: oracle.socket_path}

        def run():
            done = subprocess.run([sys.executable, "-c", _PLAN_CALLS, str(tmp_path)], capture_output=True,
                                  text=True, timeout=120, env=env)
            assert done.returncode == 0, done.stderr[-2000:]
            return dict(line.split(" ", 1) for line in done.stdout.splitlines())
        # GPipe on p=4, m=8: (p-1)/(m+p-1) idle; the last rank runs 2m actions; 1F1B's stage 0 holds p
        answered = {"bubble": "3/11", "simulated": "3/11", "gantt": "16", "held": "4"}
        try:
            assert run() == answered                                     # the opening: answered
            assert sorted(set(oracle.calls)) == sorted(PLAN_PATHS)
            oracle.guard.started = True                                  # a student's cell has run
            assert run() == dict.fromkeys(answered, "PermissionError")
            oracle.guard.judged.add("b_test")                            # its exercise is judged
            assert run() == answered
        finally:
            oracle.close()


def _body_lines(path: str) -> list[str]:
    """The lines of a function's body in the package (its docstring left out), stripped, that
    are long enough to say something of their own."""
    import ast
    import importlib
    import inspect
    import textwrap

    module, qualname = path.split(":")
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()[body[0].lineno - 1:node.end_lineno]
    return [line.strip() for line in lines if len(line.strip()) >= 12]


@pytest.mark.parametrize("drop", ["drop04-pipeline-parallel", "drop07-pipeline-trace",
                                  "drop01-three-kinds-of-parallel"])
def test_the_kernels_copy_holds_no_line_of_a_forbidden_body(drop):
    """The copy a graded kernel imports (`package_for`, as the grader builds it) has, of each
    function the drop forbids, a stub and nothing else: each line of the body is in the copy
    only as often as the rest of the package has it, and no body is kept under another name."""
    from autograder.withheld import PACKAGE, definition, package_for

    paths = {definition(n) for e in load_exercises(ROOT / "source" / drop / "grading.json") for n in e.forbid}
    copy = package_for(paths)
    texts = {f.relative_to(copy): f.read_text() for f in copy.rglob("*.py")}
    originals = {f.relative_to(PACKAGE): f.read_text() for f in PACKAGE.rglob("*.py")}
    assert set(texts) == set(originals) and not any("_withheld_body_" in t for t in texts.values())
    bodies = {path: _body_lines(path) for path in sorted(paths)}
    assert all(bodies.values()), bodies
    everywhere = [line.strip() for t in texts.values() for line in t.splitlines()]
    before = [line.strip() for t in originals.values() for line in t.splitlines()]
    in_bodies = [line for lines in bodies.values() for line in lines]
    for path, lines in bodies.items():
        for line in lines:
            left = before.count(line) - in_bodies.count(line)
            assert everywhere.count(line) == left, f"{path}: {line!r} is still in the kernel's copy"
