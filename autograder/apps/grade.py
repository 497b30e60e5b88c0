"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde, by JOBS worker processes (grade_worker.py):
                       the student's cells in a sandboxed kernel, the test cells
                       (hidden tests put back) judged in the grader (autograder/plugins/execute.py)
      -> feedback/     nbgrader generate_feedback: HTML per student, hidden tests removed
      -> grades.csv    nbgrader export

`--demo` first copies the sample submissions in autograder/samples/ into
submitted/, so the whole path can be tried on a fresh clone. `--jobs N` (the
Makefile's JOBS) grades N submissions at once; a progress line counts them,
with the rate and the time left.

Grading resumes: each submission graded is noted in `.graded/<student>/<assignment>`
with a digest of the files it was graded from, so a run stopped at any point
(Ctrl-C, a killed process, a reboot) and started again grades only what is not
graded yet, was submitted again since, or has lost its autograded notebook
(autograded/ deleted by hand); `--force` grades everything again. feedback/ is
written again each run.

A submission is its notebook alone (autograder/one_notebook.py): a folder in submitted/
that holds a link (the notebook itself included), a device, a pipe, a folder or any file
but the notebook and what nbgrader submit writes beside it is refused before anything of it runs or is
copied, and named with its cause at the end, as below.

One submission never stops the class: a worker that dies is replaced (the
submission it was grading is tried once more, then named), and a submission
that cannot be graded, or whose feedback page cannot be written, is named at
the end with its cause (the last lines of nbgrader's and the worker's log; all
of it in `.graded/.logs/<student>+<assignment>.log`, each worker's log in
`.graded/.logs/worker-N.log`), while everyone else gets feedback and a row in
grades.csv; the command then exits with status 1.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course, one_notebook
from autograder.plugins import core_points

ROOT = course.ROOT
SAMPLES = course.SAMPLES
GRADED = ".graded"   # in the course root: one note per graded submission
LOGS = ".logs"      # in GRADED: each worker's log, and one per submission that could not be graded
TAIL_LINES = 15     # lines of a failure's log shown with its cause
MAX_ANSWER_CHARS = 1 << 20   # one answer line of a grading worker (grade_worker.KEEP bounds its text)


def nbgrader(course_root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real nbgrader CLI in `course_root` (its nbgrader_config.py applies).

    nbgrader shells out to `alembic` and starts kernels, so the environment's
    bin/ goes first on PATH even when .venv is not activated; the repository
    root goes on PYTHONPATH for the feedback preprocessor in autograder/.
    Grading kernels run cells back to back, so an early start of the ranks'
    forkserver (threeaxes' prestart) would gain nothing, and in a drop that
    never launches it would cost CPU: THREEAXES_PRESTART=0."""
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                          cwd=course_root, env=_nbgrader_env(), check=check, text=True,
                          capture_output=not check)


def _nbgrader_env() -> dict:
    def prepend(var, path):
        return f"{path}{os.pathsep}{os.environ[var]}" if os.environ.get(var) else str(path)
    return {**os.environ, "PATH": prepend("PATH", Path(sys.executable).parent),
            "PYTHONPATH": prepend("PYTHONPATH", ROOT), "THREEAXES_PRESTART": "0"}


def register_assignments(course_root: Path, names: list[str]) -> None:
    """Record each assignment's graded cells in the gradebook (autograde needs
    them); the release it writes goes to a scratch folder, not release/."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            nbgrader(course_root, "generate_assignment", name, "--force",
                     f"--CourseDirectory.release_directory={scratch}")


def gradebook_url(course_root: Path, config) -> str:
    """The course's gradebook database, as nbgrader run in `course_root` opens it (the
    course's db_url is relative: "sqlite:///gradebook.db")."""
    from nbgrader.coursedir import CourseDirectory

    url = CourseDirectory(config=config).db_url
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url[len(prefix):].startswith("/"):
        url = f"{prefix}{Path(course_root).resolve()}/{url[len(prefix):]}"
    return url


def add_students(course_root: Path, students) -> None:
    """Every student in the gradebook before the workers start: autograde adds a
    submission's student itself, and two workers adding the same one at once collide."""
    from nbgrader.api import Gradebook
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_root)).load_config()
    os.environ["PATH"] = _nbgrader_env()["PATH"]   # a new gradebook is made by running `alembic`
    with Gradebook(gradebook_url(course_root, config)) as gb:
        for student in sorted(set(students)):
            gb.update_or_create_student(student)


