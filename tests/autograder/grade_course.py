"""Shared by the tests of `make grade` (autograder/apps/grade/): the lightest drop to grade,
copied with the course's nbgrader_config.py into a folder of its own. (Drop 1 without the demo
cells that launch ranks: grading_harness.without_rank_demos.)"""
import shutil
from pathlib import Path

from grading_harness import RANK_DEMOS

from autograder.course import ROOT

DROP = RANK_DEMOS   # the lightest drop to grade: drop 1


def one_drop_course(course: Path) -> Path:
    """`course` holding DROP's source folder and nbgrader_config.py, nothing submitted yet."""
    shutil.copytree(ROOT / "source" / DROP, course / "source" / DROP)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    return course
