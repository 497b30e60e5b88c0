"""Points only for the student's own code: what each exercise may not call, and how a
graded run sees a call to it.

Each exercise of a drop's `grading.json` ("exercises") names the package functions
that compute its answer or do its work ("forbid"). In a graded run:

1. the student's kernel gets a copy of `threeaxes` in which each of those functions
   of the drop has lost its body (`stub_package`): the body asks the grader for the
   result (`threeaxes.grading.oracle`), so the code is not in the kernel, under any
   name, in any file or in any subprocess or rank the kernel starts;
2. the grader answers those requests with its own copy (`Oracle`), in a worker process
   with a time limit and a memory limit, requests and answers capped in size, and notes
   each;
3. `Guard` decides what a call may get. Until the first student-written cell runs, every
   cell that ran is the instructor's at its own place (its place among the code cells,
   its cell id, its grade id and its code those of the source notebook's cell there), and
   calls are answered: a demonstration of the opening still shows its figure. From the
   first student-written cell on (an answer cell, a test cell, or any cell the student
   added, moved or changed), whatever is running (an instructor's cell, a hook, a thread,
   a test), a call to a function that an exercise not yet judged forbids is refused, so
   none of them can use it; one made while a student-written cell ran counts against
   every such exercise, one made while a test cell ran against the test's own.
   So does an answer that *is*, holds or wraps such a function (the grader's own, which a
   test cell would run here): the guard looks at the very values the judge then uses, and
   a test cell whose values it cannot look at fails. Such an exercise's test cells score
   0 with a message naming the function and why.

What it does not see: a body of the student's own that repeats the formula (that
is their own work). An instructor's cell after the first answer that calls a function an
open exercise forbids (an explorer) fails in the graded copy: the instructor keeps such
calls in the opening or after the exercise's tests.
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

from autograder.judge import is_graded
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
MAX_REQUEST_BYTES = 16 << 20     # one request's line (a toy model's gradients take about 1.2 MB)
MAX_REPLY_BYTES = 16 << 20       # one answer's JSON (search's whole ranking of a drop: about 5 MB)
CALL_TIMEOUT_S = 60.0            # one call's work, in the oracle's worker process
WORKER_MEMORY_BYTES = 4 << 30    # the worker's data segment (RLIMIT_DATA)
MAX_CONNECTIONS = 16             # requests answered at once; more wait their turn, refused past a minute
_WORKER = ("import sys; sys.path.insert(0, {root!r}); "
           "from autograder.borrowed import _serve_calls; _serve_calls()")


def _raised(exc_type: type, text: str) -> str:
    """A reply that raises `exc_type(text)` in the kernel (threeaxes.grading.oracle.call)."""
    return json.dumps({"__raised__": [[c.__name__ for c in exc_type.__mro__], str(text)[:2000]]})


def _capped_json(value, cap: int) -> str | None:
    """`json.dumps(value)`, or None as soon as its text passes `cap` characters."""
    chunks, size = [], 0
    for chunk in json.JSONEncoder().iterencode(value):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return "".join(chunks)


def compute(line: bytes, cap: int = MAX_REPLY_BYTES) -> str:
    """The reply to one request, computed with the grader's package: its JSON text."""
    try:
        request = json.loads(line)
        decode = wire.Answers(None).decode    # the kernel's data, never code
        args, kwargs = decode(request["args"]), decode(request["kwargs"])
        module, qualname = request["path"].split(":")
        fn = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        text = _capped_json(wire.encode(fn(*args, **kwargs)), cap)
        if text is None:
            return _raised(MemoryError, f"{request['path']}'s answer is over {cap >> 20} MiB of data: "
                                        "the grader does not send it")
        return text
    except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
        return _raised(type(exc), str(exc))