def submissions(course_root: Path) -> list[tuple[str, str]]:
    """(assignment, student) of every folder submitted/<student>/<assignment>/, links not
    followed (autograder/one_notebook.py); one that is not a notebook alone is refused
    when it comes to be graded (`refused`), named with its cause."""
    return one_notebook.submission_folders(Path(course_root) / "submitted")


def refused(course_root: Path, assignment: str, student: str) -> str | None:
    """Why submitted/<student>/<assignment>/ is not graded (a link, a device, a folder or a
    file other than the notebook in it), or None: checked before anything runs or is copied."""
    if not (one_notebook.NAME.fullmatch(student) and one_notebook.NAME.fullmatch(assignment)):
        return f"the folder names {student!r}/{assignment!r} are not a student id and a drop"
    return one_notebook.refusal(Path(course_root) / "submitted" / student / assignment,
                                one_notebook.notebooks_of(course_root, assignment))


def _digest(course_root: Path, assignment: str, student: str) -> str:
    """What a submission was graded from: its files' names and bytes (regular files only, read
    without following a link; a folder that holds anything else is refused before this)."""
    folder = Path(course_root) / "submitted" / student / assignment
    h = hashlib.sha256()
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
    except OSError:
        names = []
    for name in names:
        try:
            data = one_notebook.read_regular(folder / name)
        except OSError:
            data = b"\0unreadable"
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()


def _note(course_root: Path, assignment: str, student: str) -> Path:
    return Path(course_root) / GRADED / student / assignment


