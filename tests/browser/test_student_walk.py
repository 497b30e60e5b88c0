"""A student's walk through drop 12's layout exercise in headless Chromium: the
core's cells run from the page in order up to the exercise, a typical mistake
goes into the answer cell, and both visible checks that grade it must name that
mistake; then the instructor's solution goes in, and both must say it passed.

The mistake and the solution come from the drop's own grading data
(`source/<DROP>/grading.json`, the solution cell of the source notebook), the
message a passing layout prints from the same file: nothing here is typed from
what the check under test prints. Skips without Chromium, chromedriver or
selenium (`make test-browser` fails instead).
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from lab_page import (
    CELL_TEXT,
    KERNEL_IDLE,
    PANEL,
    RUN_CELL,
    TOKEN,
    Lab,
    chromium,
    open_notebook,
    require_browser,
    wait_for,
)

from autograder import spec
from autograder.apps import workspace
from threeaxes import sections

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))     # grading_harness.py lives beside the other tests
from grading_harness import load_drop, solution_of  # noqa: E402

DROP = "drop12-bubble-fixed-m"
ANSWER = "my_config_answer"
MISTAKE = "tp_across_nodes"                  # a mistake of source/<DROP>/grading.json that both checks catch

# run the code cell at an index, as Ctrl+Enter does
RUN_INDEX = PANEL + """
const [path, index] = arguments, done = arguments[arguments.length - 1];
const notebook = panelOf(path).content;
notebook.activeCellIndex = index;
notebook.deselectAll();
app.commands.execute('notebook:run-cell').then(() => done({index: index}), error => done({error: String(error)}));
"""

HAS_OUTPUT = PANEL + "return panelOf(arguments[0]).content.model.cells.get(arguments[1]).outputs.length > 0;"

OPENED = PANEL + """
const panel = panelOf(arguments[0]);
const kernel = panel && panel.context.isReady && panel.sessionContext.session && panel.sessionContext.session.kernel;
return Boolean(kernel && kernel.status === 'idle');
"""


def passed_message(drop_folder: Path, answer: str) -> str:
    return spec.load(drop_folder / "grading.json").exercise(answer).visible_config.passed


def core_cells_before(nb, answer: str) -> list[int]:
    """The core's code cells above the answer cell, without other exercises' answer and test
    cells (a student who skips an exercise leaves its answer unrun)."""
    core, _, _ = sections.split(nb)
    stop = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == answer)
    return [i for i, c in core if i < stop and c["cell_type"] == "code" and "nbgrader" not in c.metadata]


@pytest.mark.slow
def test_drop12_layout_check_names_the_mistake_then_passes(tmp_path):
    require_browser()
    folder = ROOT / "source" / DROP
    drop = load_drop(folder)
    mistake = next(m for m in drop.mistakes if m.name == MISTAKE)
    assert mistake.answer == ANSWER and len(mistake.loses) == 2, "the walk needs a mistake both checks catch"
    solution = solution_of(nbformat.read(folder / f"{DROP}.ipynb", as_version=4), ANSWER)
    passed = passed_message(folder, ANSWER)

    repo = tmp_path / "repo"
    for name in ("notebooks", "release"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    workspace.sync(repo)
    page = f"release/{DROP}/{DROP}.ipynb"
    released = nbformat.read(repo / "work" / page, as_version=4)

    lab = Lab(repo, tmp_path)
    driver, times = None, {}
    try:
        driver = chromium(tmp_path)
        driver.get(f"{lab.base}/lab/tree/{page}?token={TOKEN}")
        open_notebook(driver, page)
        wait_for(driver, OPENED, page, what=f"{DROP} to open and its kernel to start")
        for index in core_cells_before(released, ANSWER):
            ran = driver.execute_async_script(RUN_INDEX, page, index)
            assert "error" not in ran, ran
            wait_for(driver, KERNEL_IDLE, page, what=f"core cell {index} to run")

        def answer_then_checks(code: str, label: str) -> dict:
            ran = driver.execute_async_script(RUN_CELL, page, ANSWER, code)
            assert "error" not in ran, ran
            wait_for(driver, KERNEL_IDLE, page, what=f"the {label} answer to run")
            shown = {}
            for check in mistake.loses:
                t0 = time.perf_counter()
                ran = driver.execute_async_script(RUN_CELL, page, check, None)
                assert "error" not in ran, ran
                wait_for(driver, KERNEL_IDLE, page, what=f"{check} to run")
                times[f"{check} ({label})"] = time.perf_counter() - t0
                wait_for(driver, HAS_OUTPUT, page, ran["index"], what=f"{check}'s output", timeout=30)
                shown[check] = driver.execute_script(CELL_TEXT, page, ran["index"])
            driver.save_screenshot(str(tmp_path / f"{DROP}-{label}.png"))
            return shown

        for check, text in answer_then_checks(mistake.code, "wrong").items():
            assert "check failed" in text and mistake.feedback in text, (
                f"{check} should name the mistake {MISTAKE} ({mistake.feedback!r}); the page shows:\n{text}")
            assert "Traceback" not in text, f"{check} should show its message alone:\n{text}"
        for check, text in answer_then_checks(solution, "right").items():
            assert "check failed" not in text and passed in text, (
                f"{check} should say the solution passed ({passed!r}); the page shows:\n{text}")
    finally:
        if driver is not None:
            driver.quit()
        lab.stop()
        print("\n" + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
