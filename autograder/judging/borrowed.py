"""Points only for the student's own code: what each exercise may not call, and how a graded run
sees a call to it (`stub_package`, `Guard`). How and why: CONTRIBUTING.md, "Points only for the
student's own code"."""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import course
from autograder.course import PACKAGE, ROOT
from autograder.judging.judge import is_graded
from autograder.runtime.messages import Output
from autograder.spec import Exercise, definition, load_exercises
from threeaxes.grading.own_work import message, resolve

if TYPE_CHECKING:
    from nbformat import NotebookNode

ENAME = "BorrowedAnswer"

Found = tuple[str, str, str]   # a forbidden function found: (answer id, its name, "module:qualname")


@dataclass(frozen=True)
class Place:
    """An instructor's cell as grading knows it: where it stands (its index among the
    notebook's non-empty code cells), its cell id, its nbgrader grade id, its code."""
    index: int
    cell_id: str
    grade_id: str
    source: str


def place_of(cell: NotebookNode, index: int) -> Place:
    about = cell.get("metadata", {}).get("nbgrader", {}) or {}
    return Place(index, str(cell.get("id") or ""), str(about.get("grade_id") or ""), cell.source.strip())


def code_places(nb: NotebookNode) -> list[tuple[int, NotebookNode]]:
    """(place index, cell) for each non-empty code cell: the places of the notebook."""
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    return list(enumerate(cells))


def _matches(known: Mapping[int, Place], ids: set[str], cell: NotebookNode, index: int) -> bool:
    """Whether `cell` at place `index` is the instructor's cell of that place (`known`: the
    source's instructor cells by place): the same code and grade id, and its own cell id, or
    one the source does not hold (a notebook saved without cell ids, as an old Jupyter or
    Colab may, gets new random ones; another instructor cell's id is not its own)."""
    if is_graded(cell):
        return False
    mine, theirs = place_of(cell, index), known.get(index)
    return (theirs is not None and mine.source == theirs.source and mine.grade_id == theirs.grade_id
            and (mine.cell_id == theirs.cell_id or mine.cell_id not in ids))


