"""`make grade` end to end on the sample submissions, in a temporary copy of the course."""
import csv
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import grade
from grading_harness import GRADING_FILE, revealed_hidden_tests

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_grade_all_autogrades_writes_feedback_and_exports_csv(tmp_path, monkeypatch):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "source", course / "source")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    monkeypatch.setattr(grade, "SAMPLES", ROOT / "autograder" / "samples")
    grade.copy_samples(course)
    names = grade.grade_all(course)
    assert names == ["drop01-three-kinds-of-parallel"]
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    # alice typed in the solutions (5 auto points) and a written answer still to be marked by hand;
    # bob forgot the fp32 master copy, which costs the 2 points of that one cell.
    assert float(rows["alice"]["raw_score"]) == 5.0
    assert float(rows["bob"]["raw_score"]) == 3.0
    source = nbformat.read(course / "source" / names[0] / f"{names[0]}.ipynb", as_version=4)
    for student in ("alice", "bob"):
        page = (course / "feedback" / student / names[0] / f"{names[0]}.html").read_text()
        assert "BEGIN HIDDEN TESTS" not in page
        assert not revealed_hidden_tests(page, source), "the feedback shows a hidden test"
    assert not list((course / "feedback").rglob(GRADING_FILE)), "the grading data reached the students"
    # started again, it grades only what is new: nothing; then bob's resubmission, and a
    # submission whose note a stopped run never wrote
    todo = grade.submissions(course)
    assert grade.pending(course, todo) == []
    bob = course / "submitted" / "bob" / names[0] / f"{names[0]}.ipynb"
    bob.write_text(bob.read_text() + "\n")      # submitted again
    (course / grade.GRADED / "alice" / names[0]).unlink()
    assert grade.pending(course, todo) == [(names[0], "alice"), (names[0], "bob")]


def test_progress_says_the_count_the_rate_and_the_time_left():
    import io

    out = io.StringIO()
    grade._progress(out, 10, 40, 120.0, ("drop01", "alice"))
    line = out.getvalue()
    # 10 in 2 minutes: 5.0 a minute; 30 left at that rate take 6 minutes
    assert "10/40 done, 5.0/min, 6:00 left (alice/drop01)" in line
    grade._progress(out, 11, 40, 120.0, ("drop01", "bob"), ok=False)
    assert out.getvalue().endswith("(bob/drop01: not graded)\n")


def test_grade_all_says_what_to_do_when_nothing_was_submitted(tmp_path):
    (tmp_path / "submitted").mkdir()
    with pytest.raises(SystemExit, match="make grade-demo"):
        grade.grade_all(tmp_path)


def test_grading_kernels_do_not_prestart_the_forkserver(tmp_path, monkeypatch):
    """Cells run back to back when grading: an early forkserver gains nothing there, and
    costs CPU in the drops that never launch ranks."""
    import subprocess

    seen = {}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: seen.update(kw["env"]))
    grade.nbgrader(tmp_path, "autograde", "*")
    assert seen["THREEAXES_PRESTART"] == "0"


def test_workers_keep_to_one_drop_and_share_only_the_last():
    """Each drop's opening cells run in a worker's kernel host (autograder/warm_start.py):
    three workers over four drops each take whole drops, in order, and join one only
    when every drop left is held; every submission is handed out once."""
    todo = [(drop, f"s{k}") for drop in ("d1", "d2", "d3", "d4") for k in range(4)]
    queue, holding, taken = grade.ByDrop(todo), [None] * 3, []
    while True:
        rounds = [queue.take(drop) for drop in holding]
        if not any(rounds):
            break
        holding = [item[0] if item else None for item in rounds]
        taken += [(w, item) for w, item in enumerate(rounds) if item]
    assert sorted(item for _, item in taken) == sorted(todo)
    workers_of = {d: {w for w, (drop, _) in taken if drop == d} for d in ("d1", "d2", "d3", "d4")}
    assert [len(workers_of[d]) for d in ("d1", "d2", "d3")] == [1, 1, 1]
    assert [sorted(workers_of[d]) for d in ("d1", "d2", "d3")] == [[0], [1], [2]]   # the first drops first
    assert len(workers_of["d4"]) >= 2   # the last drop is shared once the others are done


def test_students_are_in_the_gradebook_before_any_worker_grades(tmp_path):
    """Two workers that start on two drops begin with the same student; were each to add
    that student to the gradebook itself, one would fail (the first run of a class of 40
    lost s01/drop01 that way). The roster's details stay as they were."""
    from nbgrader.api import Gradebook

    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    url = f"sqlite:///{tmp_path}/gradebook.db"
    grade.add_students(tmp_path, [])   # makes the gradebook (nbgrader runs `alembic` from this environment)
    with Gradebook(url) as gb:
        gb.add_student("ada", first_name="Ada")
    grade.add_students(tmp_path, ["bo", "ada", "bo"])
    grade.add_students(tmp_path, ["bo"])   # again: nothing changes
    with Gradebook(url) as gb:
        assert sorted(s.id for s in gb.students) == ["ada", "bo"]
        assert gb.find_student("ada").first_name == "Ada"
