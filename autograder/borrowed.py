"""Points only for the student's own code: what each exercise may not call, and how a
graded run sees a call to it.

Each exercise of a drop's `grading.json` ("exercises") names the package functions
that compute its answer or do its work ("forbid"). In a graded run:

1. the student's kernel gets a copy of `threeaxes` in which each of those functions
   of the drop has lost its body (`stub_package`): the body asks the grader for the
   result (`threeaxes.grading.oracle`), so the code is not in the kernel, under any
   name, in any file or in any subprocess or rank the kernel starts;
2. the grader answers those requests with its own copy (`Oracle`) and notes each;
3. `Guard` attributes each request to the cell that was running: a call made while
   an instructor's cell runs (a demonstration, an explorer) is allowed; one made
   while a student-written cell (an answer cell, or any cell the student added or
   changed) runs counts against every exercise that forbids the function and is
   not judged yet; one made while a test cell runs (the student's function, called
   by it), against that test's exercise. So does an answer that *is* such a
   function (an alias the grader would import and run itself). Such an exercise's test cells
   score 0 with a message naming the function and why.

What it does not see: a body of the student's own that repeats the formula (that
is their own work), and work a student's background thread does while an
instructor's cell runs.
"""
from __future__ import annotations

import ast
import compileall
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import socketserver
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from threeaxes.grading import wire
from threeaxes.grading.own_work import message, resolve

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "threeaxes"
ENAME = "BorrowedAnswer"
WITHHELD_MARKER = "WITHHELD"   # a file only the withheld copy holds: the kernel host looks for it


@dataclass(frozen=True)
class Exercise:
    answer: str          # grade id of the answer cell
    tests: tuple         # grade ids of its test cells
    forbid: tuple        # dotted names: "threeaxes.data_parallel.plan_buckets"
    why: str             # why those may not be called here
    may: str             # what may be used instead


def load_exercises(grading_json: Path) -> list[Exercise]:
    if not Path(grading_json).is_file():
        return []
    data = json.loads(Path(grading_json).read_text())
    return [Exercise(e["answer"], tuple(e["tests"]), tuple(e["forbid"]), e["why"], e["may"])
            for e in data.get("exercises", [])]


def definition(name: str) -> str:
    """"module:qualname" where the function a dotted name stands for is defined."""
    obj = resolve(name)
    code = getattr(obj, "__code__", None)
    if code is None or not str(obj.__module__).startswith("threeaxes."):
        raise TypeError(f"{name} is not a function of threeaxes (a grading.json 'forbid' entry "
                        "names a function whose body can be withheld)")
    return f"{obj.__module__}:{obj.__qualname__}"


# -- 1. the kernel's copy of the package ----------------------------------------------------
_STUB = '''{indent}def {name}(*args, **kwargs):
{indent}    """Withheld in this graded run: the grader computes it (threeaxes.grading.oracle)."""
{indent}    from threeaxes.grading.oracle import call as _withheld_call
{indent}    return _withheld_call({path!r}, args, kwargs)
'''
_KEPT_DECORATORS = {"staticmethod", "classmethod"}


def _withhold(source: str, qualnames: set, module: str) -> str:
    """`source` with each function of `qualnames` turned into a stub, lines replaced bottom up."""
    lines = source.splitlines(keepends=True)
    found = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and prefix + node.name in qualnames):
                found.append((node, prefix + node.name))
    visit(ast.parse(source).body, "")
    missing = qualnames - {q for _, q in found}
    if missing:
        raise LookupError(f"{module}: no function {sorted(missing)} to withhold")
    for node, qualname in sorted(found, key=lambda f: -f[0].lineno):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        indent = " " * node.col_offset
        kept = "".join(f"{indent}@{d.id}\n" for d in node.decorator_list
                       if isinstance(d, ast.Name) and d.id in _KEPT_DECORATORS)
        stub = kept + _STUB.format(indent=indent, name=node.name, path=f"{module}:{qualname}")
        lines[first - 1:node.end_lineno] = [stub]
    return "".join(lines)


