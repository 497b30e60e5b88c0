"""The visible checks' stored cases, computed on the instructor's side.

    python -m autograder.cases            # writes threeaxes/grading/cases/dropNN.json
    python -m autograder.cases --check    # exit 1 if a stored file is not what this computes

Each exercise of a drop's `grading.json` with a "visible" entry gets its cases:

    "visible": {"call": "tp_wire_bytes_per_block", "form": "number",
                "reference": "expected_wire_bytes",        # in autograder/references/dropNN.py
                "args": [[2, 8, 32, 2, 8, false], ...],
                "ranks": null | {"runner": "threeaxes.grading.drop06.sp_mlp_results", "world": 2},
                "value": false,                            # true: the answer is a value, not a function
                "setup": ["toy = ToyConfig()", ...],       # notebook lines the answer cell needs first
                "passed": "...", "otherwise": "...",         # {want}/{got}: first case's values
                "sealed": ...,   # default: true when the answer is one fixed value (its form stored, not its value)
                "reveal": true,  # a sealed answer's mistakes' sentences stored too, for its reveal cell
                "fraction": true}  # a sealed answer's numbers are shares: stored as "fraction" forms

How each case's right value and each catalogued mistake's are computed, and which case sets are
refused: CONTRIBUTING.md ("The visible checks' cases and the catalogue of mistakes"). For an
exercise run on ranks the right value is what the runner sends back when the notebook's own
solution runs (which the reference's judge must accept).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import nbformat

from autograder import course, spec
from threeaxes.grading import visible

OUT = course.CASES


def solution_code(nb: nbformat.NotebookNode, grade_id: str) -> str:
    """An answer cell's source with nbgrader's solution markers taken out."""
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in cell.source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def defined(code: str, name: str, setup: Iterable[str] = ()) -> Any:
    """What `code`, run as a notebook cell would run it (after the notebook's `setup`
    lines), binds to `name`."""
    namespace: dict[str, Any] = {"__name__": "__main__"}     # functions travel to ranks by value, as a notebook's do
    exec(compile("\n".join(setup), f"<setup of {name}>", "exec"), namespace)
    exec(compile(code, f"<{name}>", "exec"), namespace)
    return namespace[name]


def _value(vis: dict, answer: object, args: list) -> Any:
    """A case's plain value of `answer` (a function, or a value), as the visible check sees it."""
    return visible.plain(visible._answer_for(vis, answer, args), vis["form"],
                         visible._call(vis, args))


def exercise_cases(drop: str, nb: nbformat.NotebookNode, exercise: spec.Exercise | dict) -> dict:
    if isinstance(exercise, dict):   # an entry as grading.json writes it (tests/checks/test_visible_cases.py)
        exercise = spec.exercise_from(exercise, f"source/{drop}/grading.json")
    assert exercise.visible is not None, "drop_cases passes only the exercises with a visible check"
    vis = exercise.visible.as_dict()
    vis.setdefault("form", "raw" if vis.get("ranks") else "number")
    references = importlib.import_module(f"autograder.references.{drop}")
    catalogue = {m.name: m for m in exercise.mistakes}
    setup = vis.pop("setup", [])
    wrong = {name: defined(m.code, vis["call"], setup) for name, m in catalogue.items()}
    solution = defined(solution_code(nb, exercise.answer), vis["call"], setup)
    cases = []
    for args in vis.pop("args"):
        if vis.get("ranks"):
            want = _value(vis, solution, args)
        else:
            want = visible.plain(getattr(references, vis["reference"])(*args), vis["form"], "reference")
        mistakes = {}
        for name, fn in wrong.items():
            try:
                mistakes[name] = _value(vis, fn, args)
            except AssertionError:      # a mistake that raises here is told apart by the error
                continue
        cases.append({"args": args, "want": want, "mistakes": mistakes})
    if vis.setdefault("sealed", bool(vis.get("value")) or (not vis.get("ranks") and
                                                         all(not c["args"] for c in cases))):
        # one fixed answer: its form only (threeaxes.grading.visible.shape); no value, no digest
        # of one and no mistake's value (each tells the answer), nothing to name mistakes with:
        # the test cell's hidden half checks the value when the notebook is graded
        # The mistakes' sentences (no value) travel as "slips", for the reveal after the graded
        # answer to name the one a student made (threeaxes.grading.slips), with the tolerance.
        reveal, fraction = vis.get("reveal"), vis.get("fraction")
        vis = {k: v for k, v in vis.items() if k in ("call", "form", "value", "sealed", "rel")}
        vis["cases"] = [{"args": c["args"], "shape": _fraction(visible.shape(c["want"]), fraction)}
                        for c in cases]
        vis["mistakes"] = {}
        if reveal:    # only where no sentence gives the answer away (not a table of choices)
            vis["slips"] = {name: m.says for name, m in catalogue.items()}
        return vis
    _refuse_lookalikes(drop, exercise.answer, cases, list(wrong), vis.get("rel", visible.REL))
    vis.pop("reference", None)
    vis["cases"] = cases
    vis["mistakes"] = {name: m.says for name, m in catalogue.items()}
    return vis


