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
    core: list[tuple[int, dict]] = []
    depth: list[tuple[int, dict]] = []
    optional_level: int | None = None
    uncollapsed = 0
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


def optional_headings(notebook: dict) -> list[dict]:
    """The heading cells tagged "deeper": each opens a section a student may skip."""
    return [c for c in notebook["cells"] if c["cell_type"] == "markdown"
            and "deeper" in c.get("metadata", {}).get("tags", [])
            and heading_level("".join(c["source"])) is not None]


def colab_folded(notebook: dict) -> list[str]:
    """The ids Colab should fold: those of the optional headings, in page order.

    Colab ignores JupyterLab's "jp-MarkdownHeadingCollapsed"; it folds the sections whose
    heading cell's id is listed in the notebook metadata colab.collapsed_sections."""
    ids = []
    for cell in optional_headings(notebook):
        if not cell.get("id"):
            first = "".join(cell["source"]).splitlines()[0]
            raise ValueError(f"the optional heading {first!r} has no cell id: save the notebook as "
                             "nbformat 4.5 (JupyterLab adds ids) so that Colab can fold it")
        ids.append(cell["id"])
    return ids


def fold_for_colab(notebook: dict) -> bool:
    """Write Colab's folding state from the "deeper" tags: the notebook's
    colab.collapsed_sections, and each optional heading's id again in its cell metadata
    (where Colab keeps ids for notebooks older than nbformat 4.5). True when it changed."""
    before = repr(notebook)
    folded = colab_folded(notebook)
    for cell in optional_headings(notebook):
        cell.setdefault("metadata", {})["id"] = cell["id"]
    if folded:
        notebook["metadata"].setdefault("colab", {})["collapsed_sections"] = folded
    elif "colab" in notebook["metadata"]:
        notebook["metadata"]["colab"].pop("collapsed_sections", None)
        if not notebook["metadata"]["colab"]:
            del notebook["metadata"]["colab"]
    return repr(notebook) != before


def main(argv: list[str] | None = None) -> int:
    """python -m threeaxes.sections NOTEBOOK...: fold every notebook's "Going deeper"
    sections for Colab too (rewrites the files that change, as the repository writes them)."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=(main.__doc__ or "").splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    for path in parser.parse_args(argv).notebooks:
        nb = json.loads(path.read_text())
        if fold_for_colab(nb):
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"folded for Colab: {path} ({len(colab_folded(nb))} sections)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