def stub_package(paths: set, dest: Path) -> Path:
    """A copy of `threeaxes` in `dest/threeaxes` with the functions `paths` ("module:qualname")
    withheld, compiled (the kernel's copy is read-only: no bytecode written at import)."""
    target = Path(dest) / "threeaxes"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    by_module: dict[str, set] = {}
    for path in paths:
        module, qualname = path.split(":")
        by_module.setdefault(module, set()).add(qualname)
    for module, qualnames in by_module.items():
        spec = importlib.util.find_spec(module)
        file = target / Path(spec.origin).relative_to(PACKAGE)
        file.write_text(_withhold(file.read_text(), qualnames, module))
    (target / WITHHELD_MARKER).write_text("This copy of threeaxes has the graded exercises' functions withheld.\n")
    compileall.compile_dir(str(target), quiet=1)
    return target


def package_for(paths: set) -> Path:
    """`stub_package(paths)`, built once per set of withheld functions and version of the
    package, and kept (compiling it takes seconds) in a folder of this user's own, which
    every grading process of the machine shares."""
    digest = hashlib.sha256(repr(sorted(paths)).encode() + Path(__file__).read_bytes())   # how, too
    for file in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(file.relative_to(PACKAGE)).encode() + b"\0" + file.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"threeaxes-withheld-{os.getuid()}"
    cache.mkdir(mode=0o700, exist_ok=True)
    if cache.stat().st_uid != os.getuid() or cache.stat().st_mode & 0o077:
        raise PermissionError(f"{cache} should belong to this user alone")
    done = cache / digest.hexdigest()[:24]
    if not done.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=cache))
        stub_package(paths, scratch)
        try:
            scratch.rename(done)          # atomic: another grading process may have won
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
    return done / "threeaxes"