def _fraction(shape: Any, fraction: bool | None) -> Any:
    """A sealed answer's shape with each number a "fraction" (between 0 and 1: a percentage
    fails its form check) where the exercise says its numbers are shares."""
    if not fraction:
        return shape
    if type(shape) is dict:
        return {k: _fraction(v, True) for k, v in shape.items()}
    if type(shape) is list:
        return [_fraction(v, True) for v in shape]
    return "fraction" if shape in ("number", "positive number") else shape


def _refuse_lookalikes(drop: str, answer: str, cases: list[dict], names: list[str], rel: float = visible.REL) -> None:
    def values(name: str) -> list:
        return [case["mistakes"].get(name, "raises") for case in cases]

    for name in names:
        if all(visible.same(v, c["want"], rel) for v, c in zip(values(name), cases)):
            raise SystemExit(f"{drop} {answer}: the mistake {name!r} gives the right value on every "
                             f"visible case; add a case that tells it apart")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if all(visible.same(x, y, rel) for x, y in zip(values(a), values(b))):
                raise SystemExit(f"{drop} {answer}: the mistakes {a!r} and {b!r} give the same values "
                                 f"on every visible case; add a case that tells them apart")


def drop_cases(folder: Path) -> dict:
    drop = folder.name[:6]
    exercises = spec.load(folder / course.GRADING_FILE).exercises
    nb = nbformat.read(course.notebook_in(folder), as_version=4)
    return {e.answer: exercise_cases(drop, nb, e) for e in exercises if e.visible}


def render(cases: dict) -> str:
    return json.dumps(cases, indent=1, sort_keys=True) + "\n"


def generate(argv: list[str] | None, description: str, collect: Callable[[Path], dict], suffix: str,
             command: str) -> int:
    """The command line of a generator of stored data: `collect(folder)` gives a drop's
    data ({} for none), written to OUT/dropNN<suffix>; `--check` only compares."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("drops", nargs="*", help="dropNN prefixes (default: every drop)")
    args = parser.parse_args(argv)
    stale = []
    for name in course.drops():
        if not name.startswith("drop") or args.drops and not name.startswith(tuple(args.drops)):
            continue
        data = collect(course.folder(name))
        if not data:
            continue
        path = OUT / f"{name[:6]}{suffix}"
        text = render(data)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"{course.shown(path)}: {len(data)} exercises", file=sys.stderr)
    if stale:
        print(f"stale: {', '.join(stale)}; run {command}", file=sys.stderr)
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    return generate(argv, __doc__.splitlines()[0], drop_cases, ".json", "python -m autograder.cases")


if __name__ == "__main__":
    sys.exit(main())
