"""The configuration exercises' visible data, computed on the instructor's side.

    python -m autograder.apps.config_cases            # writes threeaxes/grading/cases/dropNN.config.json
    python -m autograder.apps.config_cases --check    # exit 1 if a stored file is not what this computes

What a configuration exercise stores for its visible check, and why: CONTRIBUTING.md ("The
visible checks' cases and the catalogue of mistakes"). Its entry in a drop's `grading.json`:

    "visible_config": {"name": "fix_config",
                       "scenario": "threeaxes.scenarios.drop10.SCENARIO",
                       "margin": 0.1, "micro_batch": null, "bubble_target": null,
                       "setup": ["from threeaxes.cost import get_model", ...],
                       "passed": "..."}

Refused: a solution the check does not pass, or a catalogued mistake it does not name (a
layout may break two rules at once, tp=16 both the node and the heads: the check names each).
"""
from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import nbformat

from autograder import course, spec
from autograder.cases import defined, generate, solution_code
from autograder.references.sizing import best_in_scenario
from threeaxes.grading import visible_config
from threeaxes.grading.sizing import plain_config


def exercise_data(drop: str, nb: nbformat.NotebookNode, exercise: spec.Exercise) -> dict:
    config = exercise.visible_config
    assert config is not None, "drop_data passes only the exercises with a visible_config"
    best = best_in_scenario(visible_config._scenario(config.scenario))
    data = {"name": config.name, "scenario": config.scenario, "margin": config.margin,
            "micro_batch": config.micro_batch, "bubble_target": config.bubble_target,
            "best_step_s": best.time.total, "passed": config.passed,
            "mistakes": [m.as_dict() for m in exercise.mistakes]}
    where = f"{drop} {exercise.answer}"
    with contextlib.redirect_stdout(io.StringIO()):     # what the answer cell prints
        solution = plain_config(defined(solution_code(nb, exercise.answer), config.name, config.setup),
                                config.name)
    found = visible_config.diagnose(data, solution)
    if found:
        raise SystemExit(f"{where}: the solution {solution} is not passed: {found}")
    for m in exercise.mistakes:
        plain = plain_config(defined(m.code, config.name, config.setup), config.name)
        named = [name for _, name, _ in visible_config.diagnose(data, plain)]
        if m.name not in named:
            raise SystemExit(f"{where}: the mistake {m.name} ({plain}) is named {named}; "
                             f"fix its code, its rule or its 'when'")
    return data


def drop_data(folder: Path) -> dict:
    drop = folder.name[:6]
    exercises = spec.load(folder / course.GRADING_FILE).exercises
    nb = nbformat.read(course.notebook_in(folder), as_version=4)
    return {e.answer: exercise_data(drop, nb, e) for e in exercises if e.visible_config}


def main(argv: list[str] | None = None) -> int:
    return generate(argv, __doc__.splitlines()[0], drop_data, ".config.json", "python -m autograder.apps.config_cases")


if __name__ == "__main__":
    sys.exit(main())