# -- 2. the grader's answers ----------------------------------------------------------------
class Oracle:
    """Answers the kernel's stubs on a Unix socket in `folder`, with the grader's package;
    `calls` lists every "module:qualname" asked, in order."""

    def __init__(self, paths: set, folder: Path):
        self.paths, self.calls, self._lock = set(paths), [], threading.Lock()
        self.socket_path = str(Path(folder) / "oracle.sock")
        oracle = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                self.wfile.write((json.dumps(oracle.answer(self.rfile.readline())) + "\n").encode())

        self._server = socketserver.ThreadingUnixStreamServer(self.socket_path, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def answer(self, line: bytes):
        try:
            request = json.loads(line)
            path = request["path"]
            if path not in self.paths:
                raise PermissionError(f"{path} is not withheld here")
            with self._lock:
                self.calls.append(path)
            decode = wire.Answers(None).decode    # the kernel's data, never code
            args, kwargs = decode(request["args"]), decode(request["kwargs"])
            module, qualname = path.split(":")
            fn = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
            return wire.encode(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
            return {"__raised__": [[c.__name__ for c in type(exc).__mro__], str(exc)[:2000]]}

    def close(self):
        self._server.shutdown()
        self._server.server_close()


# -- 3. who called ----------------------------------------------------------------------------
class Guard:
    """Which exercise leaned on a withheld function; the message its test cells get."""

    def __init__(self, exercises: list[Exercise], instructor_cells: set[str]):
        self.exercises = exercises
        self.instructor_cells = {s.strip() for s in instructor_cells}
        self.forbidden = {e.answer: {definition(n): n for n in e.forbid} for e in exercises}
        self.judged: set[str] = set()          # test cells already judged
        self.borrowed: dict[str, tuple] = {}   # answer id: (name, where)

    @property
    def paths(self) -> set:
        return {p for table in self.forbidden.values() for p in table}

    def exercise_of_test(self, grade_id: str) -> Exercise | None:
        return next((e for e in self.exercises if grade_id in e.tests), None)

    def _open(self):
        return [e for e in self.exercises if not set(e.tests) <= self.judged]

    def note(self, calls: list[str], where: str, test: str | None = None) -> None:
        """Calls made while a student-written cell ran (they count against every exercise not
        judged yet), or while test cell `test` ran (against its own exercise)."""
        own = self.exercise_of_test(test) if test else None
        for path in calls:
            for e in ([own] if own else [] if test else self._open()):
                if path in self.forbidden[e.answer] and e.answer not in self.borrowed:
                    self.borrowed[e.answer] = (self.forbidden[e.answer][path], where)

    def is_instructors(self, source: str) -> bool:
        return source.strip() in self.instructor_cells

    def note_answers(self, values: dict, test: str) -> None:
        """The values a test cell reads: a withheld function itself is an alias of the answer."""
        e = self.exercise_of_test(test)
        for name, value in values.items():
            path = f"{getattr(value, '__module__', '')}:{getattr(value, '__qualname__', '')}"
            if e is not None and path in self.forbidden[e.answer] and e.answer not in self.borrowed:
                self.borrowed[e.answer] = (self.forbidden[e.answer][path], f"`{name}` is that function")

    def verdict(self, test: str) -> dict | None:
        """The error output that replaces test cell `test`'s outputs, or None."""
        self.judged.add(test)
        e = self.exercise_of_test(test)
        if e is None or e.answer not in self.borrowed:
            return None
        name, where = self.borrowed[e.answer]
        message = message_for(e, name, where)
        return {"output_type": "error", "ename": ENAME, "evalue": message,
                "traceback": [f"{ENAME}: {message}"]}


def message_for(e: Exercise, name: str, where: str) -> str:
    return message(name, where, e.why, e.may)    # the visible check says the same (own_work.check)


def package_data(root: Path = ROOT) -> dict:
    """What `threeaxes/grading/own_work_data.py` holds: every drop's exercises, for the visible checks."""
    return {folder.name[:6]: {e.answer: {"forbid": list(e.forbid), "why": e.why, "may": e.may}
                              for e in load_exercises(folder / "grading.json")}
            for folder in sorted((Path(root) / "source").glob("drop*"))
            if (folder / "grading.json").is_file()}


def instructor_cells(source_notebook: Path) -> set[str]:
    """The code of every cell of the instructor's notebook that is not an answer or a test."""
    import nbformat

    nb = nbformat.read(source_notebook, as_version=4)
    return {c.source for c in nb.cells if c.cell_type == "code"
            and not c.metadata.get("nbgrader", {}).get("solution")
            and not c.metadata.get("nbgrader", {}).get("grade")}


def package_source(root: Path = ROOT) -> str:
    """The text of threeaxes/grading/own_work_data.py, one line per exercise."""
    lines = ['"""Written by `python -m autograder.borrowed` from each drop\'s grading.json ("exercises"):',
             "what each exercise's answer may not call (threeaxes.grading.own_work).", '"""', "EXERCISES = {"]
    for drop, table in package_data(root).items():
        lines.append(f"    {drop!r}: {{")
        lines += [f"        {answer!r}: {entry!r}," for answer, entry in table.items()]
        lines.append("    },")
    return "\n".join(lines + ["}", ""])


def _source_folder(assignment: str, course_root: Path) -> Path | None:
    """source/<assignment>/ of the course (or of this repository), where it has a grading.json."""
    for root in (Path(course_root), ROOT):
        folder = root / "source" / assignment
        if assignment and (folder / "grading.json").is_file():
            return folder
    return None


def guard_for(assignment: str, instructors: set[str], course_root: Path) -> Guard | None:
    """The drop's Guard, from its source folder; `instructors`: `instructors_cells_of` its notebook."""
    folder = _source_folder(assignment, course_root)
    exercises = load_exercises(folder / "grading.json") if folder else []
    return Guard(exercises, instructors) if exercises else None


def instructors_cells_of(assignment: str, notebook: str, course_root: Path) -> set[str]:
    """The instructor's cells of the drop's source notebook, stripped (none where it has no
    source folder)."""
    folder = _source_folder(assignment, course_root)
    path = folder / f"{notebook}.ipynb" if folder else None
    return {s.strip() for s in instructor_cells(path)} if path and path.is_file() else set()


__all__ = ["ENAME", "Exercise", "Guard", "Oracle", "definition", "guard_for", "instructor_cells", "instructors_cells_of",
           "load_exercises", "message_for", "package_data", "package_for", "resolve", "stub_package"]


if __name__ == "__main__":   # after editing a grading.json's "exercises"
    (PACKAGE / "grading" / "own_work_data.py").write_text(package_source())