class Guard:
    """Which exercise leaned on a withheld function; the message its test cells get.

    Until the first student-written cell runs, every cell that has run is the instructor's
    at its own place (its index, cell id, grade id and code those of the source notebook's
    cell there): calls are answered and count against nothing. From the first
    student-written cell on (an answer, a test, or any cell not the instructor's at its
    place), whatever cell is running, a call to a function that an exercise not yet judged
    forbids is refused (`refuses`, asked by the Oracle), so no such exercise can use it; a
    call no open exercise forbids is answered. For the message, a call made while a
    student-written cell ran counts against every such exercise, one made while a test cell
    ran against its own (`note`)."""

    def __init__(self, exercises: list[Exercise], instructor_cells: Iterable[Place] = ()):
        self.exercises = exercises
        self.instructors = frozenset(instructor_cells)
        self._known = {p.index: p for p in self.instructors}
        self._ids = {p.cell_id for p in self.instructors if p.cell_id}
        self.forbidden = {e.answer: {definition(n): n for n in e.forbid} for e in exercises}
        self.judged: set[str] = set()          # test cells already judged
        self.borrowed: dict[str, tuple[str, str]] = {}   # answer id: (name, where)
        self.started = False                   # a student-written cell has begun to run
        self._objects: dict[int, tuple[object, list[Found]]] | None = None

    @property
    def paths(self) -> set[str]:
        return {p for table in self.forbidden.values() for p in table}

    def exercise_of_test(self, grade_id: str) -> Exercise | None:
        return next((e for e in self.exercises if grade_id in e.tests), None)

    def _open(self) -> list[Exercise]:
        return [e for e in self.exercises if not set(e.tests) <= self.judged]

    def is_instructors(self, cell: NotebookNode, index: int) -> bool:
        """Whether `cell`, the notebook's place `index`, is the instructor's cell of that place."""
        return _matches(self._known, self._ids, cell, index)

    def enter(self, cell: NotebookNode, index: int) -> bool:
        """`cell` (place `index`) is about to run; whether it is the instructor's. The first
        that is not starts the student's part for good."""
        mine = self.is_instructors(cell, index)
        if not mine:
            self.started = True
        return mine

    def refuses(self, path: str) -> str | None:
        """Why the oracle must not answer `path` now, or None (called from its threads)."""
        if not self.started:
            return None
        names = [self.forbidden[e.answer][path] for e in self._open() if path in self.forbidden[e.answer]]
        if not names:
            return None
        open_ = [e.answer for e in self._open() if path in self.forbidden[e.answer]]
        return (f"{names[0]} is withheld in this graded run until {', '.join(open_)} "
                "is graded (autograder/judging/borrowed.py): nothing computes it for the notebook before then")

    def note(self, calls: list[str], where: str, test: str | None = None) -> None:
        """Calls made while a student-written cell ran: each counts against every exercise not
        judged yet that forbids it; while test cell `test` ran: against its own exercise (the
        others that forbid it were refused the answer: nothing of theirs can have used it)."""
        own = self.exercise_of_test(test) if test else None
        for path in calls:
            for e in ([own] if own else [] if test else self._open()):
                if path in self.forbidden[e.answer] and e.answer not in self.borrowed:
                    self.borrowed[e.answer] = (self.forbidden[e.answer][path], where)

    def _forbidden_objects(self) -> dict[int, tuple[object, list[Found]]]:
        """id of each object that is (or wraps, or is the code of) a forbidden function: (answer
        id, name), with the objects kept alive."""
        if self._objects is None:
            table: dict[int, tuple[object, list[Found]]] = {}
            for e in self.exercises:
                for path, name in self.forbidden[e.answer].items():
                    module, qualname = path.split(":")
                    found = [resolve(name)]
                    obj: Any = importlib.import_module(module)   # then what it holds, by qualname
                    for part in qualname.split("."):
                        obj = getattr(obj, part)
                    found.append(obj)
                    for obj in list(found):
                        while obj is not None and len(found) < 32:
                            found += [x for x in (getattr(obj, "__func__", None), getattr(obj, "__code__", None))
                                      if x is not None]
                            obj = getattr(obj, "__wrapped__", None)
                            if obj is not None:
                                found.append(obj)
                    for obj in found:
                        table.setdefault(id(obj), (obj, []))[1].append((e.answer, name, path))
            self._objects = table
        return self._objects

    def note_answers(self, values: Mapping[str, object], test: str) -> None:
        """The values a test cell reads, as the judge will use them: an answer that is, holds
        or wraps a withheld function (the grader's own, which would run here) counts against
        every exercise not yet judged that forbids it. Raises where it cannot look at one."""
        table = self._forbidden_objects()
        open_ = {e.answer for e in self._open()}
        for name, value in values.items():
            for answer, fn_name, _path in _withheld_inside(value, table):
                if answer in open_ and answer not in self.borrowed:
                    self.borrowed[answer] = (fn_name, f"`{name}` is that function")

    def verdict(self, test: str) -> Output | None:
        """The error output that replaces test cell `test`'s outputs, or None."""
        self.judged.add(test)
        e = self.exercise_of_test(test)
        if e is None or e.answer not in self.borrowed:
            return None
        name, where = self.borrowed[e.answer]
        message = message_for(e, name, where)
        return {"output_type": "error", "ename": ENAME, "evalue": message,
                "traceback": [f"{ENAME}: {message}"]}


_LEAVES = (type(None), bool, int, float, complex, str, bytes)
_UNWRAP = ("__self__", "__func__", "__wrapped__", "func", "fget", "fset", "fdel")


def _withheld_inside(value: object, table: Mapping[int, tuple[object, list[Found]]],
                     limit: int = 200_000) -> list[Found]:
    """(answer id, name, path) for each forbidden function that `value` is, holds (in a
    container, a record's fields, a partial's arguments) or wraps (a bound method or
    method-wrapper of it, a partial of it, a decorated copy): what a test cell would run
    here if it called it. Modules and classes are not looked into (a test cell reads a
    module's attribute by its own code); a `Remote` runs in the kernel, where the stubs are."""
    import dataclasses
    import functools
    import types

    found: list[Found] = []
    seen: dict[int, object] = {}
    todo = [value]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or type(obj) in _LEAVES:
            continue
        seen[id(obj)] = obj      # kept: an id is not reused while this runs
        if len(seen) > limit:
            raise ValueError(f"over {limit} objects to look through")
        if id(obj) in table and table[id(obj)][0] is obj:
            found += table[id(obj)][1]
        if isinstance(obj, (types.ModuleType, type)) or getattr(type(obj), "is_remote", False):
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        elif isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, functools.partial):
            todo += [obj.func, *obj.args, *obj.keywords.values()]
        if dataclasses.is_dataclass(obj):
            todo.extend(getattr(obj, f.name, None) for f in dataclasses.fields(obj))
        if callable(obj) or isinstance(obj, (property, staticmethod, classmethod)):
            for attr in _UNWRAP:
                inner = _attribute(obj, attr)
                if inner is not None and inner is not obj:
                    todo.append(inner)
            call = _attribute(type(obj), "__call__")     # an instance's own __call__, as its class holds it
            if isinstance(call, (types.FunctionType, staticmethod, classmethod, functools.partial)):
                todo.append(call)
            code = getattr(obj, "__code__", None) if isinstance(obj, types.FunctionType) else None
            if code is not None:
                todo.append(code)
    return found


