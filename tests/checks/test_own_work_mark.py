"""The own-work hint finds every answer cell, whatever word its first line uses (code, work,
choice, arithmetic): each graded answer cell of drops 10-14 is one it would read."""
from pathlib import Path

import nbformat
import pytest

from threeaxes.grading import own_work
from threeaxes.grading.own_work_data import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
DROPS = sorted(p.name for p in (ROOT / "source").glob("drop1[0-4]-*"))


@pytest.mark.parametrize("drop", DROPS)
def test_every_answer_cell_carries_the_mark_the_hint_reads(drop):
    nb = nbformat.read(ROOT / "source" / drop / f"{drop}.ipynb", as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    answers = [a for a in EXERCISES.get(drop[:6], {}) if a in cells and cells[a].lstrip().startswith("#")]
    assert answers, f"{drop}: no answer cell of the own-work data found"
    for answer in answers:
        assert own_work.MARK.match(cells[answer].lstrip()), f"{drop} {answer}: first line is not a mark"


def test_a_cell_marked_own_work_is_read():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("from threeaxes.cost import activation_bytes", store_history=True)
    shell.run_cell("# Graded on your own work: ...\noom_terms = {'linear': activation_bytes}",
                   store_history=True)
    with pytest.raises(AssertionError, match="activation_bytes"):
        own_work.check("drop10", "oom_terms_answer")
    shell.run_cell("# Graded on your own work: ...\noom_terms = {'linear': 1.0, 'scores': 2.0}",
                   store_history=True)
    own_work.check("drop10", "oom_terms_answer")
