"""Why a submission or a feedback page was not graded, in the words of the logs: the cause
and the lines leading to it, all of it kept in .graded/.logs/."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TypedDict

from autograder.apps.grade.notes import GRADED, LOGS

TAIL_LINES = 15     # lines of a failure's log shown with its cause


class WorkerAnswer(TypedDict, total=False):
    """A grading worker's answer for one submission (autograder/apps/grade_worker.py), or the pool's
    own in its place where the worker died (`died`)."""
    success: bool
    error: str
    log: str
    refused: str
    phases: dict[str, float]
    died: bool


def since(path: Path, mark: int) -> str:
    with open(path, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace")


def tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return kept[-lines:]


# the last line of a Python traceback (nbgrader's log indents a logged traceback's lines)
EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")


def leading_to(cause: str, text: str, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of `text` up to the last one that says `cause` (the traceback
    that ends in it, not nbgrader's wrapper after it); its last lines where none does."""
    kept = tail(text, 100_000)
    at = max((k for k, line in enumerate(kept) if cause and cause.strip() in line), default=len(kept) - 1)
    return kept[max(0, at + 1 - lines):at + 1]


def cause(text: str) -> str:
    """The error a failed autograde ended with: the last exception line of a traceback in
    nbgrader's log that is not nbgrader's own wrapper ("Please see the above traceback"),
    after what nbgrader warned of a notebook's grade ids (a grade id used twice makes
    nbgrader strip that cell's metadata, and its error then speaks of an old schema)."""
    lines = text.splitlines()
    found = [m.group(0).strip() for m in map(EXCEPTION_LINE.match, lines) if m]
    own = [line for line in found if "NbGraderException" not in line.split(":", 1)[0]]
    useful = [line for line in tail(text, 1000) if "Please see the" not in line
              and "There was an error processing" not in line]
    cause = (own or found or useful or ["no cause was logged"])[-1].strip()
    warned = [line.split("] ", 1)[-1].strip() for line in lines if "exists multiple times" in line]
    return "; ".join([*dict.fromkeys(warned), cause])


def failure(course_root: Path, item: tuple[str, str], result: WorkerAnswer, worker_log: Path, mark: int) -> str:
    """The message naming a submission that could not be graded, and the log file it names:
    what nbgrader logged, its traceback, and what the worker logged meanwhile."""
    assignment, student = item
    worker_said = since(worker_log, mark)
    nbgrader_said = "\n".join(part for part in (result.get("log", ""), result.get("error", "")) if part)
    path = course_root / GRADED / LOGS / f"{student}+{assignment}.log"
    path.write_text(f"{student}/{assignment} could not be graded ({time.strftime('%Y-%m-%d %H:%M:%S')})\n\n"
                    f"== nbgrader's log and error\n{nbgrader_said or '(nothing)'}\n\n"
                    f"== the worker's log ({worker_log}) meanwhile\n{worker_said or '(nothing)'}\n")
    why = result["error"] if result.get("died") else cause(nbgrader_said or worker_said)
    shown = leading_to(why.split("; ")[-1], worker_said) or leading_to(why, nbgrader_said)
    where = path.relative_to(course_root) if path.is_relative_to(course_root) else path
    return (f"{student}/{assignment}: {why}\n"
            + "".join(f"    | {line}\n" for line in shown)
            + f"    (all of it: {where})")


FEEDBACK_FAILED = re.compile(r"There was an error processing assignment: (?P<path>.*)$", re.M)


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
        problems.append(f"{student}/{name}: no feedback page: {cause(segment)} (all of it: {where})")
    if not found:
        problems.append(f"*/{name}: nbgrader generate_feedback failed: {cause(said)}\n"
                        + "".join(f"    | {line}\n" for line in tail(said))
                        + f"    (all of it: {where})")
    return problems


def _student_in(path: str, assignment: str) -> str | None:
    """The student of nbgrader's "autograded/<student>/<assignment>" path in a log line."""
    parts = Path(path.strip()).parts
    return parts[-2] if len(parts) >= 2 and parts[-1] == assignment else None
