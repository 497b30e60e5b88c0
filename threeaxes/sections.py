"""A drop's core and its "Going deeper" sections, read from the notebook's cells.

A markdown heading cell tagged "deeper" (cell metadata "tags") opens an optional
section, which runs to the next heading of the same or a higher level that is not
tagged; a cell of any kind tagged "deeper" is optional on its own. The rest is the
core: what a student reads in the drop's minutes, and whose checks make the grade.
The reading-time model (autograder/drop_minutes.py) and the start page's progress
(threeaxes/progress.py) both read a notebook this way.
"""
from __future__ import annotations

import re

from threeaxes.course import is_install_cell


def heading_level(text: str, anywhere: bool = False) -> int | None:
    """The level of the heading the cell opens with; with `anywhere`, of its first heading
    wherever it stands, as JupyterLab reads a cell when it folds sections."""
    m = re.search(r"^\s*(#{1,6})\s", text, re.M) if anywhere else re.match(r"\s*(#{1,6})\s", text)
    return len(m.group(1)) if m else None


def split(notebook: dict, anywhere: bool = False) -> tuple[list, list, int]:
    """(core, depth, uncollapsed): the (index, cell) pairs of the core and of the optional
    sections (the install cell in neither), and how many optional sections open uncollapsed.
    `anywhere`: take a cell's first heading wherever it stands in the cell, as JupyterLab does
    (a cell that opens with prose and has a heading further down is a heading cell there)."""
    core, depth, optional_level, uncollapsed = [], [], None, 0
    for k, cell in enumerate(notebook["cells"]):
        meta = cell.get("metadata", {})
        tags = meta.get("tags", [])
        level = heading_level("".join(cell["source"]), anywhere) if cell["cell_type"] == "markdown" else None
        if level is not None:
            if "deeper" in tags:
                if optional_level is None or level <= optional_level:
                    optional_level = level
                    uncollapsed += not meta.get("jp-MarkdownHeadingCollapsed")
            elif optional_level is not None and level <= optional_level:
                optional_level = None
        if is_install_cell(cell):
            continue
        (core if optional_level is None and "deeper" not in tags else depth).append((k, cell))
    return core, depth, uncollapsed


def core_code_answers(notebook: dict) -> list[str]:
    """The grade ids of the code answers in the core: what its visible checks try."""
    return [c["metadata"]["nbgrader"]["grade_id"] for _, c in split(notebook)[0]
            if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]