def _attribute(obj: object, name: str) -> object:
    """`obj.<name>` as Python itself stores it, without running a property or __getattr__."""
    import inspect

    try:
        return getattr(obj, name, None) if _c_type(obj) else inspect.getattr_static(obj, name, None)
    except Exception:  # noqa: BLE001 - an object that will not say is looked at no further
        return None



def _c_type(obj: object) -> bool:
    """An object of a type written in C (a bound method, method-wrapper, partial, property):
    `getattr` reads its slots without running any Python code."""
    return not type(obj).__flags__ & (1 << 9)     # Py_TPFLAGS_HEAPTYPE


def message_for(e: Exercise, name: str, where: str) -> str:
    return message(name, where, e.why, e.may)    # the visible check says the same (own_work.check)


def package_data(root: Path = ROOT) -> dict[str, dict[str, dict[str, Any]]]:
    """What `threeaxes/grading/own_work_data.py` holds: every drop's exercises, for the visible checks."""
    return {drop[:6]: {e.answer: {"forbid": list(e.forbid), "why": e.why, "may": e.may}
                       for e in load_exercises(course.grading_file(drop, root))}
            for drop in course.graded_drops(root) if drop.startswith("drop")}


def instructor_cells(source_notebook: Path) -> tuple[Place, ...]:
    """Every cell of the instructor's notebook that is not an answer or a test, with its place."""
    import nbformat

    return instructor_places(nbformat.read(source_notebook, as_version=4))


def instructor_places(nb: NotebookNode) -> tuple[Place, ...]:
    """`instructor_cells` of a notebook already read."""
    return tuple(place_of(c, i) for i, c in code_places(nb) if not is_graded(c))


def opening_is_instructors(nb: NotebookNode, instructors: Iterable[Place]) -> bool:
    """Whether every code cell before `nb`'s first answer or test cell is the instructor's
    cell of its place (`instructors`: `instructor_cells` of the source notebook)."""
    known = {p.index: p for p in instructors}
    ids = {p.cell_id for p in known.values() if p.cell_id}
    for index, cell in code_places(nb):
        if is_graded(cell):
            return True
        if not _matches(known, ids, cell, index):
            return False
    return True


def package_source(root: Path = ROOT) -> str:
    """The text of threeaxes/grading/own_work_data.py, one line per exercise."""
    lines = ['"""Written by `python -m autograder.judging.borrowed` from each drop\'s grading.json ("exercises"):',
             "what each exercise's answer may not call (threeaxes.grading.own_work).", '"""', "EXERCISES = {"]
    for drop, table in package_data(root).items():
        lines.append(f"    {drop!r}: {{")
        lines += [f"        {answer!r}: {entry!r}," for answer, entry in table.items()]
        lines.append("    },")
    return "\n".join(lines + ["}", ""])


def _source_folder(assignment: str, course_root: Path) -> Path | None:
    """source/<assignment>/ of the course (or of this repository), where it has a grading.json."""
    for root in (Path(course_root), ROOT):
        if assignment and course.grading_file(assignment, root).is_file():
            return course.folder(assignment, root)
    return None


def guard_for(assignment: str, instructors: Iterable[Place], course_root: Path) -> Guard | None:
    """The drop's Guard, from its source folder; `instructors`: `instructors_cells_of` its notebook."""
    folder = _source_folder(assignment, course_root)
    exercises = load_exercises(folder / course.GRADING_FILE) if folder else []
    return Guard(exercises, instructors) if exercises else None


def source_notebook(assignment: str, notebook: str, course_root: Path) -> Path | None:
    """The drop's source notebook (the instructor's), None where it has no source folder."""
    folder = _source_folder(assignment, course_root)
    path = folder / f"{notebook}.ipynb" if folder else None
    return path if path and path.is_file() else None


def instructors_cells_of(assignment: str, notebook: str, course_root: Path) -> tuple[Place, ...]:
    """The instructor's cells of the drop's source notebook, with their places (none where it
    has no source folder)."""
    path = source_notebook(assignment, notebook, course_root)
    return instructor_cells(path) if path else ()


__all__ = ["ENAME", "Guard", "Place", "guard_for", "instructor_cells", "instructor_places",
           "instructors_cells_of", "message_for", "opening_is_instructors", "package_data", "place_of",
           "source_notebook"]


if __name__ == "__main__":   # after editing a grading.json's "exercises"
    (PACKAGE / "grading" / "own_work_data.py").write_text(package_source())
