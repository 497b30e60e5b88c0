"""Points only for the student's own code: the visible check's half."""
from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable
from typing import Any, TypedDict, cast

from threeaxes.grading.shown import in_one_line


class Exercise(TypedDict):
    """One exercise's entry in `own_work_data.EXERCISES`."""
    forbid: list[str]
    why: str
    may: str


# an answer cell's first line: "# Graded on your own code:", or work, choice, arithmetic
MARK = re.compile(r"^# Graded on your own [a-z]+:", re.MULTILINE)


def resolve(name: str) -> Any:
    """The object a dotted name stands for: each part an attribute of the one before, or,
    where it is not one yet, a module imported."""
    parts = name.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part):
            importlib.import_module(".".join(parts[:i + 1]))
        obj = getattr(obj, part)
    return obj


def message(name: str, where: str, why: str, may: str) -> str:
    """What the grader and the visible check say when an answer used a forbidden function."""
    return (f"this exercise scores 0: {where} used {name}, which {why}. "
            f"Write the answer yourself; you may use {may}.")


@in_one_line
def check(drop: str, answer: str) -> None:
    """AssertionError (the grader's message) if the answer cell last run calls a forbidden name.

    Each graded exercise names the package functions its answer may not call (its
    drop's grading.json, "exercises"; `own_work_data.py` beside this file is a
    copy that travels with the package, written by `python -m autograder.judging.borrowed`).
    When a submission is graded, the kernel holds no body for them and a call costs
    the exercise its points (autograder/judging/borrowed.py). While a student works, the
    first line of each test cell says the same thing, so nobody learns of it from
    the grade:

        own_work.check("drop05", "all_reduce_sizes_answer")

    It reads the answer cell as the student last ran it (the newest cell that
    carries a "# Graded on your own ...:" line: code, work, choice or arithmetic) and looks for a forbidden function
    there: by name, as an attribute, imported, or spelled out in a string. It is a
    hint, not the grade: the graded run sees every route, this one the plain ones.
    """
    from threeaxes.grading.own_work_data import EXERCISES

    # generated data, unannotated: mypy would infer each value as list[str] | str
    exercises = cast("dict[str, dict[str, Exercise]]", EXERCISES)
    entry = exercises.get(drop, {}).get(answer)
    source = _last_answer_cell()
    if entry is None or source is None:
        return
    name = used(source, entry["forbid"], _namespace())
    if name:
        raise AssertionError(message(name, f"the answer cell {answer}", entry["why"], entry["may"]))


def used(source: str, forbid: Iterable[str], namespace: dict[str, Any]) -> str | None:
    """The first forbidden dotted name that `source` reaches plainly, or None."""
    wanted: dict[int, str] = {}
    for full in forbid:
        try:
            wanted[id(resolve(full))] = full
        except (ImportError, AttributeError):
            continue
    short = {full.rsplit(".", 1)[-1]: full for full in forbid}
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("!", "%")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        found = None
        if isinstance(node, ast.Name):
            found = wanted.get(id(namespace.get(node.id, None)))
        elif isinstance(node, ast.Attribute):
            found = wanted.get(id(_value(node, namespace)))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found = found or wanted.get(id(_imported(node.module, alias.name)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found = short.get(node.value)
        if found:
            return found
    return None


def _value(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object `a.b.c` stands for in the namespace, when it is a plain chain of names."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in namespace:
        return None
    obj = namespace[node.id]
    for part in reversed(parts):
        obj = getattr(obj, part, None)
    return obj


def _imported(module: str, name: str) -> Any:
    try:
        return resolve(f"{module}.{name}")
    except (ImportError, AttributeError, ValueError):
        return None


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _namespace() -> dict[str, Any]:
    shell = _shell()
    return shell.user_ns if shell is not None else {}


def _last_answer_cell() -> str | None:
    """The newest cell run in this kernel that carries the answer cells' first line."""
    shell = _shell()
    history = shell.user_ns.get("In", []) if shell is not None else []
    return next((cell for cell in reversed(history)
                 if MARK.search(cell) and "own_work.check(" not in cell), None)
