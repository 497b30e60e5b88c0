"""A submission is one notebook: what may be in a submission's folder, read without following links.

    why = refusal(folder, notebooks)     # None, or why the folder is not graded
    data = read_regular(path)            # a regular file's bytes; OSError for a link or anything else

The rule (the drop's notebook(s), named as in source/<drop>/, and the two files nbgrader submit
writes beside them, NBGRADER_FILES; nothing else) is CONTRIBUTING.md's "A submission is its
notebook". Every check uses `lstat`: a link is looked at, never through, a folder that is a link
included.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from autograder import course

# what nbgrader submit writes beside the notebook, and collect copies: when it was handed in, and
# the secret release_feedback names the student's feedback folder by
NBGRADER_FILES = frozenset({"timestamp.txt", "submission_secret.txt"})
MAX_NOTEBOOK_BYTES = 64 << 20     # a notebook's file: the drops' solved sources are under 1 MiB
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")   # a student id or drop as a folder name


def notebooks_of(course_root: Path, drop: str) -> set[str]:
    """The notebook names the instructor's source/<drop>/ holds (regular files only);
    `<drop>.ipynb` where it holds none."""
    folder = course.folder(drop, course_root)
    try:
        names = {e.name for e in os.scandir(folder)
                 if e.name.endswith(".ipynb") and e.is_file(follow_symlinks=False)}
    except OSError:
        names = set()
    return names or {f"{drop}.ipynb"}


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a link"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def refusal(folder: Path, notebooks: set[str]) -> str | None:
    """Why `folder` is not a submission of one notebook (a sentence naming each thing in it
    that is not allowed, and what to do), or None when it holds the notebook(s) and at most
    nbgrader's own NBGRADER_FILES, each a regular file."""
    folder = Path(folder)
    try:
        mode = os.lstat(folder).st_mode
    except OSError as exc:
        return f"its folder cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(mode):
        return f"its folder {folder.name} is {_kind(mode)}, not a folder: refused unread"
    wrong, found = [], set()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        return f"its folder cannot be read ({exc.strerror})"
    for entry in entries:
        mode = entry.stat(follow_symlinks=False).st_mode
        if entry.name in notebooks | NBGRADER_FILES and stat.S_ISREG(mode):
            found.add(entry.name)
        elif entry.name in notebooks | NBGRADER_FILES:
            wrong.append(f"{entry.name} is {_kind(mode)}")
        elif stat.S_ISREG(mode):
            wrong.append(f"{entry.name} is a file other than the notebook")
        else:
            wrong.append(f"{entry.name} is {_kind(mode)}")
    if wrong:
        return ("a submission is the notebook alone, as a regular file, and this one holds more: "
                + "; ".join(wrong[:10]) + (f" (and {len(wrong) - 10} more)" if len(wrong) > 10 else "")
                + f". Not graded: ask the student to submit {', '.join(sorted(notebooks))} alone")
    if not found & notebooks:
        return f"it holds no notebook named {', '.join(sorted(notebooks))}"
    return None


def read_regular(path: Path, cap: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of `path`, opened without following a link (O_NOFOLLOW) and checked to be a
    regular file once open: a link swapped in after a check is refused, not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > cap:
            raise OSError(f"{path} is over {cap >> 20} MiB")
        chunks, size = [], 0
        while size <= cap:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def submission_folders(submitted: Path) -> list[tuple[str, str]]:
    """(assignment, student) of every submitted/<student>/<assignment>/ entry, without following
    a link at either level: a linked student or assignment folder is listed (and then refused by
    `refusal`), never walked into."""
    found = []
    for student in _entries(Path(submitted)):
        if not stat.S_ISDIR(os.lstat(student).st_mode):
            continue
        for assignment in _entries(student):
            found.append((assignment.name, student.name))
    return sorted(found)


def _entries(folder: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(folder) if not e.name.startswith(".")]
    except OSError:
        return []
