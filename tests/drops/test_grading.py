"""Every drop through the real nbgrader CLI: exact scores for typical submissions.

What each drop grades is data, source/<drop>/grading.json; the students and
what each must score are in graded_class.py. One course with every drop is
released, submitted, autograded, fed back and exported once per session (each
step one nbgrader call for all drops); the slow tests below only read it. A new
drop adds its grading.json, not a test here.
"""
import csv
import html
from pathlib import Path

import nbformat
import pytest
from graded_class import CATALOGUE_DEPTH, catalogue_students, drops_to_grade
from grading_harness import (
    FULL,
    GRADING_FILE,
    ROOT,
    ZERO,
    Drop,
    Mistake,
    answer_ids,
    autograded_ids,
    student_code,
)

from autograder.apps.release import assignments

DROPS = drops_to_grade()
CASES = [pytest.param(d, s, id=f"{d.name}:{s}" + "".join(f"-{m.name}" for m in d.mistakes_of(s)))
         for d in DROPS for s in d.students()]
MISTAKES = [pytest.param(d, m, id=f"{d.name}:{m.name}") for d in DROPS for m in d.mistakes]


@pytest.fixture(scope="session")
def course(graded_class):
    return graded_class


# -- the data against the notebooks, without running anything ----------------------
def test_every_drop_in_source_has_grading_data():
    missing = [name for name in assignments() if not (ROOT / "source" / name / GRADING_FILE).exists()]
    assert not missing, f"add source/<drop>/{GRADING_FILE} (see CONTRIBUTING.md) for {missing}"


@pytest.mark.parametrize("drop", DROPS, ids=lambda d: d.name)
def test_grading_data_names_the_notebooks_cells(drop):
    nb = nbformat.read(ROOT / "source" / drop.name / f"{drop.name}.ipynb", as_version=4)
    assert drop.points == autograded_ids(nb), (
        f"{GRADING_FILE} 'points' should list every auto-graded test cell of the notebook with its points")
    names = [m.name for m in drop.mistakes]
    assert len(set(names)) == len(names), f"mistake names repeat: {names}"
    for m in drop.mistakes:
        assert m.answer in answer_ids(nb), f"{m.name}: {m.answer!r} is not an answer cell"
        assert m.touches and m.touches <= set(drop.points), (
            f"{m.name}: 'loses' and 'scores' must name test cells of the notebook")
        for gid, earned in m.scores:
            assert 0 < earned < drop.points[gid], f"{m.name}: a partial score lies between 0 and the cell's points"
        assert m.feedback.strip(), f"{m.name}: give the phrase the feedback must show"


def test_mistakes_share_a_student_only_across_different_cells():
    def mistake(name, answer, loses, alone=False):
        return Mistake(name, answer, "pass", loses, "phrase", alone=alone)
    a, b = mistake("a", "x_answer", ("x",)), mistake("b", "x_answer", ("x",))
    c, d = mistake("c", "y_answer", ("y",)), mistake("d", "z_answer", ("z",), alone=True)
    e = mistake("e", "w_answer", ("y",))       # another cell, but it loses y as c does
    f = Mistake("f", "v_answer", "pass", (), "phrase", scores=(("w", 1.5),))   # partial credit on w
    drop = Drop("dropNN", {"x": 1.0, "y": 2.0, "z": 3.0, "w": 4.0}, (a, b, c, d, e, f))
    assert drop.packs() == [(a, c, f), (b, e), (d,)]
    assert drop.students() == [FULL, ZERO, "mistakes-1", "mistakes-2", "mistakes-3"]
    assert drop.expected("mistakes-1") == {"x": 0.0, "y": 0.0, "z": 3.0, "w": 1.5}
    assert drop.student_of(e) == "mistakes-2"


# -- the graded course ----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("drop, student", CASES)
def test_scores(course, drop, student):
    assert course.scores(drop.name, student) == drop.expected(student)
    assert course.max_scores(drop.name, student) == drop.points


@pytest.mark.slow
@pytest.mark.parametrize("drop", DROPS, ids=lambda d: d.name)
def test_the_solved_release_runs_the_solved_sources_code(course, drop):
    """A student who types every solution into the release submits, in every cell that
    autograde runs as submitted, the instructor's code; the test cells autograde puts back
    from the source. So that student scores what solved_source scores: full marks."""
    assert student_code(course.solved_release(drop.name)) == student_code(course.source(drop.name))


@pytest.mark.slow
@pytest.mark.parametrize("drop, mistake", MISTAKES)
def test_feedback_names_the_mistake(course, drop, mistake):
    student = drop.student_of(mistake)
    assert mistake.feedback in html.unescape(course.feedback_html(drop.name, student)), (
        f"{student}'s feedback does not say {mistake.feedback!r} (mistake {mistake.name})")


@pytest.mark.slow
@pytest.mark.parametrize("drop, student", CASES)
def test_feedback_hides_every_hidden_test(course, drop, student):
    course.assert_feedback_hides_hidden_tests(drop.name, student)