def pending(course_root: Path, todo: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The submissions of `todo` not graded yet, changed since they were, or whose
    autograded notebook is gone (autograded/ deleted by hand, say)."""
    return [(a, s) for a, s in todo if refused(course_root, a, s) or not _note(course_root, a, s).is_file()
            or _note(course_root, a, s).read_text() != _digest(course_root, a, s)
            or _autograded_missing(course_root, a, s)]


def _autograded_missing(course_root: Path, assignment: str, student: str) -> bool:
    """Whether a notebook of the assignment that the student submitted has no autograded copy."""
    course_root = Path(course_root)
    theirs = {p.name for p in (course_root / "submitted" / student / assignment).glob("*.ipynb")}
    ours = {p.name for p in (course_root / "source" / assignment).glob("*.ipynb")} or theirs
    return any(not (course_root / "autograded" / student / assignment / name).is_file()
               for name in theirs & ours)


def autograde(course_root: Path, todo: list[tuple[str, str]], jobs: int, *extra: str,
              progress=sys.stderr) -> dict[tuple[str, str], float]:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (see `grade_submissions`). Returns seconds per submission; raises SystemExit
    naming each submission that could not be graded, with its cause, or saying how far
    a stopped run got."""
    graded = grade_submissions(course_root, todo, jobs, *extra, progress=progress)
    if graded.failed:
        raise SystemExit(graded.failure_report())
    return graded.seconds


@dataclass
class Autograded:
    seconds: dict = field(default_factory=dict)   # (assignment, student): seconds, graded or not
    failed: dict = field(default_factory=dict)    # (assignment, student): why, with the log it names
    phases: dict = field(default_factory=dict)    # (assignment, student): {phase: seconds} (autograder/phases.py)

    def failure_report(self) -> str:
        return "could not grade:\n" + "\n".join(self.failed[k] for k in sorted(self.failed))


def grade_submissions(course_root: Path, todo: list[tuple[str, str]], jobs: int, *extra: str,
                      progress=sys.stderr) -> Autograded:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (autograder/apps/grade_worker.py; each submission in its own sandboxed kernel,
    all sharing the gradebook, whose db_url waits for its lock). `extra`: nbgrader
    settings such as "--Execute.timeout=30". Notes each submission graded (`pending`
    then leaves it out).

    A submission nbgrader cannot grade is named in `failed` with its cause: the last
    lines of what nbgrader and the worker logged, the whole of it in a log file under
    .graded/.logs/ that the message names; the others are graded all the same. A worker
    that dies (killed, os.abort, out of memory) is replaced and the queue goes on; the
    submission it was grading is graded once more by the new worker and, if that one
    dies too, named as not graded. Each worker's own log: .graded/.logs/worker-N.log.
    Ctrl-C raises SystemExit saying how far the run got."""
    course_root = Path(course_root)
    add_students(course_root, [student for _, student in todo])
    logs = course_root / GRADED / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    out = Autograded()
    for assignment, student in todo:   # a submission that is not its notebook alone: named, never run
        why = refused(course_root, assignment, student)
        if why:
            out.failed[assignment, student] = f"{student}/{assignment}: {why}"
            out.seconds[assignment, student] = 0.0
    queue = ByDrop([item for item in todo if item not in out.failed])
    lock, start, stopping = threading.Lock(), time.perf_counter(), threading.Event()
    workers, broken = [], []   # broken: why no worker can start, once two in a row died starting

    def start_worker(log):
        env = {**_nbgrader_env(), "THREEAXES_WORKER_STARTED": repr(time.time())}   # grade_worker.STARTED_AT
        worker = subprocess.Popen([sys.executable, "-m", "autograder.apps.grade_worker", str(course_root), *extra],
                                  cwd=course_root, env=env, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        with lock:
            workers.append(worker)
        return worker

    def end(worker):
        try:
            worker.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill(worker)

    def work(number: int):
        log_path = logs / f"worker-{number}.log"
        with open(log_path, "ab") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')}: worker {number} starts\n".encode())
            log.flush()
            worker, item, retried, unstarted = start_worker(log), None, set(), 0
            try:
                while True:
                    item = queue.take(item[0] if item else None)
                    if item is None:
                        return
                    began = time.perf_counter()
                    while True:
                        digest, mark = _digest(course_root, *item), log_path.stat().st_size
                        result = None if broken else _ask(worker, item)
                        if broken:
                            result = {"success": False, "died": True, "error": broken[0]}
                        if result is not None or stopping.is_set():
                            break
                        died = _death(worker)
                        _kill(worker)
                        said = _since(log_path, mark)
                        if f"-- grading {item[1]}/{item[0]} (" not in said:
                            # it died before it took the submission: the worker's trouble, not the student's
                            unstarted += 1
                            if unstarted >= 2:   # twice running: no worker can grade here; say why, stop
                                broken.append(f"no grading worker could start ({died}); the last lines of "
                                              f"its log: " + " | ".join(_tail(said, 5)))
                                continue
                        elif item in retried:
                            result = {"success": False, "died": True,
                                      "error": f"the grading worker died while grading it ({died}), "
                                               f"in two workers one after the other; not tried again"}
                            worker = start_worker(log)
                            break
                        else:
                            retried.add(item)
                        log.write(f"-- the worker died ({died}) by {item[1]}/{item[0]}: "
                                  f"a new worker takes it\n".encode())
                        log.flush()
                        worker = start_worker(log)   # for this submission once more and the rest of the queue
                    if result is None:   # stopped (Ctrl-C)
                        return
                    if result["success"]:
                        unstarted = 0
                    with lock:
                        out.seconds[item] = time.perf_counter() - began
                        out.phases[item] = _phases(result, out.seconds[item])
                        if result["success"]:
                            note = _note(course_root, *item)
                            note.parent.mkdir(parents=True, exist_ok=True)
                            note.write_text(digest)
                        elif result.get("refused"):   # changed since the check above (grade_worker.py)
                            out.failed[item] = f"{item[1]}/{item[0]}: {result['refused']}"
                        else:
                            out.failed[item] = _failure(course_root, item, result, log_path, mark)
                        _progress(progress, len(out.seconds), len(todo), time.perf_counter() - start, item,
                                  ok=result["success"])
            finally:
                end(worker)

    left = len(todo) - len(out.failed)
    threads = [threading.Thread(target=work, args=(k + 1,), daemon=True)
               for k in range(max(1, min(jobs, left)) if left else 0)]
    for t in threads:
        t.start()
    restore = _sigterm_as_interrupt()   # killed by a timeout or a CI runner: stop the workers as Ctrl-C does
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stopping.set()
        _stop(queue, workers)
        done = len(out.seconds) - len(out.failed)
        raise SystemExit(f"stopped: {done} of {len(todo)} graded and kept; run it again to grade the rest"
                         + "".join(f"\n  not graded: {s}/{a}" for a, s in sorted(out.failed))) from None
    finally:
        restore()
    return out


def _sigterm_as_interrupt():
    """Until the returned function is called, SIGTERM raises KeyboardInterrupt in the main
    thread, so that the workers (each in a session of its own, which the signal does not
    reach) are stopped rather than left running. Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _phases(result: dict, seconds: float) -> dict[str, float]:
    """The worker's seconds per phase for one submission, and the rest of `seconds` (from
    handing it over to its answer) as the grader's side."""
    said = result.get("phases") if isinstance(result.get("phases"), dict) else {}
    spent = {str(k): float(v) for k, v in said.items() if isinstance(v, (int, float))}
    spent["grader side"] = max(0.0, seconds - sum(spent.values()))   # a worker starts inside `seconds`
    return spent


def _ask(worker: subprocess.Popen, item) -> dict | None:
    """The worker's answer for one submission; None if the worker died first."""
    try:
        worker.stdin.write(json.dumps(item) + "\n")
        worker.stdin.flush()
        line = worker.stdout.readline(MAX_ANSWER_CHARS + 1)
    except (BrokenPipeError, OSError, ValueError):
        return None
    if len(line) > MAX_ANSWER_CHARS:   # a worker's answer is a few kB: this one stops the worker
        _kill(worker)
        return None
    try:
        return json.loads(line) if line else None
    except ValueError:
        return None


def _since(path: Path, mark: int) -> str:
    with open(path, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace")


def _death(worker: subprocess.Popen) -> str:
    """How a worker ended: its exit status or the signal that killed it."""
    try:
        code = worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return "it stopped answering"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _kill(worker: subprocess.Popen) -> None:
    from autograder.runtime import sandbox

    sandbox.kill_tree(worker)


def _tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return kept[-lines:]


# the last line of a Python traceback (nbgrader's log indents a logged traceback's lines)
EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")


def _leading_to(cause: str, text: str, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of `text` up to the last one that says `cause` (the traceback
    that ends in it, not nbgrader's wrapper after it); its last lines where none does."""
    kept = _tail(text, 100_000)
    at = max((k for k, line in enumerate(kept) if cause and cause.strip() in line), default=len(kept) - 1)
    return kept[max(0, at + 1 - lines):at + 1]


def _cause(text: str) -> str:
    """The error a failed autograde ended with: the last exception line of a traceback in
    nbgrader's log that is not nbgrader's own wrapper ("Please see the above traceback"),
    after what nbgrader warned of a notebook's grade ids (a grade id used twice makes
    nbgrader strip that cell's metadata, and its error then speaks of an old schema)."""
    lines = text.splitlines()
    found = [m.group(0).strip() for m in map(EXCEPTION_LINE.match, lines) if m]
    own = [line for line in found if "NbGraderException" not in line.split(":", 1)[0]]
    useful = [line for line in _tail(text, 1000) if "Please see the" not in line
              and "There was an error processing" not in line]
    cause = (own or found or useful or ["no cause was logged"])[-1].strip()
    warned = [line.split("] ", 1)[-1].strip() for line in lines if "exists multiple times" in line]
    return "; ".join([*dict.fromkeys(warned), cause])


def _failure(course_root: Path, item, result: dict, worker_log: Path, mark: int) -> str:
    """The message naming a submission that could not be graded, and the log file it names:
    what nbgrader logged, its traceback, and what the worker logged meanwhile."""
    assignment, student = item
    worker_said = _since(worker_log, mark)
    nbgrader_said = "\n".join(part for part in (result.get("log", ""), result.get("error", "")) if part)
    path = course_root / GRADED / LOGS / f"{student}+{assignment}.log"
    path.write_text(f"{student}/{assignment} could not be graded ({time.strftime('%Y-%m-%d %H:%M:%S')})\n\n"
                    f"== nbgrader's log and error\n{nbgrader_said or '(nothing)'}\n\n"
                    f"== the worker's log ({worker_log}) meanwhile\n{worker_said or '(nothing)'}\n")
    cause = result["error"] if result.get("died") else _cause(nbgrader_said or worker_said)
    shown = _leading_to(cause.split("; ")[-1], worker_said) or _leading_to(cause, nbgrader_said)
    where = path.relative_to(course_root) if path.is_relative_to(course_root) else path
    return (f"{student}/{assignment}: {cause}\n"
            + "".join(f"    | {line}\n" for line in shown)
            + f"    (all of it: {where})")


class ByDrop:
    """The submissions left, drop by drop. A worker keeps to one drop while it has
    submissions: its kernel host ran that drop's opening cells (autograder/judging/warm_start.py),
    so each drop's opening runs about once per class instead of once per worker. A worker
    whose drop is done takes the next drop no worker holds, in order; when every drop left
    is held, it helps the one with the most submissions left per worker."""

    def __init__(self, todo):
        self.left: dict[str, deque] = {}
        for assignment, student in todo:
            self.left.setdefault(assignment, deque()).append((assignment, student))
        self.holders: dict[str, int] = {a: 0 for a in self.left}
        self.lock = threading.Lock()

    def take(self, current: str | None):
        with self.lock:
            if current is not None and self.left.get(current):
                return self.left[current].popleft()
            if current is not None:
                self.holders[current] -= 1
            open_drops = [a for a in self.left if self.left[a]]
            if not open_drops:
                return None
            free = [a for a in open_drops if self.holders[a] == 0]
            drop = free[0] if free else max(open_drops, key=lambda a: len(self.left[a]) / (self.holders[a] + 1))
            self.holders[drop] += 1
            return self.left[drop].popleft()

    def clear(self) -> None:
        with self.lock:
            for left in self.left.values():
                left.clear()


def _stop(queue: ByDrop, workers) -> None:
    """Ctrl-C: take no more submissions; interrupt each worker, so that the submission it
    grades stops its sandboxed kernel on the way out, then end what is left of it."""
    from autograder.runtime import sandbox

    queue.clear()
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)
    for worker in workers:
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        sandbox.kill_tree(worker)


def _progress(stream, done: int, total: int, elapsed: float, item, ok: bool = True) -> None:
    if stream is None:
        return
    width = 30
    bar = "#" * round(width * done / total) + "." * (width - round(width * done / total))
    rate = done / elapsed * 60 if elapsed > 0 else 0.0
    left = (total - done) / rate * 60 if rate else 0.0
    line = (f"[{bar}] {done}/{total} done, {rate:.1f}/min, {_clock(left)} of autograding left "
            f"({item[1]}/{item[0]}{'' if ok else ': not graded'})")
    if stream.isatty():
        stream.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
    else:
        stream.write(line + "\n")
    stream.flush()


def _said_step(stream, next_step: str, last: tuple | None = None) -> tuple | None:
    """After autograding: how long the step just done took, and what comes next (feedback
    pages and grades.csv take a while for a class: the bar's "left" counts autograding only)."""
    if stream is None:
        return None
    if last is not None:
        stream.write(f"  {last[0]}: done in {_clock(time.perf_counter() - last[1])}\n")
    if next_step:
        stream.write(f"{next_step}...\n")
    stream.flush()
    return (next_step.removeprefix("then "), time.perf_counter()) if next_step else None


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class NotAllGraded(SystemExit):
    """grade_all's end when some submissions could not be graded: feedback/ and grades.csv
    were written for every other one. `names`: the assignments graded; the message
    names each submission left out, with its cause and the log file that holds the rest."""

    def __init__(self, names: list[str], message: str):
        super().__init__(message)
        self.names = names


def grade_all(course_root: Path, jobs: int = 2, force: bool = False, progress=sys.stderr) -> list[str]:
    """Autograde what is new in submitted/, then feedback/ and grades.csv for the whole class.
    A submission that cannot be graded, or whose feedback page cannot be written, is left
    out (its stale autograded/ and feedback/ pages with it) and named at the end, in a
    NotAllGraded (a SystemExit); everyone else is graded, gets feedback and a row in
    grades.csv all the same. Returns the assignments graded."""
    course_root = Path(course_root)
    todo = submissions(course_root)
    if not todo:
        raise SystemExit("submitted/ holds no notebooks. Collect them first "
                         "(submitted/<student>/<assignment>/<assignment>.ipynb), or run `make grade-demo`.")
    names = sorted({assignment for assignment, _ in todo})
    register_assignments(course_root, names)
    left = todo if force else pending(course_root, todo)
    if progress is not None and len(left) < len(todo):
        progress.write(f"{len(todo) - len(left)} of {len(todo)} submissions already graded (unchanged "
                       f"since); grading the other {len(left)} (--force grades all)\n")
    graded = grade_submissions(course_root, left, jobs, progress=progress) if left else Autograded()
    for assignment, student in graded.failed:
        forget(course_root, assignment, student)
    problems = [graded.failed[k] for k in sorted(graded.failed)]
    said = _said_step(progress, f"then the feedback pages of {len(names)} drop(s) for the whole class")
    problems += write_feedback(course_root, names, jobs)
    said = _said_step(progress, "then grades.csv", said)
    exported = nbgrader(course_root, "export", "--to=grades.csv", check=False)
    if exported.returncode:
        problems.append("grades.csv could not be written: " + _cause(exported.stderr) + "\n"
                        + "".join(f"    | {line}\n" for line in _tail(exported.stderr)).rstrip())
    else:   # each drop's grade (its core) and extra credit (its optional sections) beside nbgrader's total
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(course_root)).load_config()
        core_points.add_columns(Path(course_root) / "grades.csv", gradebook_url(course_root, config))
    _said_step(progress, "", said)
    if problems:
        raise NotAllGraded(names, "NOT GRADED (feedback/ and grades.csv hold everyone else):\n"
                           + "\n".join(problems))
    return names


def forget(course_root: Path, assignment: str, student: str) -> None:
    """A submission that could not be graded: nothing of an earlier grading stays to be taken
    for this one (its autograded notebook, its feedback page, which `release_feedback` would
    hand out, and its note, so that the next run grades it again). submitted/ is kept."""
    course_root = Path(course_root)
    _note(course_root, assignment, student).unlink(missing_ok=True)
    for folder in ("autograded", "feedback"):
        shutil.rmtree(course_root / folder / student / assignment, ignore_errors=True)


FEEDBACK_FAILED = re.compile(r"There was an error processing assignment: (?P<path>.*)$", re.M)


def write_feedback(course_root: Path, names: list[str], jobs: int = 1) -> list[str]:
    """nbgrader generate_feedback for each assignment, every autograded student at once,
    `jobs` assignments at a time (each its own nbgrader process; the gradebook's db_url
    waits for its lock). nbgrader goes on past a page it cannot write and fails at the end:
    each student whose page failed is named (`feedback_failures`), the others' pages stand.
    Returns one message per page not written."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> list[str]:
        if not any((Path(course_root) / "autograded").glob(f"*/{name}/*.ipynb")):
            return []   # none of it graded (each named already); nbgrader would fail on no notebooks
        done = nbgrader(course_root, "generate_feedback", name, "--force", check=False)
        return feedback_failures(course_root, name, done.stderr + done.stdout) if done.returncode else []

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [problem for problems in pool.map(one, names) for problem in problems]


def feedback_failures(course_root: Path, name: str, said: str) -> list[str]:
    """What a failed generate_feedback of assignment `name` said, one message per student
    whose page it could not write, with the cause; all it said goes to
    .graded/.logs/feedback+<name>.log, which each message names."""
    log = Path(course_root) / GRADED / LOGS / f"feedback+{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(said)
    where = log.relative_to(course_root) if log.is_relative_to(course_root) else log
    found = list(FEEDBACK_FAILED.finditer(said))
    problems = []
    for k, match in enumerate(found):
        segment = said[match.start():found[k + 1].start() if k + 1 < len(found) else None]
        student = _student_in(match.group("path"), name) or match.group("path").strip()
        problems.append(f"{student}/{name}: no feedback page: {_cause(segment)} (all of it: {where})")
    if not found:
        problems.append(f"*/{name}: nbgrader generate_feedback failed: {_cause(said)}\n"
                        + "".join(f"    | {line}\n" for line in _tail(said))
                        + f"    (all of it: {where})")
    return problems


def _student_in(path: str, assignment: str) -> str | None:
    """The student of nbgrader's "autograded/<student>/<assignment>" path in a log line."""
    parts = Path(path.strip()).parts
    return parts[-2] if len(parts) >= 2 and parts[-1] == assignment else None


def copy_samples(course_root: Path) -> None:
    for nb in sorted(SAMPLES.glob("*/*/*.ipynb")):
        dest = course_root / "submitted" / nb.relative_to(SAMPLES)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, dest)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="grade the sample submissions")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    parser.add_argument("--force", action="store_true", help="grade again what is already graded")
    args = parser.parse_args(argv)
    if args.demo:
        copy_samples(ROOT)
    try:
        names, missing = grade_all(ROOT, args.jobs, force=args.force), None
    except NotAllGraded as some:
        names, missing = some.names, some
    print(f"graded {', '.join(names)}: scores in grades.csv, feedback in feedback/")
    if (ROOT / "grades.csv").is_file():
        print((ROOT / "grades.csv").read_text())
    if missing is not None:
        raise missing


if __name__ == "__main__":
    main()
