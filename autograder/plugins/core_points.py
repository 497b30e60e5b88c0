"""A drop's grade and its extra credit, side by side in grades.csv.

Each drop's core, what a student reaches in the drop's listed minutes, carries the drop's
grade; the graded cells of its optional "Going deeper" sections are extra credit
(`autograder/drop_minutes.py`, `grade_ids`). nbgrader's export counts every graded cell in
`raw_score`, `score` and `max_score`; `add_columns` keeps those as nbgrader wrote them and
adds three columns to each row:

    core_score     the points of the core's graded cells (the drop's grade)
    core_max       what the core's graded cells can give
    extra_credit   the points of the optional sections' graded cells

A written answer the instructor has not graded yet counts as 0 in both, as in nbgrader's.
"""
from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import drop_minutes
from threeaxes.course import COURSE_MAP

if TYPE_CHECKING:
    from nbgrader.api import Gradebook

COLUMNS = ("core_score", "core_max", "extra_credit")


def add_columns(csv_path: Path, gradebook_url: str, course_id: str | None = None) -> None:
    """Rewrite `csv_path` (nbgrader's grades.csv) with COLUMNS added to every row."""
    from nbgrader.api import Gradebook, MissingEntry

    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        fields = [c for c in reader.fieldnames or [] if c not in COLUMNS]
        rows = list(reader)
    split: dict[str, tuple[set, set] | None] = {}
    with Gradebook(gradebook_url, *([course_id] if course_id else [])) as gb:
        for row in rows:
            assignment, student = row["assignment"], row["student_id"]
            if assignment not in split:
                split[assignment] = _split_of(assignment)
            parts = split[assignment]
            if parts is None:   # not one of the course's drops: all of it is the grade
                row.update(core_score=row["raw_score"], core_max=row["max_score"], extra_credit="0")
                continue
            core, extra = parts
            try:
                grades = [g for nb in gb.find_submission(assignment, student).notebooks for g in nb.grades]
            except MissingEntry:   # a student with no submission of this drop: nothing earned
                grades = []
            row["core_score"] = _points(g.score for g in grades if g.name in core)
            row["core_max"] = _points(gb.find_grade_cell(name, nb.name, assignment).max_score
                                      for nb in gb.find_assignment(assignment).notebooks
                                      for name in core if _has_cell(gb, name, nb.name, assignment))
            row["extra_credit"] = _points(g.score for g in grades if g.name in extra)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields + list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)


def _split_of(assignment: str) -> tuple[set, set] | None:
    """(core grade ids, extra-credit grade ids) of a drop; None for an assignment not of the course."""
    numbers = [d.number for d in COURSE_MAP if d.folder == assignment]
    if not numbers:
        return None
    ids = drop_minutes.grade_ids(numbers[0])
    return set(ids["core"]), set(ids["extra"])


def _has_cell(gb: Gradebook, name: str, notebook: str, assignment: str) -> bool:
    from nbgrader.api import MissingEntry

    try:
        gb.find_grade_cell(name, notebook, assignment)
    except MissingEntry:
        return False
    return True


def _points(values: Iterable[float | None]) -> str:
    return f"{sum(v or 0 for v in values):g}"
