"""No route of the package to an exercise's answer is left open (autograder/withheld.py).

`forbidden_routes.py` calls every public function of `threeaxes` (and the methods of what they
return, and the functions that take that) on each exercise's visible cases and keeps those that
give the answer, judged against the drop's reference (autograder/references/), never against
the package. Each such route must pass through a function the exercise withholds: otherwise a
student scores with no work of their own by calling it, and this test names it.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.withheld import definition, load_exercises
from forbidden_routes import PROBED_FORMS

ROOT = Path(__file__).resolve().parent.parent

# Routes that need a change outside this exercise's grading.json before they can be withheld,
# each with the change. A Plan (threeaxes.pipeline.schedules) does not cross to the grader
# (threeaxes.grading.wire sends it as an opaque placeholder), so its methods and the functions
# that take one cannot be answered by the grader for the opening's demonstrations, which call
# them: withholding them needs Plan and Simulation to become records the wire carries.
NEEDS_WIRE = "a Plan does not cross the wire (threeaxes.grading.wire_data.RECORDS): see the module"
KNOWN_OPEN = {
    "drop04/bubble_fraction_answer": NEEDS_WIRE,
    "drop04/stage0_held_answer": NEEDS_WIRE,
    "drop07/predict_answer": NEEDS_WIRE,
}


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
    """{drop/answer: {route: chain}}, found in a process of its own (memory and time bounded)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "forbidden_routes.py")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("grading, answer", _exercises())
def test_every_route_to_the_answer_is_withheld(routes, grading, answer):
    exercise = next(e for e in load_exercises(grading) if e.answer == answer)
    withheld = {definition(name) for name in exercise.forbid}
    found = routes[f"{grading.parent.name[:6]}/{answer}"]
    open_ = sorted(route for route, chain in found.items() if not withheld & set(chain))
    assert not open_, (f"{grading.parent.name}/grading.json, {answer}: {open_[0]} gives the answer and "
                       f"nothing on its way is in 'forbid' ({len(open_)} such routes: {open_[:4]})")


def test_the_probe_finds_the_routes_a_reader_knows(routes):
    """The cost model's bubble and the schedules' own count both give drop 4's bubble: the
    probe must find them, or a clean result above means nothing."""
    found = routes["drop04/bubble_fraction_answer"]
    assert "threeaxes.cost.bubble.bubble_fraction" in found
    assert any(label.endswith(".bubble_fraction()") and "gpipe" in label for label in found)
    assert "threeaxes.pipeline.stages.split_stages" in routes["drop04/stage_layers_answer"]


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
