"""The course map in threeaxes/course.py: one record a drop, checked when made, and the
views older readers unpack (the practice notebook's DROPS, POINTS) agree with the records."""
import json
from pathlib import Path

import pytest

from threeaxes.course import COURSE_MAP, DROPS, PHASES, POINTS, Drop, drop, numbered

ROOT = Path(__file__).resolve().parents[2]


def make(**changed):
    fields = dict(number=3, phase=1, title="a title", folder="drop03-a-title", minutes=7, points=(2, 1))
    return Drop(**{**fields, **changed})


def test_a_well_formed_drop_is_made_and_shows_its_points():
    assert make().points_text == "2 + 1 extra credit"
    assert make(points=(2, 0)).points_text == "2"
    assert make(folder=None).folder is None          # a drop not written yet


@pytest.mark.parametrize("changed, says", [
    (dict(phase=len(PHASES) + 1), "is not one of PHASES"),
    (dict(folder="drop04-a-title"), "should start with 'drop03-'"),
    (dict(folder="drop3-a-title"), "should start with 'drop03-'"),
    (dict(minutes=0), "minutes must be positive"),
    (dict(points=(2, -1)), "two counts of 0 or more"),
    (dict(points=(2,)), "two counts of 0 or more"),
])
def test_a_malformed_drop_is_refused_saying_what_to_change(changed, says):
    with pytest.raises(ValueError, match=says):
        make(**changed)


def test_drops_out_of_order_or_with_a_gap_are_refused():
    one, three = make(number=1, folder="drop01-x"), make()
    with pytest.raises(ValueError, match=r"numbered \[1, 3\]; number them 1 to 2"):
        numbered((one, three))
    with pytest.raises(ValueError, match="in order"):
        numbered((make(number=2, folder="drop02-x"), one))
    assert numbered((one,)) == (one,)


def test_drop_looks_a_number_up_and_refuses_one_the_course_lacks():
    assert drop(1).folder == "drop01-three-kinds-of-parallel"
    assert drop(len(COURSE_MAP)) is COURSE_MAP[-1]
    for number in (0, len(COURSE_MAP) + 1):
        with pytest.raises(LookupError, match=f"drops 1 to {len(COURSE_MAP)}, not {number}"):
            drop(number)


def test_every_written_drop_has_its_folder_in_source():
    for d in COURSE_MAP:
        assert d.folder is None or (ROOT / "source" / d.folder).is_dir(), d


def test_the_practice_notebooks_drops_unpack_as_number_phase_title_folder():
    """notebooks/practice.ipynb unpacks DROPS into four names; the rows must keep that shape."""
    nb = json.loads((ROOT / "notebooks" / "practice.ipynb").read_text())
    assert any("for number, _, title, folder in DROPS" in "".join(c["source"]) for c in nb["cells"])
    assert len(DROPS) == len(COURSE_MAP)
    for number, phase, title, folder in DROPS:
        assert (phase, title, folder) == (drop(number).phase, drop(number).title, drop(number).folder)


def test_points_by_number_are_the_records():
    assert POINTS == {d.number: d.points for d in COURSE_MAP}
