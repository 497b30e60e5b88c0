"""The student's progress through the two weeks, kept on their own machine."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threeaxes.course import COURSE_MAP, course_map_markdown, drop
from threeaxes.sections import core_code_answers

RECORD = ".progress.json"
ANSWERED = "answered"          # a form-only check passed: the value is graded with the notebook
WORK_MARK = ".copied.json"     # autograder/apps/workspace.py's record of the files it copied


def work_folder(start: Path | None = None) -> Path | None:
    """The student's work folder: the nearest folder above `start` (the kernel's working
    directory) holding the copy record `make lab` writes; None outside one."""
    here = Path(start or os.getcwd()).resolve()
    return next((p for p in (here, *here.parents) if (p / WORK_MARK).is_file()), None)


def read(work: Path | None = None) -> dict:
    """{drop: {answer: True, False or ANSWERED}}, as the latest checks left it; empty where there is none."""
    work = work or work_folder()
    try:
        return json.loads((work / RECORD).read_text()) if work else {}
    except (OSError, ValueError):
        return {}


def record(drop: str, answer: str, *, passed: bool | str, work: Path | None = None) -> None:
    """Note the latest result of a visible check (`passed`: True, False, or ANSWERED for a
    check of the form alone); a record that cannot be written is skipped
    (progress is a convenience: it never stands in the way of a check).

    Each visible check that runs in a drop leaves one line of record: the answer it
    tried and whether it passed, or, for a check that sees only the answer's form (a sealed
    answer, a defence), that it was answered and is graded later (ANSWERED). The record is
    `.progress.json` at the top of the student's work folder (`work/`, which `make lab`
    makes; found by its `.copied.json`). Nothing is recorded elsewhere, nothing leaves the
    machine, and a notebook opened outside a work folder (the repository itself, Colab)
    records nothing.

    The start page reads the record: a drop's core is done when every code answer in
    its core (threeaxes/sections.py) has passed its latest visible check or, where that
    check sees only the form, has been answered; the map says which are graded later. The
    next drop is the first whose core is not done.

        progress.record("drop06", "tp_wire_bytes_answer", passed=True)    # what the checks call
        progress.course_map_with_progress()                               # the start page's map
    """
    work = work or work_folder()
    if work is None:
        return
    done = read(work)
    done.setdefault(drop, {})[answer] = ANSWERED if passed == ANSWERED else bool(passed)
    try:
        path = work / RECORD
        path.with_suffix(".tmp").write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")
        path.with_suffix(".tmp").replace(path)
    except OSError:
        pass


def drop_status(number: int, folder: str, work: Path, done: dict) -> dict:
    """One drop's row: its core's code answers, which of them passed and which were answered
    for a check that sees only their form (graded with the notebook)."""
    notebook = work / "release" / folder / f"{folder}.ipynb"
    try:
        answers = core_code_answers(json.loads(notebook.read_text()))
    except (OSError, ValueError, KeyError):
        answers = []
    tried = done.get(f"drop{number:02d}", {})

    def results(answer: str) -> list:     # the latest result of each check tried on it (each part it was judged in)
        return [ok for key, ok in tried.items() if key == answer or key.startswith(answer + "[")]
    passed = [a for a in answers if results(a) and all(ok is True for ok in results(a))]
    answered = [a for a in answers if a not in passed and results(a)
                and all(ok is True or ok == ANSWERED for ok in results(a))]
    return {"drop": number, "folder": folder, "minutes": drop(number).minutes, "answers": answers,
            "passed": passed, "answered": answered, "started": bool(tried),
            "done": bool(answers) and len(passed) + len(answered) == len(answers)}


def status(work: Path | None = None) -> list[dict]:
    """Every written drop's row, in the course's order."""
    work = work or work_folder()
    if work is None:
        return []
    done = read(work)
    return [drop_status(d.number, d.folder, work, done) for d in COURSE_MAP if d.folder]


def next_drop(rows: list[dict]) -> dict | None:
    return next((row for row in rows if not row["done"]), None)


def progress_text(row: dict) -> str:
    later = len(row.get("answered", []))
    if row["done"] and not later:
        return "core checks pass ✓"
    if row["done"]:
        return (f"core answered: {len(row['passed'])} of {len(row['answers'])} pass, "
                f"{later} graded when you submit")
    if row["started"]:
        return (f"{len(row['passed'])} of {len(row['answers'])} core answers pass"
                + (f", {later} answered (graded when you submit)" if later else ""))
    return ""


def course_map_with_progress(link_prefix: str = "../release/", work: Path | None = None) -> str:
    """The start page's course map (Markdown) with a "you" column from this machine's record,
    and which drop is next; outside a work folder, the map and how to get progress shown."""
    rows = status(work)
    if not rows:
        return (course_map_markdown(link_prefix) + "\n\nYour progress shows in this map when you work "
                "in the copy `make lab` makes (`work/`): each check that passes there is noted on your "
                "machine, nowhere else.")
    table = course_map_markdown(link_prefix, ("you", {row["drop"]: progress_text(row) for row in rows}))
    following = next_drop(rows)
    if following is None:
        if any(row["answered"] for row in rows):
            return table + ("\n\n**Every drop's core is answered**; the answers whose checks see only "
                            "their form are graded when you submit. The practice set is next.")
        return table + "\n\n**Every drop's core checks pass.** The practice set is next."
    title = drop(following["drop"]).title
    link = f"{link_prefix}{following['folder']}/{following['folder']}.ipynb"
    return table + (f"\n\n**Next: [drop {following['drop']}, {title}]({link})**, "
                    f"about {following['minutes']} minutes.")


class Checked(list):
    """The plain values a visible check returns, as a list that a notebook does not echo as
    `Out[n]` when the check is its cell's last line (the check has printed what it found)."""

    def _ipython_display_(self) -> None:
        pass


def recorded(check: Callable[..., Any] | None = None, *,
             form_only: bool | Callable[[str, str], bool] | None = None) -> Callable[..., Any]:
    """A visible check that also notes its result: `check(drop, answer, ...)` as before,
    its pass or failure recorded under the answer (and the part it judged, if any). A pass
    of a check that sees only the answer's form (`form_only` True, or a function of
    (drop, answer) that says so) is recorded as ANSWERED, never as passed: its value is
    graded later. A list
    the check returns comes back as `Checked`, which a notebook does not echo."""
    import functools

    if check is None:
        return functools.partial(recorded, form_only=form_only)

    @functools.wraps(check)
    def run(drop: str, answer: str, *args: Any, **kwargs: Any) -> Any:
        key = answer if kwargs.get("part") is None else f"{answer}[{kwargs['part']}]"
        try:
            result = check(drop, answer, *args, **kwargs)
        except AssertionError:
            record(drop, key, passed=False)
            raise
        only_form = form_only(drop, answer) if callable(form_only) else bool(form_only)
        record(drop, key, passed=ANSWERED if only_form else True)
        return Checked(result) if type(result) is list else result
    return run
