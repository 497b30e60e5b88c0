"""nbgrader's Execute step, with test cells judged outside the student's kernel: `JudgedExecute`,
which nbgrader_config.py puts where nbgrader's `Execute` stands. What it changes and why:
CONTRIBUTING.md, from "Test cells run in the grader" to "Points only for the student's own code"."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float

from autograder import phases
from autograder.judging import borrowed, cell_seconds, warm_start
from autograder.judging.judge import _error as judge_error
from autograder.judging.judge import is_test_cell, judge_cell, last_graded_code_cell, notebook_names
from autograder.judging.oracle import Oracle
from autograder.runtime.kernel_session import KernelSession
from autograder.runtime.messages import Output


class JudgedExecute(Execute):
    isolate = Bool(True, help="Run the student's kernel in the sandbox "
                              "(autograder/runtime/sandbox.py).").tag(config=True)
    cell_limit_factor = Float(cell_seconds.FACTOR, help="A cell may run this many times the model solution's "
                              "time for it, within Execute.timeout (0: every cell gets Execute.timeout; "
                              "autograder/judging/cell_seconds.py)").tag(config=True)
    cell_limit_floor = Float(cell_seconds.FLOOR_S, help="Seconds a cell may always run, however fast the "
                             "model solution's").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        isolate = self.isolate and os.environ.get("THREEAXES_GRADE_ISOLATE", "1") != "0"
        about = resources.get("nbgrader", {})
        assignment, notebook = about.get("assignment", ""), about.get("notebook", "")
        with phases.timed("setup"):
            source = borrowed.source_notebook(assignment, notebook, Path.cwd())
            model = nbformat.read(source, as_version=4) if source else None
            instructors = borrowed.instructor_places(model) if model else ()
            imports = warm_start.imported_modules(model) if model else ()
            guard = borrowed.guard_for(assignment, instructors, Path.cwd())
            # the shared opening only where each of its cells is the instructor's at its own place
            # (place, cell id, grade id and code): a copy of one elsewhere is the student's
            shared = ({p.source for p in instructors} if borrowed.opening_is_instructors(nb, instructors)
                      else set())
            files = _assignment_files(Path.cwd(), assignment)
        host = {"isolate": isolate, "files": files, "withheld": guard.paths if guard else None,
                "timeout": self.timeout}
        limits = cell_seconds.Limits(self.timeout, factor=self.cell_limit_factor, floor_s=self.cell_limit_floor)
        if limits.factor > 0:   # before this submission's host: measuring may open another
            limits.seconds = cell_seconds.measured(Path.cwd(), assignment, notebook,
                                                   lambda model: self._model_seconds(model, host))
        opening = warm_start.host_for(nb, instructors=shared, isolate=isolate, files=files,
                                      withheld=guard.paths if guard else None, timeout=self.timeout, imports=imports)
        if opening.sandbox.get("refused"):
            self.log.warning("grading without a sandbox: %s", opening.sandbox["refused"])
        with phases.timed("fork"):
            kernel = opening.session(self.timeout)
        try:
            if not kernel.alive:   # the grader's trouble, not the student's: no grade rather than 0
                raise RuntimeError(f"no kernel could be started for this submission: {opening.host.log_tail()}")
            run_notebook(nb, kernel, self.timeout, guard, kernel.oracle, opening=opening.outputs, limits=limits)
        finally:
            with phases.timed("kernel end"):
                kernel.close()
        return nb, resources

    def _model_seconds(self, model: NotebookNode, host: dict[str, Any]) -> dict[str, float] | None:
        try:
            return model_seconds(model, **host)
        except Exception as exc:  # noqa: BLE001 - the submission is graded all the same, under Execute.timeout
            self.log.warning("the model solution's cell times could not be measured (%s: %s): every cell "
                             "keeps Execute.timeout", type(exc).__name__, exc)
            return None


def model_seconds(model: NotebookNode, *, timeout: float, **host: Any) -> dict[str, float] | None:
    """The seconds of each cell of the instructor's notebook `model`, graded as a submission is
    (a kernel forked from the worker's host for its opening, test cells judged here, no guard:
    the instructor's solutions may call what the students may not); None if no kernel started."""
    opening = warm_start.host_for(model, instructors={s.strip() for s in warm_start.opening_cells(model)},
                                  timeout=timeout, imports=warm_start.imported_modules(model), **host)
    recorder = cell_seconds.Recorder()
    with phases.quiet(), opening.session(timeout) as kernel:
        if not kernel.alive:   # the grader's trouble: measured another time
            return None
        run_notebook(model, kernel, timeout, None, kernel.oracle, opening=opening.outputs, recorder=recorder)
    return recorder.seconds


def run_notebook(nb: NotebookNode, kernel: KernelSession[Any], timeout: float, guard: borrowed.Guard | None = None,
                 oracle: Oracle | None = None, opening: Sequence[list[Output]] = (),
                 limits: cell_seconds.Limits | None = None, recorder: cell_seconds.Recorder | None = None) -> None:
    """Every code cell in order: the student's in the kernel, test cells here. The first
    code cells have run already where `opening` holds their outputs (autograder/judging/warm_start.py).
    With a `guard` (autograder/judging/borrowed.py), `oracle` asks it before answering each call to
    a withheld function: once the first student-written cell has begun, whatever cell is
    running, a call that an exercise not yet judged forbids is refused, and one made while a
    student-written or test cell ran counts against each such exercise; a test cell of an
    exercise that used one gets that error instead of its outputs. Instructor cells are
    known by their place and id (`Guard.enter`), not their code alone. `limits`: each cell's
    own time limit (autograder/judging/cell_seconds.py; else `timeout` for each); `recorder`: takes
    each cell's seconds (the model solution's run)."""
    previous = oracle.guard if oracle is not None else None
    if oracle is not None and guard is not None:
        oracle.guard = guard
    try:
        _run_cells(nb, kernel, timeout, guard, oracle, opening, limits, recorder)
    finally:
        if oracle is not None and guard is not None:
            oracle.guard = previous


# what a cell after the last graded one shows in the autograded notebook and the feedback
NOT_RUN = ("Not run when grading: no score depends on a cell after the last graded code cell. "
           "Run it in your own notebook to see its output.\n")


def _run_cells(nb: NotebookNode, kernel: KernelSession[Any], timeout: float, guard: borrowed.Guard | None,
               oracle: Oracle | None, opening: Sequence[list[Output]], limits: cell_seconds.Limits | None,
               recorder: cell_seconds.Recorder | None) -> None:
    count = place = 0
    # a drop's depth after its last graded code cell (PyTorch's own API, more traces, the reveal)
    # can change no autograded score, and the written answers among it are the student's words,
    # graded by hand: it runs under nbval in CI and in the student's notebook, not per submission
    last_graded = last_graded_code_cell(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if index > last_graded:
            cell.execution_count = None
            cell.outputs = ([nbformat.v4.new_output("stream", name="stdout", text=NOT_RUN)]
                            if cell.source.strip() else [])
            continue
        instructors = True
        if cell.source.strip():
            if guard:
                instructors = guard.enter(cell, place)
            place += 1
        mark = len(oracle.calls) if oracle else 0
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        seconds = limits.of(cell)[0] if limits else timeout
        timing = recorder.timing(cell) if recorder else contextlib.nullcontext()
        if count < len(opening):
            outputs = opening[count]
        elif is_test_cell(cell):
            limit = getattr(kernel, "test_cell", None)     # the cell's questions share one cell limit
            with limit(seconds) if limit else contextlib.nullcontext(), phases.timed("test cells"), timing:
                outputs = _judge(cell.source, kernel, guard, grade_id)
            if guard:
                guard.note(oracle.calls[mark:] if oracle else [], "your code, run by this test", test=grade_id)
                borrowed_answer = guard.verdict(grade_id)
                outputs = [borrowed_answer] if borrowed_answer else outputs
        elif cell.source.strip():
            with phases.timed("student cells"), timing:
                outputs = kernel.run_cell(cell.source, seconds)
            if limits:
                outputs = limits.stopped(cell, outputs, f"the answer cell {grade_id}" if grade_id
                                         else f"code cell {count + 1}")
            if guard and not instructors:
                where = f"the answer cell {grade_id}" if grade_id else "a cell you added or changed"
                guard.note(oracle.calls[mark:] if oracle else [], where)
        else:
            continue
        count += 1
        cell.execution_count = count
        cell.outputs = [nbformat.from_dict(o) for o in outputs]


def _judge(source: str, kernel: KernelSession[Any], guard: borrowed.Guard | None, grade_id: str) -> list[Output]:
    """A test cell's outputs. The names it reads are fetched once: the guard looks at those
    very values (an answer that is a withheld function would run here, in the grader), and
    the judge runs the cell on them. A look that cannot be taken fails the cell."""
    try:
        values = kernel.answers.get(notebook_names(source))
    except Exception as exc:  # noqa: BLE001 - as the judge reports it: the cell's error
        return [judge_error(exc)]
    if guard:
        try:
            guard.note_answers(values, grade_id)
        except Exception as exc:  # noqa: BLE001 - unchecked is not passed
            return [{"output_type": "error", "ename": ENAME_UNCHECKED,
                     "evalue": f"the grader could not check what this cell reads from the notebook "
                               f"({type(exc).__name__}: {str(exc)[:300]}), so it scores 0",
                     "traceback": [f"{ENAME_UNCHECKED}: {type(exc).__name__}: {str(exc)[:300]}"]}]
    return judge_cell(source, kernel.answers, values=values)


ENAME_UNCHECKED = "UncheckedAnswer"


# the instructor's files of source/<drop>/ that are not the drop's data: the grading data stays out
NOT_SHIPPED = ("grading.json",)


def _assignment_files(course_root: Path, assignment: str) -> dict[str, bytes]:
    """The data files a drop ships, as the instructor's source/<drop>/ holds them (regular
    files, not notebooks, not the grading data), never what the submission's folder holds:
    the kernel host writes these into its working folder, first on its sys.path."""
    from autograder import one_notebook

    folder = Path(course_root) / "source" / assignment
    if not one_notebook.NAME.fullmatch(assignment or "-") or not folder.is_dir():
        return {}
    found = {}
    for entry in os.scandir(folder):
        if (entry.is_file(follow_symlinks=False) and not entry.name.endswith(".ipynb")
                and not entry.name.startswith(".") and entry.name not in NOT_SHIPPED):
            try:
                found[entry.name] = one_notebook.read_regular(Path(entry.path), cap=16 << 20)
            except OSError:
                continue
    return found