@pytest.mark.slow
@pytest.mark.parametrize("drop", DROPS, ids=lambda d: d.name)
def test_feedback_says_a_written_answer_waits_for_the_instructor_and_wraps_messages(course, drop):
    page = html.unescape(course.feedback_html(drop.name, FULL))
    written = [c for c in nbformat.read(ROOT / "source" / drop.name / f"{drop.name}.ipynb", as_version=4).cells
               if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
    assert ("waiting for your instructor" in page) == bool(written), drop.name
    assert "Written response (Score" not in page, "a written answer not graded yet shows a score"
    assert "white-space: pre-wrap" in page, "messages should wrap on the feedback page"


@pytest.mark.slow
def test_grades_csv_holds_every_score(course):
    graded = {d.name for d in DROPS}   # the released gradebook knows every drop
    students = {s for d in DROPS for s in d.students()}   # (the catalogue's students have a test below)
    rows = {(r["assignment"], r["student_id"]): float(r["raw_score"])
            for r in csv.DictReader((course.root / "grades.csv").open())
            if r["assignment"] in graded and r["student_id"] in students}
    # written answers wait for the instructor, so raw_score is the auto-graded points;
    # a student who submitted nothing for a drop is exported with 0
    expected = {(d.name, s): sum(d.expected(s).values()) if s in d.students() else 0.0
                for d in DROPS for s in students}
    assert rows == expected


@pytest.mark.slow
def test_grading_data_reaches_no_student(course):
    found = sorted(p.relative_to(course.root).as_posix() for p in course.root.rglob(GRADING_FILE))
    assert found == [f"source/{d.name}/{GRADING_FILE}" for d in DROPS], "add it to CourseDirectory.ignore"


@pytest.mark.slow
def test_no_submission_wrote_into_the_course(course):
    """The attack that searches for gradebooks, grades.csv and solutions also plants a
    file where its kernel works: in the sandbox that is a throwaway folder."""
    planted = sorted(p.relative_to(course.root).as_posix() for p in course.root.rglob("planted-by-attack"))
    assert not planted, f"a submission wrote into the course: {planted}"


@pytest.mark.slow
def test_no_submission_reached_the_machine(course):
    """attack-escapes-the-sandbox wrote into /dev and left System V memory behind, once."""
    assert not Path("/dev/threeaxes-attack").exists(), "a submission wrote into the machine's /dev"
    shm = Path("/proc/sysvipc/shm")
    keys = [line.split()[0] for line in shm.read_text().splitlines()[1:]] if shm.exists() else []
    assert str(0x7A3B) not in keys, "a submission's System V memory outlived its kernel"



@pytest.fixture(scope="session")
def report_rows(course):
    from autograder.apps import report

    return report.graded(course.root)


@pytest.mark.slow
@pytest.mark.parametrize("drop", DROPS, ids=lambda d: d.name)
def test_every_catalogued_mistake_scores_below_the_solution_and_is_named(course, report_rows, drop):
    """Each exercise's catalogue (grading.json "exercises"), its mistakes graded through the
    real path (the first CATALOGUE_DEPTH of each, every one with THREEAXES_GRADE_CATALOGUE=all):
    each earns less than the solution on its exercise, which keeps full marks, and the
    feedback names it as the visible check does."""
    rows = {(r["exercise"], r["student"]): r for r in report_rows if r["drop"] == drop.name}
    planted = catalogue_students(course, drop.name)
    exercises = {a for _, m in planted.values() for a in m}
    assert sum(len(marks) for _, marks in planted.values()) >= min(5, CATALOGUE_DEPTH or 5) * len(exercises)
    wrong = []
    for student, (_, marks) in planted.items():
        for answer, mistake in marks.items():
            got, best = rows[(answer, student)], rows[(answer, FULL)]
            if not got["score"] < best["score"] == best["max"]:
                wrong.append(f"{answer}: {mistake} scored {got['score']:g} of {best['max']:g}")
            elif got["mistake"] != mistake:
                wrong.append(f"{answer}: {mistake} was named {got['mistake']}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_the_report_counts_each_planted_mistake_under_its_name(course, report_rows, tmp_path):
    """`make report` on the graded class: every planted mistake that is in its exercise's
    catalogue is counted under that name for the student who made it, every call the
    exercise forbids as borrowed, every blank answer as blank, and the solved notebook
    as no mistake at all."""
    from autograder.apps import report

    rows = report_rows
    named = {(r["drop"], r["exercise"], r["student"]): r["mistake"] for r in rows}
    expected = {}
    for drop in DROPS:
        catalogue = {e.answer: e.mistakes for e in report.records(course.root, drop.name)}
        for answer in catalogue:
            expected[(drop.name, answer, FULL)] = None
            expected[(drop.name, answer, ZERO)] = "blank"
        for student in drop.students()[2:]:
            for m in drop.mistakes_of(student):
                same = [c.name for c in catalogue.get(m.answer, ())
                        if c.name == m.name or c.code == m.code]
                if same:
                    expected[(drop.name, m.answer, student)] = same[0]
                elif m.name.startswith("calls_"):
                    expected[(drop.name, m.answer, student)] = named.get((drop.name, m.answer, student))
                    assert (expected[(drop.name, m.answer, student)] or "").startswith("borrowed: "), m.name
    assert len([v for v in expected.values() if v and v != "blank"]) >= min(10, 2 * len(DROPS)), "too few named"
    assert {k: named.get(k) for k in expected} == expected
    out = report.write(rows, tmp_path / "report")
    listed = {(r["drop"], r["exercise"], r["mistake"]): r["students"].split()
              for r in csv.DictReader((out / "mistakes.csv").open())}
    for (drop, exercise, student), mistake in expected.items():
        if mistake:   # each planted mistake listed with its student (beside the attacks' blanks)
            assert student in listed[(drop, exercise, mistake)], (drop, exercise, mistake, student)
    assert all(int(r["count"]) == len(r["students"].split())
               for r in csv.DictReader((out / "mistakes.csv").open()))
    assert {p.name for p in out.glob("*.png")} == {f"{d.name}.png" for d in DROPS}
    assert "Where the class did worst" in (out / "index.html").read_text()
