"""The start page's progress: a visible check run in the student's work folder leaves its
result there (and nowhere else); a drop's core is done when each code answer of its core
passed its latest check; the map shows it and names the next drop."""
import shutil

import nbformat
import pytest

from autograder import cases
from autograder.course import grading_file, notebook, release
from autograder.spec import load
from threeaxes import progress
from threeaxes.course import drop
from threeaxes.grading import visible

DROP1 = "drop01-three-kinds-of-parallel"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A work folder as `make lab` makes it (its copy record, the release's notebooks), the
    kernel's working directory in drop 1's folder."""
    (tmp_path / ".copied.json").write_text("{}\n")
    shutil.copytree(release(), tmp_path / "release")
    monkeypatch.chdir(tmp_path / "release" / DROP1)
    return tmp_path


def drop1_solution():
    nb = nbformat.read(notebook(DROP1), as_version=4)
    spec = visible.load("drop01")["axis_roles_answer"]
    exercise = load(grading_file(DROP1)).exercise("axis_roles_answer")
    return cases.defined(cases.solution_code(nb, "axis_roles_answer"), spec["call"], exercise.visible.setup)


def row(number, work):
    return next(r for r in progress.status(work) if r["drop"] == number)


def test_a_failed_then_passed_check_moves_the_drop_to_done_and_the_next_drop_up(work):
    assert progress.work_folder() == work and row(1, work)["answers"] == ["axis_roles_answer"]
    assert progress.next_drop(progress.status(work))["drop"] == 1          # nothing tried yet

    with pytest.raises(AssertionError):
        visible.check("drop01", "axis_roles_answer", lambda: 5)            # the wrong form
    assert progress.read(work) == {"drop01": {"axis_roles_answer": False}}
    assert row(1, work)["started"] and not row(1, work)["done"]
    assert "0 of 1 core answers pass" in progress.course_map_with_progress(work=work)

    # a sealed answer: its check sees the form only, so it is answered, not passed
    visible.check("drop01", "axis_roles_answer", drop1_solution())
    assert progress.read(work) == {"drop01": {"axis_roles_answer": progress.ANSWERED}}
    assert row(1, work)["done"] and progress.next_drop(progress.status(work))["drop"] == 2
    shown = progress.course_map_with_progress(work=work)
    drop1_line = next(line for line in shown.splitlines() if "| 1 |" in line)
    assert drop1_line.endswith("core answered: 0 of 1 pass, 1 graded when you submit |"), drop1_line
    progress.record("drop01", "axis_roles_answer", passed=True)     # a check of the value that passed
    shown = progress.course_map_with_progress(work=work)
    drop1_line = next(line for line in shown.splitlines() if "| 1 |" in line)
    assert drop1_line.endswith("core checks pass ✓ |"), drop1_line
    title, folder = drop(2).title, drop(2).folder
    assert f"**Next: [drop 2, {title}](../release/{folder}/{folder}.ipynb)**" in shown


def test_a_wrong_sealed_value_of_the_right_form_is_answered_never_passed(work):
    """Drop 10's diagnosis: a wrong number of the right form passes the form check, and the
    start page says it is graded later, not that drop 10's checks pass."""
    visible.check("drop10", "oom_terms_answer", {"linear": 1.0, "scores": 2.0}, show=False)
    assert progress.read(work)["drop10"]["oom_terms_answer"] == progress.ANSWERED
    assert "oom_terms_answer" not in row(10, work)["passed"]
    line = next(x for x in progress.course_map_with_progress(work=work).splitlines() if "| 10 |" in x)
    assert "core checks pass" not in line and "graded when you submit" in line, line


def test_a_defence_check_records_answered(work):
    from threeaxes.grading import defence

    defence.check_numbers("drop13", "my_defence_answer",
                          {"state_gb": 1.0, "activation_gb": 1.0, "bubble": 0.1, "slow_link_gb": 1.0})
    assert progress.read(work)["drop13"]["my_defence_answer"] == progress.ANSWERED


def test_an_answer_judged_in_parts_passes_only_when_every_part_did(work):
    progress.record("drop01", "axis_roles_answer[0]", passed=True)
    progress.record("drop01", "axis_roles_answer[1]", passed=False)
    assert not row(1, work)["done"]
    progress.record("drop01", "axis_roles_answer[1]", passed=True)
    assert row(1, work)["done"]


def test_every_drop_is_done_once_each_core_answer_passed(work):
    for r in progress.status(work):
        for answer in r["answers"]:
            progress.record(f"drop{r['drop']:02d}", answer, passed=True)
    rows = progress.status(work)
    assert all(r["answers"] for r in rows), "every drop's core holds a code answer its checks try"
    assert progress.next_drop(rows) is None
    assert "Every drop's core checks pass" in progress.course_map_with_progress(work=work)


def test_outside_a_work_folder_a_check_records_nothing_and_the_map_says_where_progress_shows(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError):
        visible.check("drop01", "axis_roles_answer", lambda: 5)
    assert progress.work_folder() is None and not list(tmp_path.rglob(progress.RECORD))
    assert "make lab" in progress.course_map_with_progress()


def test_the_work_folder_is_known_by_the_record_make_lab_writes():
    """threeaxes cannot import autograder (the layers), so the mark is written twice: kept equal here."""
    from autograder.apps import workspace

    assert progress.WORK_MARK == workspace.RECORD


def test_a_check_that_ends_its_cell_echoes_no_out_line(work):
    """The check prints what it found; the values it returns show no `Out[n]:` in a notebook."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = shell.display_formatter.format(visible.check("drop01", "axis_roles_answer", drop1_solution()))
    assert shown == ({}, {})
    assert shell.display_formatter.format([1, 2])[0]      # a plain list does show