def _serve_calls() -> None:
    """The oracle's worker process: length-prefixed requests in on stdin, replies out on stdout."""
    import resource
    import struct
    import sys

    try:
        resource.setrlimit(resource.RLIMIT_DATA, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):
        pass
    for module in sys.argv[1:]:      # imported while the grader goes on
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the call that needs it says why
            pass
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        line = inp.read(struct.unpack(">I", head)[0])
        try:
            reply = compute(line).encode()
        except MemoryError:
            reply = _raised(MemoryError, "the grader ran out of the memory a withheld call may use").encode()
        out.write(struct.pack(">I", len(reply)) + reply)
        out.flush()


class _Worker:
    """A process of the grader's own that computes the oracle's answers one at a time, so that
    a call that runs too long can be stopped (its process group killed) and one that takes
    too much memory fails there, not in the grader."""

    def __init__(self, modules=()):
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k != "THREEAXES_ORACLE"}
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER.format(root=str(ROOT)), *sorted(modules)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=str(ROOT), env=env,
                                     start_new_session=True)

    def ask(self, line: bytes, timeout: float) -> str:
        """The reply's text; TimeoutError past `timeout` seconds (the worker is then gone)."""
        import select
        import struct
        import time

        deadline = time.monotonic() + timeout
        self.proc.stdin.write(struct.pack(">I", len(line)) + line)
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()

        def read(n: int) -> bytes:
            data = bytearray()
            while len(data) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
                chunk = os.read(fd, min(n - len(data), 1 << 20))
                if not chunk:
                    raise EOFError
                data += chunk
            return bytes(data)

        size = struct.unpack(">I", read(4))[0]
        if size > MAX_REPLY_BYTES + 4096:
            raise EOFError
        return read(size).decode()

    def kill(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class Oracle:
    """Answers the kernel's stubs on a Unix socket in `folder`, with the grader's package;
    `calls` lists every "module:qualname" asked, in order, answered or not.

    What one submission can make it do is bounded: a request's line is read up to
    `MAX_REQUEST_BYTES` (a longer one is refused unread), an answer whose JSON passes
    `MAX_REPLY_BYTES` is refused, and each call runs in a worker process of the grader's
    (`_Worker`) that is killed after `timeout` seconds (the kernel gets a TimeoutError)
    and whose memory is limited. While a `guard` is set (run_notebook sets the
    submission's), a call it refuses is not computed at all."""

    def __init__(self, paths: set, folder: Path, timeout: float = CALL_TIMEOUT_S):
        self.paths, self.calls, self._lock = set(paths), [], threading.Lock()
        self.timeout, self.guard = timeout, None
        self.socket_path = str(Path(folder) / "oracle.sock")
        self._modules = {p.split(":")[0] for p in self.paths}
        self._worker, self._worker_lock = _Worker(self._modules), threading.Lock()   # started now: it imports
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        oracle = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 120     # a request that does not arrive whole in two minutes is dropped

            def handle(self):
                if not oracle._slots.acquire(timeout=60):
                    reply = _raised(TimeoutError, "the grader is busy with this notebook's other calls")
                else:
                    try:
                        line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
                        reply = oracle.answer(line)
                    except OSError:
                        return
                    finally:
                        oracle._slots.release()
                self.wfile.write(reply.encode() + b"\n")

        self._server = socketserver.ThreadingUnixStreamServer(self.socket_path, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def answer(self, line: bytes) -> str:
        """The reply to one request line, as JSON text."""
        if len(line) > MAX_REQUEST_BYTES:
            return _raised(ValueError, f"a request to the grader is over {MAX_REQUEST_BYTES >> 20} MiB: refused")
        try:
            request = json.loads(line)
            path = request["path"]
            if type(path) is not str or path not in self.paths:
                raise PermissionError(f"{str(path)[:200]} is not withheld here")
        except Exception as exc:  # noqa: BLE001 - the caller's error, raised in the kernel
            return _raised(type(exc), str(exc))
        with self._lock:
            self.calls.append(path)
        guard = self.guard
        refused = guard.refuses(path) if guard is not None else None
        if refused:
            return _raised(PermissionError, refused)
        return self._compute(line, path)

    def _compute(self, line: bytes, path: str) -> str:
        if not self._worker_lock.acquire(timeout=self.timeout):
            return _raised(TimeoutError, f"{path}: the grader's earlier calls took too long")
        try:
            if self._worker is None or self._worker.proc.poll() is not None:
                self._worker = _Worker(self._modules)
            try:
                return self._worker.ask(line, self.timeout)
            except (TimeoutError, EOFError, OSError, ValueError) as exc:
                self._worker.kill()
                self._worker = None
                if isinstance(exc, TimeoutError):
                    return _raised(TimeoutError, f"{path} ran over {self.timeout:g} s in the grader: stopped")
                return _raised(RuntimeError, f"{path} stopped the grader's worker (out of memory?)")
        finally:
            self._worker_lock.release()

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        with self._worker_lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None


# -- 3. who called ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Place:
    """An instructor's cell as grading knows it: where it stands (its index among the
    notebook's non-empty code cells), its cell id, its nbgrader grade id, its code."""
    index: int
    cell_id: str
    grade_id: str
    source: str


def place_of(cell, index: int) -> Place:
    about = cell.get("metadata", {}).get("nbgrader", {}) or {}
    return Place(index, str(cell.get("id") or ""), str(about.get("grade_id") or ""), cell.source.strip())


def code_places(nb):
    """(place index, cell) for each non-empty code cell: the places of the notebook."""
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    return list(enumerate(cells))


def _matches(known: dict, ids: set, cell, index: int) -> bool:
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

    def __init__(self, exercises: list[Exercise], instructor_cells=()):
        self.exercises = exercises
        self.instructors = frozenset(instructor_cells)
        self._known = {p.index: p for p in self.instructors}
        self._ids = {p.cell_id for p in self.instructors if p.cell_id}
        self.forbidden = {e.answer: {definition(n): n for n in e.forbid} for e in exercises}
        self.judged: set[str] = set()          # test cells already judged
        self.borrowed: dict[str, tuple] = {}   # answer id: (name, where)
        self.started = False                   # a student-written cell has begun to run
        self._objects = None

    @property
    def paths(self) -> set:
        return {p for table in self.forbidden.values() for p in table}

    def exercise_of_test(self, grade_id: str) -> Exercise | None:
        return next((e for e in self.exercises if grade_id in e.tests), None)

    def _open(self):
        return [e for e in self.exercises if not set(e.tests) <= self.judged]

    def is_instructors(self, cell, index: int) -> bool:
        """Whether `cell`, the notebook's place `index`, is the instructor's cell of that place."""
        return _matches(self._known, self._ids, cell, index)

    def enter(self, cell, index: int) -> bool:
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
                "is graded (autograder/borrowed.py): nothing computes it for the notebook before then")

    def note(self, calls: list[str], where: str, test: str | None = None) -> None:
        """Calls made while a student-written cell ran: each counts against every exercise not
        judged yet that forbids it; while test cell `test` ran: against its own exercise (the
        others that forbid it were refused the answer: nothing of theirs can have used it)."""
        own = self.exercise_of_test(test) if test else None
        for path in calls:
            for e in ([own] if own else [] if test else self._open()):
                if path in self.forbidden[e.answer] and e.answer not in self.borrowed:
                    self.borrowed[e.answer] = (self.forbidden[e.answer][path], where)

    def _forbidden_objects(self) -> dict:
        """id of each object that is (or wraps, or is the code of) a forbidden function: (answer
        id, name), with the objects kept alive."""
        if self._objects is None:
            table = {}
            for e in self.exercises:
                for path, name in self.forbidden[e.answer].items():
                    module, qualname = path.split(":")
                    found = [resolve(name)]
                    obj = importlib.import_module(module)
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

    def note_answers(self, values: dict, test: str) -> None:
        """The values a test cell reads, as the judge will use them: an answer that is, holds
        or wraps a withheld function (the grader's own, which would run here) counts against
        every exercise not yet judged that forbids it. Raises where it cannot look at one."""
        table = self._forbidden_objects()
        open_ = {e.answer for e in self._open()}
        for name, value in values.items():
            for answer, fn_name, path in _withheld_inside(value, table):
                if answer in open_ and answer not in self.borrowed:
                    self.borrowed[answer] = (fn_name, f"`{name}` is that function")

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


_LEAVES = (type(None), bool, int, float, complex, str, bytes)
_UNWRAP = ("__self__", "__func__", "__wrapped__", "func", "fget", "fset", "fdel")


def _withheld_inside(value, table: dict, limit: int = 200_000):
    """(answer id, name, path) for each forbidden function that `value` is, holds (in a
    container, a record's fields, a partial's arguments) or wraps (a bound method or
    method-wrapper of it, a partial of it, a decorated copy): what a test cell would run
    here if it called it. Modules and classes are not looked into (a test cell reads a
    module's attribute by its own code); a `Remote` runs in the kernel, where the stubs are."""
    import dataclasses
    import functools
    import types

    found, seen, todo = [], {}, [value]
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


def _attribute(obj, name: str):
    """`obj.<name>` as Python itself stores it, without running a property or __getattr__."""
    import inspect

    try:
        return getattr(obj, name, None) if _c_type(obj) else inspect.getattr_static(obj, name, None)
    except Exception:  # noqa: BLE001 - an object that will not say is looked at no further
        return None



def _c_type(obj) -> bool:
    """An object of a type written in C (a bound method, method-wrapper, partial, property):
    `getattr` reads its slots without running any Python code."""
    return not type(obj).__flags__ & (1 << 9)     # Py_TPFLAGS_HEAPTYPE


def message_for(e: Exercise, name: str, where: str) -> str:
    return message(name, where, e.why, e.may)    # the visible check says the same (own_work.check)


def package_data(root: Path = ROOT) -> dict:
    """What `threeaxes/grading/own_work_data.py` holds: every drop's exercises, for the visible checks."""
    return {folder.name[:6]: {e.answer: {"forbid": list(e.forbid), "why": e.why, "may": e.may}
                              for e in load_exercises(folder / "grading.json")}
            for folder in sorted((Path(root) / "source").glob("drop*"))
            if (folder / "grading.json").is_file()}


def instructor_cells(source_notebook: Path) -> tuple[Place, ...]:
    """Every cell of the instructor's notebook that is not an answer or a test, with its place."""
    import nbformat

    return instructor_places(nbformat.read(source_notebook, as_version=4))


def instructor_places(nb) -> tuple[Place, ...]:
    """`instructor_cells` of a notebook already read."""
    return tuple(place_of(c, i) for i, c in code_places(nb) if not is_graded(c))


def opening_is_instructors(nb, instructors) -> bool:
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


def guard_for(assignment: str, instructors, course_root: Path) -> Guard | None:
    """The drop's Guard, from its source folder; `instructors`: `instructors_cells_of` its notebook."""
    folder = _source_folder(assignment, course_root)
    exercises = load_exercises(folder / "grading.json") if folder else []
    return Guard(exercises, instructors) if exercises else None


def instructors_cells_of(assignment: str, notebook: str, course_root: Path) -> tuple[Place, ...]:
    """The instructor's cells of the drop's source notebook, with their places (none where it
    has no source folder)."""
    folder = _source_folder(assignment, course_root)
    path = folder / f"{notebook}.ipynb" if folder else None
    return instructor_cells(path) if path and path.is_file() else ()


__all__ = ["ENAME", "Exercise", "Guard", "Oracle", "Place", "definition", "guard_for", "instructor_cells",
           "instructor_places", "instructors_cells_of", "opening_is_instructors", "place_of",
           "load_exercises", "message_for", "package_data", "package_for", "resolve", "stub_package"]


if __name__ == "__main__":   # after editing a grading.json's "exercises"
    (PACKAGE / "grading" / "own_work_data.py").write_text(package_source())
