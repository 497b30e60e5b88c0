"""Test cells run here, in the grader, never in the student's kernel; why, and how a cell's
outputs become its grade: CONTRIBUTING.md, "Test cells run in the grader"."""
from __future__ import annotations

import ast
import builtins
import contextlib
import io
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autograder.runtime.messages import Output
from threeaxes.grading.wire import Answers

if TYPE_CHECKING:
    from nbformat import NotebookNode

TEST_FILENAME = "<test cell>"


def is_test_cell(cell: Mapping[str, Any]) -> bool:
    """An auto-graded test cell: graded, not an answer, code."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_graded(cell: Mapping[str, Any]) -> bool:
    """A cell nbgrader scores or the student writes: an answer, a test, a written answer."""
    about = cell.get("metadata", {}).get("nbgrader", {}) or {}
    return bool(about.get("solution") or about.get("grade"))


def last_graded_code_cell(nb: NotebookNode) -> int:
    """The index in `nb.cells` of its last graded code cell (-1 if none): the grader runs no code
    cell after it, since no autograded score depends on one (a written answer is read by a person)."""
    return max((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and is_graded(cell)), default=-1)


def notebook_names(source: str) -> list[str]:
    """The names a cell reads (builtins aside): asked of the notebook, as in a kernel
    where a name the cell binds later still has the notebook's value before that."""
    return sorted({node.id for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                   and not hasattr(builtins, node.id)})


def judge_cell(source: str, answers: Answers, values: dict[str, Any] | None = None) -> list[Output]:
    """Run one test cell here against the notebook behind `answers`; its outputs. `values`:
    the names it reads, fetched already (autograder/plugins/execute.py: the guard looked at them)."""
    stdout = io.StringIO()
    outputs: list[Output] = []
    try:
        tree = ast.parse(source, TEST_FILENAME)
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        namespace.update(answers.get(notebook_names(source)) if values is None else values)
        tail = tree.body[-1] if tree.body else None
        last = tail if isinstance(tail, ast.Expr) else None
        if last is not None:
            tree.body.pop()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(tree, TEST_FILENAME, "exec"), namespace)
            value = None
            if last is not None:
                value = eval(compile(ast.Expression(last.value), TEST_FILENAME, "eval"), namespace)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        outputs = [_stream(stdout.getvalue())] if stdout.getvalue() else []
        return outputs + [_error(exc)]
    if stdout.getvalue():
        outputs.append(_stream(stdout.getvalue()))
    if value is not None:
        outputs.append({"output_type": "execute_result", "execution_count": None, "metadata": {},
                        "data": {"text/plain": repr(value)}})
    return outputs


def _stream(text: str) -> Output:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _error(exc: BaseException) -> Output:
    """An error output; the traceback keeps only the test cell's own frames."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == TEST_FILENAME]
    lines = [f"line {f.lineno} of the test cell" for f in frames[-1:]]
    return {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
            "traceback": lines + [f"{type(exc).__name__}: {exc}"]}
