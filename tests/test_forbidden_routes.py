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

from autograder.withheld import load_exercises

ROOT = Path(__file__).resolve().parent.parent

# Routes that need a change outside this exercise's grading.json before they can be withheld,
# each with the change ({"drop/answer": why}); none now.
KNOWN_OPEN: dict = {}


def _exercises():
    found = []
    for path in sorted((ROOT / "source").glob("drop*/grading.json")):
        for e in json.loads(path.read_text()).get("exercises", []):
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
                       f"every function in 'forbid' and 'in_kernel' refused ({len(open_)} such routes: "
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
    del entry["why"]
    (folder / "grading.json").write_text(json.dumps({"exercises": [entry]}))
    with pytest.raises(ValueError, match=r"exercises\[0\] needs the keys"):
        load_exercises(folder / "grading.json")


_PLAN_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
import threeaxes
assert threeaxes.__file__.startswith(sys.argv[1]), threeaxes.__file__
from threeaxes.pipeline import gpipe, simulate
plan = gpipe(4, 8)
for name, call in (("bubble", plan.bubble_fraction), ("simulated", lambda: simulate(plan).idle_fraction)):
    try:
        print(name, call())
    except Exception as exc:
        print(name, type(exc).__name__)
"""


def test_a_function_run_in_the_kernel_asks_leave_and_is_refused_while_its_exercise_is_open(tmp_path):
    """`in_kernel`: the kernel's copy keeps the body of a Plan's bubble under another name and runs
    it only when the grader allows; from the first student-written cell on, the grader refuses
    it while an exercise that forbids it is open, and records the call either way."""
    import tempfile

    from autograder import borrowed, withheld
    from autograder import oracle as oracle_module
    from threeaxes.grading import oracle as client

    paths = {"threeaxes.pipeline.schedules:Plan.bubble_fraction", "threeaxes.pipeline.simulate:simulate"}
    package = withheld.stub_package(paths, tmp_path, asked=paths)
    text = (package / "pipeline" / "schedules.py").read_text()
    assert "def _withheld_body_bubble_fraction(self)" in text and "def bubble_fraction(*args, **kwargs):" in text
    exercise = withheld.Exercise("b_answer", ("b_test",), ("threeaxes.pipeline.schedules.Plan.bubble_fraction",
                                                           "threeaxes.pipeline.simulate"), "counts", "arithmetic")
    with tempfile.TemporaryDirectory(prefix="oracle-") as folder:
        oracle = oracle_module.Oracle(paths, Path(folder))
        oracle.guard = borrowed.Guard([exercise], ())
        env = {"PATH": "/usr/bin:/bin", client.ENV: oracle.socket_path}

        def run():
            done = subprocess.run([sys.executable, "-c", _PLAN_CALLS, str(tmp_path)], capture_output=True,
                                  text=True, timeout=120, env=env)
            assert done.returncode == 0, done.stderr[-2000:]
            return dict(line.split(" ", 1) for line in done.stdout.splitlines())
        try:
            assert run() == {"bubble": "3/11", "simulated": "3/11"}      # the opening: answered
            assert sorted(set(oracle.calls)) == sorted(paths)
            oracle.guard.started = True                                  # a student's cell has run
            assert run() == {"bubble": "PermissionError", "simulated": "PermissionError"}
            oracle.guard.judged.add("b_test")                            # its exercise is judged
            assert run() == {"bubble": "3/11", "simulated": "3/11"}
        finally:
            oracle.close()
