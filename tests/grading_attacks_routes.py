"""Submissions that score through a route the exercise does not name, or that put script in the
pages the instructor and the student open (issue 43, parts 3 and 4).

Each is a release with cells added or answers written; graded through nbgrader as `make grade`
grades (tests/autograder/test_grading_attacks_routes.py), each must score what a blank scores (0 on every
test cell) and leave every page inert.
"""
from __future__ import annotations

import copy

import nbformat

DROP = "drop01-three-kinds-of-parallel"
PIPELINE = "drop04-pipeline-parallel"

# drop 1's byte counts through the cost model's per-rank state, which grading.json did not
# forbid until tests/autograder/test_forbidden_routes.py found it
ROUTE_ANSWERS = {
    "training_bytes_answer": (
        "from threeaxes.cost import rank_state_bytes\n"
        "def training_bytes(n_params, precision):\n"
        "    state = rank_state_bytes(n_params, precision=precision)\n"
        "    return {k: float(getattr(state, k)) for k in ('params', 'grads', 'optimizer')}\n"),
    "largest_model_answer": (
        "from threeaxes.cost import rank_state_bytes\n"
        "largest_model_billion = 80e9 / rank_state_bytes(10**9, precision='mixed').total\n"),
}


def _js(n: int) -> str:
    """Script that renames the page, with no quote in it (it sits inside strings of every kind)."""
    return f"void(document.title=/pwned-{n}/.source)"


# outputs whose markup would run on the page: an image whose width is an attribute of its own,
# HTML with handlers, markdown with a javascript: link, MathJax's \href
MARKUP_CELL = f'''from IPython.display import display
display({{"image/png": "AAAA", "text/plain": "figure"}}, raw=True,
        metadata={{"image/png": {{"width": "1 onerror=\\"{_js(1)}\\""}},
                  "width": "1 onerror={_js(2).replace(" ", "")}"}})
display({{"text/html": '<img src=x onerror="{_js(3)}"><a href="javascript:{_js(4)}">x</a>',
          "text/markdown": "[md](javascript:{_js(5)}) $\\\\href{{javascript:{_js(6)}}}{{x}}$",
          "text/latex": "$\\\\href{{javascript:{_js(7)}}}{{x}}$", "text/plain": "shown"}}, raw=True)
'''
MARKUP_MARKDOWN = (f"My notes: [a link](javascript:{_js(8)}), <javascript:{_js(9)}>, "
                   f"$\\href{{javascript:{_js(10)}}}{{y}}$ and <img src=x onerror=\"{_js(11)}\">")


# drop 4's bubble and stage 0's count through the schedules themselves (a Plan's own count,
# the simulator's peak), which "forbid" did not name (issue 43)
PLAN_ANSWERS = {
    "bubble_fraction_answer": (
        "from threeaxes.pipeline import gpipe\n"
        "def bubble_fraction(p, m):\n"
        "    return float(gpipe(p, m).bubble_fraction())\n"),
    "stage0_held_answer": (
        "from threeaxes.pipeline import make_plan, peak_in_flight\n"
        "def stage0_microbatches_held(schedule, p, m):\n"
        "    return peak_in_flight(make_plan(schedule, p, m), 0)\n"),
}


# drop 4's bubble through the simulator: the idle share of a simulated GPipe run
SIMULATED_ANSWERS = {
    "bubble_fraction_answer": (
        "from threeaxes.pipeline import gpipe, simulate\n"
        "def bubble_fraction(p, m):\n"
        "    return float(simulate(gpipe(p, m)).idle_fraction)\n"),
}


def _answered(released, answers: dict):
    nb = copy.deepcopy(released)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


def plan_submission(released):
    """Drop 4's release with its bubble and stage 0 answers computed by the schedules."""
    return _answered(released, PLAN_ANSWERS)


def simulated_submission(released):
    """Drop 4's release with its bubble answer read off the simulator."""
    return _answered(released, SIMULATED_ANSWERS)


def route_submission(released):
    """The release with drop 1's byte answers computed by rank_state_bytes."""
    return _answered(released, ROUTE_ANSWERS)


def markup_submission(released):
    """The release with a cell of hostile outputs and a markdown cell of hostile links first."""
    nb = copy.deepcopy(released)
    nb.cells[1:1] = [nbformat.v4.new_code_cell(MARKUP_CELL), nbformat.v4.new_markdown_cell(MARKUP_MARKDOWN)]
    return nb


# {drop: {student: how its notebook is made from the release}}
ATTACKS = {DROP: {"attack-route-rank-state-bytes": route_submission, "attack-markup-in-pages": markup_submission},
           PIPELINE: {"attack-route-plan-methods": plan_submission, "attack-route-simulate": simulated_submission}}
