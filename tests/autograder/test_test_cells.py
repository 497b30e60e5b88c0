"""What grading outside the kernel asks of every drop's notebook (CONTRIBUTING.md,
"Test cells run in the grader"), checked on the source without running it."""
import ast
import builtins
from pathlib import Path

import nbformat
import pytest

from autograder.judging.judge import is_test_cell

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "source").glob("*/*.ipynb"))


def names(source: str) -> tuple[set, set]:
    """(bound, read) names of a cell; IPython's ! and % lines left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("!", "%")))
    bound, read = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_no_cell_needs_a_name_only_a_test_cell_binds(path):
    """During grading the student's kernel never runs test cells, so a later cell that
    reads a name only a test cell bound (an import, a loop variable) fails there."""
    by_tests, by_others, needs = set(), set(), []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        bound, read = names(cell.source)
        if is_test_cell(cell):
            by_tests |= bound
            continue
        missing = (read - bound - by_others - set(dir(builtins))) & by_tests
        needs += [f"cell {i} reads {sorted(missing)}"] if missing else []
        by_others |= bound
    assert not needs, f"{path.parent.name}: bind these in the cell (or an earlier non-test cell): {needs}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_every_hidden_test_draws_inputs_at_grading_time(path):
    """Hidden tests choose their inputs when they run, so reading them gives nothing to
    copy: each drop's hidden tests draw from an unseeded generator somewhere."""
    hidden = "".join(c.source.split("### BEGIN HIDDEN TESTS")[1] for c in nbformat.read(path, as_version=4).cells
                     if "### BEGIN HIDDEN TESTS" in c.source)
    draws = "random" in hidden or "draw" in hidden
    assert draws, (
        f"{path.parent.name}: no hidden test draws its inputs (random.Random() or a draw_* helper)")
