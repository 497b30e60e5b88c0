"""grades.csv's split of a drop into its grade and extra credit finds the drop by its folder
in the course map (autograder/plugins/core_points.py); an assignment of no drop is all grade."""
import json

from autograder import course
from autograder.plugins.core_points import _split_of
from threeaxes.course import COURSE_MAP


def test_each_drops_folder_splits_into_its_core_and_extra_credit_grade_ids():
    for d in COURSE_MAP:
        assert d.folder is not None, d
        core, extra = _split_of(d.folder)
        cells = json.loads(course.notebook(d.folder).read_text())["cells"]
        graded = {c["metadata"]["nbgrader"]["grade_id"] for c in cells
                  if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        assert core and core | extra == graded and not core & extra, d.folder


def test_an_assignment_of_no_drop_is_not_split():
    assert _split_of("homework-1") is None
    assert _split_of("drop01") is None        # a prefix is not a folder
