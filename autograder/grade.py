"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde, by JOBS worker processes (grade_worker.py):
                       the student's cells in a sandboxed kernel, the test cells
                       (hidden tests put back) judged in the grader (autograder/execute.py)
      -> feedback/     nbgrader generate_feedback: HTML per student, hidden tests removed
      -> grades.csv    nbgrader export

`--demo` first copies the sample submissions in autograder/samples/ into
submitted/, so the whole path can be tried on a fresh clone. `--jobs N` (the
Makefile's JOBS) grades N submissions at once; a progress line counts them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"


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


def submissions(course_root: Path) -> list[tuple[str, str]]:
    """(assignment, student) of every notebook in submitted/."""
    return sorted({(p.parent.name, p.parent.parent.name)
                   for p in (course_root / "submitted").glob("*/*/*.ipynb")})


def autograde(course_root: Path, todo: list[tuple[str, str]], jobs: int, *extra: str,
              progress=sys.stderr) -> dict[tuple[str, str], float]:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (autograder/grade_worker.py; each submission in its own sandboxed kernel,
    all sharing the gradebook, whose db_url waits for its lock). `extra`: nbgrader
    settings such as "--Execute.timeout=30". Returns seconds per submission; raises
    SystemExit naming each submission nbgrader could not grade."""
    queue = Queue()
    for item in todo:
        queue.put(item)
    seconds, failed, lock, start = {}, [], threading.Lock(), time.perf_counter()

    def work():
        worker = subprocess.Popen([sys.executable, "-m", "autograder.grade_worker", str(course_root), *extra],
                                  cwd=course_root, env=_nbgrader_env(), text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    item = queue.get_nowait()
                except Empty:
                    return
                began = time.perf_counter()
                worker.stdin.write(json.dumps(item) + "\n")
                worker.stdin.flush()
                line = worker.stdout.readline()
                result = json.loads(line) if line else {"success": False, "error": "the worker died"}
                with lock:
                    seconds[item] = time.perf_counter() - began
                    if not result["success"]:
                        failed.append(f"{item[1]}/{item[0]}: {result['error']}")
                    _progress(progress, len(seconds), len(todo), time.perf_counter() - start, item)
        finally:
            worker.stdin.close()
            worker.wait()

    threads = [threading.Thread(target=work) for _ in range(max(1, min(jobs, len(todo))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit("nbgrader could not grade:\n" + "\n".join(failed))
    return seconds


def _progress(stream, done: int, total: int, elapsed: float, item) -> None:
    if stream is None:
        return
    width = 30
    bar = "#" * round(width * done / total) + "." * (width - round(width * done / total))
    line = f"[{bar}] {done}/{total} graded, {elapsed:.0f} s ({item[1]}/{item[0]})"
    if stream.isatty():
        stream.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
    else:
        stream.write(line + "\n")
    stream.flush()


def grade_all(course_root: Path, jobs: int = 2) -> list[str]:
    todo = submissions(course_root)
    if not todo:
        raise SystemExit("submitted/ holds no notebooks. Collect them first "
                         "(submitted/<student>/<assignment>/<assignment>.ipynb), or run `make grade-demo`.")
    names = sorted({assignment for assignment, _ in todo})
    register_assignments(course_root, names)
    autograde(course_root, todo, jobs)
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
    args = parser.parse_args(argv)
    if args.demo:
        copy_samples(ROOT)
    names = grade_all(ROOT, args.jobs)
    print(f"graded {', '.join(names)}: scores in grades.csv, feedback in feedback/")
    print((ROOT / "grades.csv").read_text())


if __name__ == "__main__":
    main()
