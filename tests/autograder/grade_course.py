"""Shared by the tests of `make grade` (autograder/apps/grade/): the lightest drop to grade,
copied with the course's nbgrader_config.py into a folder of its own, and a notebook without
the demo cells that launch ranks."""
import copy
import shutil
from pathlib import Path

from autograder.course import ROOT

DROP = "drop01-three-kinds-of-parallel"   # the lightest drop to grade


def one_drop_course(course: Path) -> Path:
    """`course` holding DROP's source folder and nbgrader_config.py, nothing submitted yet."""
    shutil.copytree(ROOT / "source" / DROP, course / "source" / DROP)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    return course


def without_rank_demos(nb):
    """A copy of drop 1's notebook `nb` without the cells after its first graded one that only show
    ranks at work (its 4-rank launches, and the table of what they sent): no test cell reads them,
    so a student who leaves them out scores what one who runs them does, for less CPU."""
    nb = copy.deepcopy(nb)
    first = next(k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader"))
    nb.cells = [c for k, c in enumerate(nb.cells)
                if k < first or c.metadata.get("nbgrader") or "world_size" not in c.source and "runs" not in c.source]
    return nb
