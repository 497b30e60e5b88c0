"""nbgrader's Execute step, with test cells judged outside the student's kernel.

nbgrader_config.py puts `JudgedExecute` where nbgrader's own `Execute` stands
in `Autograde.autograde_preprocessors`; everything else nbgrader does stays:
it restores the locked and test cells (hidden tests included) from the
source, records each test cell's score from its outputs, writes the feedback.
What changes is who produces those outputs:

* the student's cells run in a sandboxed kernel (`kernel_session`, `sandbox`);
* each test cell runs in this process (`judge.judge_cell`), reading the
  notebook's answers through `threeaxes.grading.wire`.

Settings (nbgrader config, command line or environment):

* `Execute.timeout` (seconds per cell) applies, as for nbgrader's Execute;
* `JudgedExecute.isolate` (default True): the sandbox; `THREEAXES_GRADE_ISOLATE=0`
  turns it off (an instructor debugging a drop);
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbgrader.preprocessors import Execute
from traitlets import Bool

from autograder.judge import is_test_cell, judge_cell
from autograder.kernel_session import KernelSession


class JudgedExecute(Execute):
    isolate = Bool(True, help="Run the student's kernel in the sandbox "
                              "(autograder/sandbox.py).").tag(config=True)

    def preprocess(self, nb, resources):
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        isolate = self.isolate and os.environ.get("THREEAXES_GRADE_ISOLATE", "1") != "0"
        with KernelSession(isolate=isolate, files=_assignment_files(folder), timeout=self.timeout) as kernel:
            if kernel.sandbox.get("refused"):
                self.log.warning("grading without a sandbox: %s", kernel.sandbox["refused"])
            run_notebook(nb, kernel, self.timeout)
        return nb, resources


def run_notebook(nb, kernel: KernelSession, timeout: float) -> None:
    """Every code cell in order: the student's in the kernel, test cells here."""
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if is_test_cell(cell):
            outputs = judge_cell(cell.source, kernel.answers)
        elif cell.source.strip():
            outputs = kernel.run_cell(cell.source, timeout)
        else:
            continue
        count += 1
        cell.execution_count = count
        cell.outputs = [nbformat.from_dict(o) for o in outputs]


def _assignment_files(folder: Path) -> dict[str, bytes]:
    """The assignment's files beside the notebook (data a drop ships), not notebooks."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir()
            if p.is_file() and p.suffix != ".ipynb" and p.stat().st_size < 16 << 20}
