"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde, one process per submission, JOBS at once:
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
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

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
    def prepend(var, path):
        return f"{path}{os.pathsep}{os.environ[var]}" if os.environ.get(var) else str(path)
    env = {**os.environ, "PATH": prepend("PATH", Path(sys.executable).parent),
           "PYTHONPATH": prepend("PYTHONPATH", ROOT), "THREEAXES_PRESTART": "0"}
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                          cwd=course_root, env=env, check=check, text=True, capture_output=not check)


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
    """`nbgrader autograde <assignment> --student <student>` for each submission, `jobs`
    at once (each its own process and sandboxed kernel; they share the gradebook, whose
    db_url waits for its lock). Returns seconds per submission; raises if any failed."""
    def one(item):
        assignment, student = item
        start = time.perf_counter()
        done = nbgrader(course_root, "autograde", assignment, f"--student={student}", "--force",
                        *extra, check=False)
        return item, time.perf_counter() - start, done
    seconds, failed, start = {}, [], time.perf_counter()
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for future in as_completed([pool.submit(one, item) for item in todo]):
            item, took, done = future.result()
            seconds[item] = took
            if done.returncode:
                failed.append(f"{item[1]}/{item[0]}: {done.stderr.strip()[-1500:]}")
            _progress(progress, len(seconds), len(todo), time.perf_counter() - start, item)
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
