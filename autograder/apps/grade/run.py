"""A class graded: autograde what is new, then feedback pages and grades.csv for everyone."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from autograder import course, one_notebook
from autograder.apps.grade.failures import cause, feedback_failures, tail
from autograder.apps.grade.nbgrader_cli import gradebook_url, nbgrader, register_assignments
from autograder.apps.grade.notes import forget, pending
from autograder.apps.grade.pool import Autograded, clock, grade_submissions
from autograder.plugins import core_points

SAMPLES = course.SAMPLES


def submissions(course_root: Path) -> list[tuple[str, str]]:
    """(assignment, student) of every folder submitted/<student>/<assignment>/, links not
    followed (autograder/one_notebook.py); one that is not a notebook alone is refused
    when it comes to be graded (`refused`), named with its cause."""
    return one_notebook.submission_folders(Path(course_root) / "submitted")


def autograde(course_root: Path, todo: list[tuple[str, str]], jobs: int, *extra: str,
              progress: TextIO | None = sys.stderr) -> dict[tuple[str, str], float]:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (see `grade_submissions`). Returns seconds per submission; raises SystemExit
    naming each submission that could not be graded, with its cause, or saying how far
    a stopped run got."""
    graded = grade_submissions(course_root, todo, jobs, *extra, progress=progress)
    if graded.failed:
        raise SystemExit(graded.failure_report())
    return graded.seconds


class NotAllGraded(SystemExit):
    """grade_all's end when some submissions could not be graded: feedback/ and grades.csv
    were written for every other one. `names`: the assignments graded; the message
    names each submission left out, with its cause and the log file that holds the rest."""

    def __init__(self, names: list[str], message: str):
        super().__init__(message)
        self.names = names


def grade_all(course_root: Path, jobs: int = 2, force: bool = False,
              progress: TextIO | None = sys.stderr) -> list[str]:
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
    said = said_step(progress, f"then the feedback pages of {len(names)} drop(s) for the whole class")
    problems += write_feedback(course_root, names, jobs)
    said = said_step(progress, "then grades.csv", said)
    exported = nbgrader(course_root, "export", "--to=grades.csv", check=False)
    if exported.returncode:
        problems.append("grades.csv could not be written: " + cause(exported.stderr) + "\n"
                        + "".join(f"    | {line}\n" for line in tail(exported.stderr)).rstrip())
    else:   # each drop's grade (its core) and extra credit (its optional sections) beside nbgrader's total
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(course_root)).load_config()
        core_points.add_columns(Path(course_root) / "grades.csv", gradebook_url(course_root, config))
    said_step(progress, "", said)
    if problems:
        raise NotAllGraded(names, "NOT GRADED (feedback/ and grades.csv hold everyone else):\n"
                           + "\n".join(problems))
    return names


def said_step(stream: TextIO | None, next_step: str,
              last: tuple[str, float] | None = None) -> tuple[str, float] | None:
    """After autograding: how long the step just done took, and what comes next (feedback
    pages and grades.csv take a while for a class: the bar's "left" counts autograding only)."""
    if stream is None:
        return None
    if last is not None:
        stream.write(f"  {last[0]}: done in {clock(time.perf_counter() - last[1])}\n")
    if next_step:
        stream.write(f"{next_step}...\n")
    stream.flush()
    return (next_step.removeprefix("then "), time.perf_counter()) if next_step else None


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


def copy_samples(course_root: Path) -> None:
    for nb in sorted(SAMPLES.glob("*/*/*.ipynb")):
        dest = course_root / "submitted" / nb.relative_to(SAMPLES)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, dest)
