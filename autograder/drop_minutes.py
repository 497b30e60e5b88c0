"""How long each drop's core takes a student, against the minutes the course map promises.

    python -m autograder.drop_minutes            # exit 1 if a core is over its minutes
    python -m autograder.drop_minutes --cells    # also the minutes of every cell of the core

The project's copy of the course's reading-time model (`../shared/tools/drop_minutes.py`), so
that the suite needs nothing outside the repository (`tests/autograder/test_drop_minutes.py`). One model
for every drop, a floor (students read technical text more slowly):
  - prose: 200 words a minute (markdown cells; the install cell is left out)
  - a code cell a student runs: 15 s to run it and look at its output, plus 2 s a line of code
  - a check cell (nbgrader grade): 10 s
  - a code answer: 1 min, plus 30 s a line of the solution in source/ (comments and blank lines left out)
  - a written answer: 3 min
The core is the drop's own notebook, release/<drop>/<drop>.ipynb, less its optional sections.
A markdown heading cell tagged "deeper" (cell metadata "tags") opens an optional section, which
runs to the next heading of the same or a higher level that is not tagged; a cell of any kind
tagged "deeper" is optional on its own. The core must hold at least one graded check, and every
optional section must open collapsed in JupyterLab (the heading cell's metadata
"jp-MarkdownHeadingCollapsed": true).

One difference from the shared tool: the install cell is recognised by its id or its text
(`threeaxes.course.INSTALL_CELL`), not by being first, so a drop that opens on its title
with the install cell under it is measured the same way.

Points follow the same split: the graded cells of the core (test cells and written answers)
are the drop's grade, those of the optional sections extra credit (`points`).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from autograder import course
from threeaxes.course import COURSE_MAP, drop
from threeaxes.sections import split

ROOT = course.ROOT


def solution_lines(source_nb: dict, grade_id: str) -> int:
    for cell in source_nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            text = "".join(cell["source"])
            m = re.search(r"### BEGIN SOLUTION(.*?)### END SOLUTION", text, re.S)
            body = m.group(1) if m else text
            return sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("#"))
    return 3


def cell_minutes(cell: dict, source_nb: dict) -> float:
    text = "".join(cell["source"])
    grading = cell.get("metadata", {}).get("nbgrader", {})
    if grading.get("solution") and cell["cell_type"] == "markdown":
        return 3.0
    if grading.get("solution"):
        return 1.0 + 0.5 * solution_lines(source_nb, grading.get("grade_id"))
    if grading.get("grade"):
        return 10 / 60
    if cell["cell_type"] == "markdown":
        return len(text.split()) / 200
    lines = sum(1 for line in text.splitlines() if line.strip())
    return (15 + 2 * lines) / 60


def folder(number: int) -> str:
    name = drop(number).folder
    if name is None:
        raise LookupError(f"drop {number} is not written yet: give its folder in threeaxes.course.COURSE_MAP")
    return name


def measure(number: int, root: Path = ROOT) -> dict:
    """One drop: its core's and its depth's minutes, the core's graded checks, the optional
    sections that open uncollapsed, and the points of each part (grade and extra credit)."""
    name = folder(number)
    released = json.loads(course.notebook(name, root, of="release").read_text())
    source = json.loads(course.notebook(name, root).read_text())
    core, depth, uncollapsed = split(released)
    folded_in_jupyterlab = [k for k, _ in split(released, anywhere=True)[1]]

    def graded(cells: list[tuple[int, dict]]) -> list[dict]:
        return [c for _, c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]

    return {"drop": number, "folder": name, "promised": drop(number).minutes,
            "core_minutes": sum(cell_minutes(c, source) for _, c in core),
            "depth_minutes": sum(cell_minutes(c, source) for _, c in depth),
            "per_cell": [(k, cell_minutes(c, source)) for k, c in core],
            "graded_checks": len(graded(core)), "uncollapsed": uncollapsed,
            "same_in_jupyterlab": folded_in_jupyterlab == [k for k, _ in depth],
            "points": {"core": sum(c["metadata"]["nbgrader"].get("points", 0) for c in graded(core)),
                       "extra": sum(c["metadata"]["nbgrader"].get("points", 0) for c in graded(depth))}}


def grade_ids(number: int, root: Path = ROOT) -> dict:
    """{"core": [...], "extra": [...]}: the grade ids of the drop's graded cells (test cells and
    written answers), those of its core (the drop's grade) and of its optional sections (extra
    credit), for whatever presents the points (grades.csv, the class report)."""
    name = folder(number)
    core, depth, _ = split(json.loads(course.notebook(name, root).read_text()))

    def ids(cells: list[tuple[int, dict]]) -> list[str]:
        return [c["metadata"]["nbgrader"]["grade_id"] for _, c in cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade")]

    return {"core": ids(core), "extra": ids(depth)}


def problems(m: dict) -> list[str]:
    found = []
    if m["core_minutes"] > m["promised"]:
        found.append(f"drop {m['drop']}: core {m['core_minutes']:.1f} min, promised {m['promised']}")
    if not m["graded_checks"]:
        found.append(f"drop {m['drop']}: no graded check in the core")
    if m["uncollapsed"]:
        found.append(f"drop {m['drop']}: {m['uncollapsed']} optional section(s) not collapsed")
    if not m["same_in_jupyterlab"]:
        found.append(f"drop {m['drop']}: JupyterLab folds other cells than the model counts as optional "
                     "(a heading in the middle of a cell ends a section there: lower its level)")
    return found


def main(argv: list[str]) -> int:
    found, core_total, depth_total = [], 0.0, 0.0
    for d in COURSE_MAP:
        number = d.number
        m = measure(number)
        core_total += m["core_minutes"]
        depth_total += m["depth_minutes"]
        verdict = "ok" if m["core_minutes"] <= m["promised"] else "OVER"
        print(f"drop {number:2d}  core {m['core_minutes']:5.1f} min  promised {m['promised']}  {verdict}  "
              f"depth {m['depth_minutes']:5.1f} min  points {m['points']['core']} + "
              f"{m['points']['extra']} extra  ({m['folder']})")
        if "--cells" in argv:
            for k, minutes in m["per_cell"]:
                print(f"          cell {k:3d}: {minutes:4.1f} min")
        found += problems(m)
    print(f"all cores: {core_total:.0f} min (promised {sum(d.minutes for d in COURSE_MAP)}); "
          f"all optional sections: {depth_total:.0f} min")
    for p in found:
        print(" -", p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
