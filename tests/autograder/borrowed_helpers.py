"""Shared by the tests of autograder/judging/borrowed.py: the drops, small notebooks built
cell by cell, one exercise that may not call plan_buckets, and a folder short enough for a
Unix socket."""
import tempfile
from contextlib import contextmanager
from pathlib import Path

import nbformat
from grading_harness import drops

from autograder import withheld
from autograder.course import grading_file

DROPS = [d.name for d in drops()]
PATH = "threeaxes.data_parallel.buckets:plan_buckets"


def exercises(drop):
    return withheld.load_exercises(grading_file(drop))


def exercise(answer, test):
    """An exercise graded by `test` whose answer may not call plan_buckets."""
    return withheld.Exercise(answer, (test,), ("threeaxes.data_parallel.plan_buckets",),
                             "plans the buckets", "plain Python")


def code_cell(source, id=None, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if id:
        cell.id = id
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": not nbgrader.get("solution"),
                                     "points": 1, "task": False, **nbgrader}
    return cell


def make_notebook(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


@contextmanager
def short_folder():
    """A folder with a short path: a Unix socket's path may not pass 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="oracle-") as folder:
        yield Path(folder)
