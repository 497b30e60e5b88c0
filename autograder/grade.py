"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde, by JOBS worker processes (grade_worker.py):
                       the student's cells in a sandboxed kernel, the test cells
                       (hidden tests put back) judged in the grader (autograder/execute.py)
      -> feedback/     nbgrader generate_feedback: HTML per student, hidden tests removed
      -> grades.csv    nbgrader export

`--demo` first copies the sample submissions in autograder/samples/ into
submitted/, so the whole path can be tried on a fresh clone. `--jobs N` (the
Makefile's JOBS) grades N submissions at once; a progress line counts them,
with the rate and the time left.

Grading resumes: each submission graded is noted in `.graded/<student>/<assignment>`
with a digest of the files it was graded from, so a run stopped at any point
(Ctrl-C, a killed process, a reboot) and started again grades only what is not
graded yet, or was submitted again since; `--force` grades everything again.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from collections import deque

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"
GRADED = ".graded"   # in the course root: one note per graded submission


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
    """(assignment, student) of every notebook in submitted/."""
    return sorted({(p.parent.name, p.parent.parent.name)
                   for p in (course_root / "submitted").glob("*/*/*.ipynb")})


def _digest(course_root: Path, assignment: str, student: str) -> str:
    """What a submission was graded from: its files' names and bytes."""
    folder = Path(course_root) / "submitted" / student / assignment
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _note(course_root: Path, assignment: str, student: str) -> Path:
    return Path(course_root) / GRADED / student / assignment


def pending(course_root: Path, todo: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The submissions of `todo` not graded yet, or changed since they were."""
    return [(a, s) for a, s in todo if not _note(course_root, a, s).is_file()
            or _note(course_root, a, s).read_text() != _digest(course_root, a, s)]


def autograde(course_root: Path, todo: list[tuple[str, str]], jobs: int, *extra: str,
              progress=sys.stderr) -> dict[tuple[str, str], float]:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (autograder/grade_worker.py; each submission in its own sandboxed kernel,
    all sharing the gradebook, whose db_url waits for its lock). `extra`: nbgrader
    settings such as "--Execute.timeout=30". Notes each submission graded (`pending`
    then leaves it out). Returns seconds per submission; raises SystemExit naming each
    submission nbgrader could not grade, or saying how far a stopped run got."""
    add_students(course_root, [student for _, student in todo])
    queue = ByDrop(todo)
    seconds, failed, lock, start = {}, [], threading.Lock(), time.perf_counter()
    workers = []

    def work():
        worker = subprocess.Popen([sys.executable, "-m", "autograder.grade_worker", str(course_root), *extra],
                                  cwd=course_root, env=_nbgrader_env(), text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        workers.append(worker)
        item = None
        try:
            while True:
                item = queue.take(item[0] if item else None)
                if item is None:
                    return
                began = time.perf_counter()
                digest = _digest(course_root, *item)
                worker.stdin.write(json.dumps(item) + "\n")
                worker.stdin.flush()
                line = worker.stdout.readline()
                result = json.loads(line) if line else {"success": False, "error": "the worker died"}
                with lock:
                    seconds[item] = time.perf_counter() - began
                    if result["success"]:
                        note = _note(course_root, *item)
                        note.parent.mkdir(parents=True, exist_ok=True)
                        note.write_text(digest)
                    else:
                        failed.append(f"{item[1]}/{item[0]}: {result['error']}")
                    _progress(progress, len(seconds), len(todo), time.perf_counter() - start, item,
                              ok=result["success"])
        except (BrokenPipeError, ValueError):   # stopped: the worker was ended under us
            return
        finally:
            try:
                worker.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            worker.wait()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(jobs, len(todo))))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        _stop(queue, workers)
        raise SystemExit(f"stopped: {len(seconds) - len(failed)} of {len(todo)} graded and kept; "
                         "run it again to grade the rest"
                         + "".join(f"\n  not graded: {f.split(': ')[0]}" for f in failed)) from None
    if failed:
        raise SystemExit("nbgrader could not grade:\n" + "\n".join(failed))
    return seconds


class ByDrop:
    """The submissions left, drop by drop. A worker keeps to one drop while it has
    submissions: its kernel host ran that drop's opening cells (autograder/warm_start.py),
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
    import signal

    from autograder import sandbox

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
    line = (f"[{bar}] {done}/{total} done, {rate:.1f}/min, {_clock(left)} left "
            f"({item[1]}/{item[0]}{'' if ok else ': not graded'})")
    if stream.isatty():
        stream.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
    else:
        stream.write(line + "\n")
    stream.flush()


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def grade_all(course_root: Path, jobs: int = 2, force: bool = False, progress=sys.stderr) -> list[str]:
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
    if left:
        autograde(course_root, left, jobs, progress=progress)
    for name in names:
        nbgrader(course_root, "generate_feedback", name, "--force")
    nbgrader(course_root, "export", "--to=grades.csv")
    return names


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
    names = grade_all(ROOT, args.jobs, force=args.force)
    print(f"graded {', '.join(names)}: scores in grades.csv, feedback in feedback/")
    print((ROOT / "grades.csv").read_text())


if __name__ == "__main__":
    main()
