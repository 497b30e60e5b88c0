"""What has been graded: one note per submission in .graded/, so that a stopped run resumes."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from autograder import one_notebook

GRADED = ".graded"   # in the course root: one note per graded submission
LOGS = ".logs"      # in GRADED: each worker's log, and one per submission that could not be graded


def refused(course_root: Path, assignment: str, student: str) -> str | None:
    """Why submitted/<student>/<assignment>/ is not graded (a link, a device, a folder or a
    file other than the notebook in it), or None: checked before anything runs or is copied."""
    if not (one_notebook.NAME.fullmatch(student) and one_notebook.NAME.fullmatch(assignment)):
        return f"the folder names {student!r}/{assignment!r} are not a student id and a drop"
    return one_notebook.refusal(Path(course_root) / "submitted" / student / assignment,
                                one_notebook.notebooks_of(course_root, assignment))


def submission_digest(course_root: Path, assignment: str, student: str) -> str:
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


def note_path(course_root: Path, assignment: str, student: str) -> Path:
    return Path(course_root) / GRADED / student / assignment


def pending(course_root: Path, todo: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The submissions of `todo` not graded yet, changed since they were, or whose
    autograded notebook is gone (autograded/ deleted by hand, say)."""
    return [(a, s) for a, s in todo if refused(course_root, a, s) or not note_path(course_root, a, s).is_file()
            or note_path(course_root, a, s).read_text() != submission_digest(course_root, a, s)
            or autograded_missing(course_root, a, s)]


def autograded_missing(course_root: Path, assignment: str, student: str) -> bool:
    """Whether a notebook of the assignment that the student submitted has no autograded copy."""
    course_root = Path(course_root)
    theirs = {p.name for p in (course_root / "submitted" / student / assignment).glob("*.ipynb")}
    ours = {p.name for p in (course_root / "source" / assignment).glob("*.ipynb")} or theirs
    return any(not (course_root / "autograded" / student / assignment / name).is_file()
               for name in theirs & ours)


def forget(course_root: Path, assignment: str, student: str) -> None:
    """A submission that could not be graded: nothing of an earlier grading stays to be taken
    for this one (its autograded notebook, its feedback page, which `release_feedback` would
    hand out, and its note, so that the next run grades it again). submitted/ is kept."""
    course_root = Path(course_root)
    note_path(course_root, assignment, student).unlink(missing_ok=True)
    for folder in ("autograded", "feedback"):
        shutil.rmtree(course_root / folder / student / assignment, ignore_errors=True)
