"""autograder/course.py is the one place that knows where the course's files are: its answers
agree with the course map, and no module of autograder/ (bar those still to switch) works
the repository's root out for itself."""
import re
from pathlib import Path

import pytest

from autograder import course
from threeaxes.course import COURSE_MAP

# Modules that still compute the root from their own file: each is to import it from
# autograder.course; a module not listed here that does it fails the last test.
NOT_YET_SWITCHED = {"autograder/runtime/oracle_worker.py"}   # it confines itself before importing the course
OWN_ROOT = re.compile(r"Path\(__file__\)\.resolve\(\)\.(parent\.parent|parents\[\d\])")


def test_the_drops_are_the_course_maps():
    written = [d.folder for d in COURSE_MAP if d.folder]
    assert course.drops() == sorted(written)
    assert course.graded_drops() == sorted(written), "every drop has its grading.json"


@pytest.mark.parametrize("drop", course.drops())
def test_each_drop_has_its_notebook_on_both_sides(drop):
    for side in ("source", "release"):
        path = course.notebook(drop, of=side)
        assert path == course.ROOT / side / drop / f"{drop}.ipynb"
        assert path.is_file() or side == "release", path     # release/ may be mid-regeneration


def test_a_course_root_elsewhere_has_the_same_layout(tmp_path):
    assert course.grading_file("drop01-x", tmp_path) == tmp_path / "source" / "drop01-x" / "grading.json"
    assert course.notebook_in(tmp_path / "drop01-x") == tmp_path / "drop01-x" / "drop01-x.ipynb"
    graded = course.students("drop01-x", "alice", tmp_path, of="autograded")
    assert graded == tmp_path / "autograded" / "alice" / "drop01-x"
    assert course.drops(tmp_path) == []
    (tmp_path / "source" / "drop02-y").mkdir(parents=True)
    (tmp_path / "source" / ".ipynb_checkpoints").mkdir()
    assert course.drops(tmp_path) == ["drop02-y"]


def test_wrong_names_are_refused_saying_what_to_give():
    with pytest.raises(ValueError, match="choose one of"):
        course.side("sources")
    with pytest.raises(ValueError, match="holds no student's folders"):
        course.students("drop01-x", "alice", of="release")
    with pytest.raises(LookupError, match="names 0 drops"):
        course.drop_named("drop99")
    assert course.drop_named("drop06") == next(d.folder for d in COURSE_MAP if d.number == 6)


def test_no_other_module_works_out_the_root_for_itself():
    found = {str(p.relative_to(course.ROOT)) for p in (course.ROOT / "autograder").rglob("*.py")
             if OWN_ROOT.search(p.read_text())}
    assert found - NOT_YET_SWITCHED == {"autograder/course.py"}, (
        "import ROOT (and the other paths) from autograder.course instead")
    assert Path(course.__file__).resolve().parent.parent == course.ROOT
