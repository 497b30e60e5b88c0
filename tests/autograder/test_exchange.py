"""A class through nbgrader's own exchange, end to end, as README's "Running a class
through nbgrader's exchange" tells an instructor to run it.

One temporary exchange folder (c.Exchange.root), the instructor's course folder
and one home folder per student, each with its own HOME and
~/.jupyter/nbgrader_config.py. The instructor releases two drops; the
students fetch them and submit:

    alice   blank, then solved (she submits drop01 twice: the latest counts)   full marks
    bob     solved, but with the drop's first catalogued mistake in one answer  loses that mistake's cells
    carol   blank; her drop01 comes after its due date                           0, drop01 marked late
    dave    on the roster, but hands in a renamed notebook (drop01) and a        not graded, named,
            notebook that is not JSON (drop10)                                   kept in submitted/
    eve     not on the roster                                                    not graded, named, kept

then the instructor collects, grades (the course's sandboxed, judged autograde,
every submission in one call, 2 at once), releases the feedback, and each
student fetches theirs. The whole class runs once (the `klass` fixture); the
tests read what it left behind.

The students' commands are nbgrader's own command-line app, run in this
process with the student's HOME and working folder (as nbgrader's own tests
run it), so each costs no interpreter start; the instructor's are
`autograder.apps.exchange`, which calls nbgrader's Python API. Every test user is the same system user here, so each
student's config names their id (c.CourseDirectory.student_id) and the
instructor's turns off collect's owner check; README says what a real
machine or JupyterHub sets instead.
The users' commands and folders are tests/autograder/exchange_helpers.py.
"""
from __future__ import annotations

import csv
import io
import shutil
from datetime import datetime, timezone
from types import SimpleNamespace

import nbformat
import pytest
from exchange_helpers import (
    SECRET,
    as_user,
    gradebook_submission,
    inbound,
    nbgrader_as,
    notebook_path,
    plant_links,
    student_config,
    tree,
    write_config,
)
from grading_harness import (
    CELL_TIMEOUT_S,
    ROOT,
    Course,
    answer_ids,
    load_drop,
    revealed_hidden_tests,
    set_answer,
    solution_of,
    without_rank_demos,
)

from autograder.apps import exchange

# the two cheapest drops to grade: drop10 runs no ranks, drop01 a few 4-rank launches
DROPS = ["drop01-three-kinds-of-parallel", "drop10-oom-at-step-4000"]
DUE = DROPS[0]                      # the drop with a due date
NEVER_RELEASED = "drop02-data-parallel"
# students on the roster who write links into inbound/ by hand (`plant_links`): nothing of theirs is collected
LINKERS = ["frank", "grace", "heidi"]
ROSTER = ["alice", "bob", "carol", "dave", *LINKERS]
GRADED = ["alice", "bob", "carol"]
# nbgrader's API misspells `authenticator` when it releases feedback; traitlets warns
pytestmark = pytest.mark.filterwarnings("ignore:Passing unrecognized arguments to super\\(ExchangeReleaseFeedback")


# -- the class, once -------------------------------------------------------------------
@pytest.fixture(scope="module")
def klass(tmp_path_factory, released):
    base = tmp_path_factory.mktemp("exchange")
    ex = base / "exchange"
    ex.mkdir()
    ex.chmod(0o777)                   # nbgrader: the exchange root exists, writable by everyone
    # the course has drop02; it stays unreleased. The model solutions' cell times: measured once in the run
    course = Course(base, [*DROPS, NEVER_RELEASED], released=released, share_limits=True)
    homes = {name: base / "home" / name for name in ["instructor", *ROSTER, "eve"]}
    write_config(homes["instructor"], [
        f'c.Exchange.root = "{ex}"',
        # every test user is one system user, so collect's owner check would warn on each
        "c.ExchangeCollect.check_owner = False",
    ])
    for student in [*ROSTER, "eve"]:
        student_config(homes[student], student, ex)
    k = SimpleNamespace(base=base, ex=ex, course=course, homes=homes, refused={}, submitted={}, mistake={})
    instructor = homes["instructor"]

    def instructor_cli(*args):
        result = nbgrader_as(instructor, *args, cwd=course.root)
        assert result.rc == 0, result.log
        return result

    def run_as_instructor(step, *args, **kw):
        with as_user(instructor, course.root):
            return step(exchange.load_course(course.root), *args, **kw)

    k.run_as_instructor = run_as_instructor

    # the instructor: roster, release
    (course.root / "roster.csv").write_text("id,first_name,last_name,email\n"
                                            + "".join(f"{s},{s.title()},Student,{s}@example.org\n" for s in ROSTER))
    instructor_cli("db", "student", "import", "roster.csv")
    k.release = run_as_instructor(exchange.release, DROPS)

    def fetch(student, drop):
        result = nbgrader_as(homes[student], "fetch_assignment", drop)
        assert result.rc == 0, result.log
        return nbformat.read(notebook_path(homes[student], drop), as_version=4)

    def submit(student, drop, nb, *flags):
        if nb is not None:
            nbformat.write(nb, notebook_path(homes[student], drop))
        result = nbgrader_as(homes[student], "submit", drop, *flags)
        assert result.rc == 0, result.log
        if notebook_path(homes[student], drop).is_file():
            k.submitted[student, drop] = notebook_path(homes[student], drop).read_bytes()

    # the students: fetch, work, submit
    for drop in DROPS:
        source, spec = course.source(drop), load_drop(course.root / "source" / drop)
        blank = {s: fetch(s, drop) for s in [*GRADED, "dave"]}
        solved = blank["alice"]
        for grade_id in answer_ids(source):
            solved = set_answer(solved, grade_id, solution_of(source, grade_id))
        mistake = next(m for m in spec.mistakes if not m.alone)   # the catalogue's first plain mistake
        k.mistake[drop] = mistake
        # drop 1 handed in without its 4-rank launch demos: they score nothing and no test here reads them
        bare = without_rank_demos if drop == DROPS[0] else (lambda nb: nb)
        if drop == DUE:
            submit("alice", drop, blank["alice"])
        submit("alice", drop, bare(solved))
        submit("bob", drop, bare(set_answer(solved, mistake.answer, mistake.code)))
        if drop == DUE:   # the due date falls between bob's hand-in and carol's (recorded below,
            k.due = datetime.now(timezone.utc)   # before collect, as if set at the start)
        submit("carol", drop, bare(blank["carol"]))

    # dave: strict submit refuses a renamed and a missing notebook; what reaches the exchange anyway
    dave = homes["dave"]
    renamed = notebook_path(dave, DROPS[0]).rename(dave / DROPS[0] / "Copy of my notebook.ipynb")
    before = inbound(ex)
    k.refused["renamed"] = nbgrader_as(dave, "submit", DROPS[0])
    notebook_path(dave, DROPS[1]).unlink()
    k.refused["missing"] = nbgrader_as(dave, "submit", DROPS[1])
    k.refused["inbound unchanged"] = inbound(ex) == before
    k.refused["kept"] = renamed.is_file()
    submit("dave", DROPS[0], None, "--ExchangeSubmit.strict=False")   # e.g. a student's own older config
    k.submitted["dave", DROPS[0]] = renamed.read_bytes()
    notebook_path(dave, DROPS[1]).write_text('{"cells": [ this is not JSON')
    submit("dave", DROPS[1], None)
    # eve: not on the roster
    submit("eve", DROPS[0], fetch("eve", DROPS[0]))
    plant_links(ex, course.root, base, DROPS[0], fetch("frank", DROPS[0]))

    # the instructor: due date, collect, grade, release feedback
    instructor_cli("db", "assignment", "add", DUE, f"--duedate={k.due.isoformat()}")
    k.collect = run_as_instructor(exchange.collect, DROPS)
    k.grade = run_as_instructor(exchange.grade, DROPS, 2, f"--Execute.timeout={CELL_TIMEOUT_S}", progress=None)
    k.feedback = run_as_instructor(exchange.release_feedback, DROPS)

    # each student fetches their feedback
    for student in [*ROSTER, "eve"]:
        for drop in DROPS:
            nbgrader_as(homes[student], "fetch_feedback", drop)
    return k


# -- the happy path ----------------------------------------------------------------------
@pytest.mark.slow
def test_the_instructor_releases_and_students_fetch_from_the_exchange(klass):
    for drop in DROPS:
        assert (klass.ex / "three-axes" / "outbound" / drop / f"{drop}.ipynb").is_file()
        for student in GRADED:
            assert notebook_path(klass.homes[student], drop).is_file()
    assert "released" in klass.release


@pytest.mark.slow
def test_scores_land_in_the_gradebook(klass):
    for drop in DROPS:
        points = load_drop(klass.course.root / "source" / drop).points
        mistake = klass.mistake[drop]
        partial = dict(mistake.scores)
        wrong = {gid: 0.0 if gid in mistake.loses else float(partial.get(gid, p)) for gid, p in points.items()}
        assert klass.course.scores(drop, "alice") == points, drop
        assert klass.course.scores(drop, "bob") == wrong, drop
        assert wrong != points
        assert klass.course.scores(drop, "carol") == {gid: 0.0 for gid in points}, drop
    assert sorted(klass.grade.graded) == sorted((d, s) for d in DROPS for s in GRADED)


@pytest.mark.slow
def test_the_latest_submission_counts(klass):
    collected = klass.course.root / "submitted" / "alice" / DUE / f"{DUE}.ipynb"
    assert collected.read_bytes() == klass.submitted["alice", DUE]
    firsts = [p for p in (klass.ex / "three-axes" / "inbound").glob(f"alice+{DUE}+*")]
    assert len(firsts) == 2   # both are in the exchange; collect took the newer


@pytest.mark.slow
def test_a_submission_after_the_due_date_is_marked_late(klass):
    assert gradebook_submission(klass, DUE, "carol").late > 0
    for student in ["alice", "bob"]:
        assert gradebook_submission(klass, DUE, student).late == 0
    for student in GRADED:
        assert gradebook_submission(klass, DROPS[1], student).late == 0   # drop10 has no due date
    assert "carol" in next(line for line in klass.grade.scores if "late by" in line)


@pytest.mark.slow
def test_grades_csv_matches_the_gradebook(klass):
    rows = list(csv.DictReader(io.StringIO((klass.course.root / "grades.csv").read_text())))
    graded = {(r["assignment"], r["student_id"]): r for r in rows if r["timestamp"]}
    assert set(graded) == {(d, s) for d in DROPS for s in GRADED}
    for (drop, student), row in graded.items():
        sub = gradebook_submission(klass, drop, student)
        assert float(row["score"]) == pytest.approx(sub.score)
        assert float(row["max_score"]) == pytest.approx(sub.max_score)
    assert {r["student_id"] for r in rows} == set(ROSTER)   # eve never entered the gradebook


@pytest.mark.slow
def test_each_student_fetches_only_their_own_feedback(klass):
    pages = {s: {p.parent.parent.parent.name: p for p in klass.homes[s].glob("*/feedback/*/*.html")}
             for s in [*ROSTER, "eve"]}
    for student in GRADED:
        assert set(pages[student]) == set(DROPS), student
        for drop, page in pages[student].items():
            assert page.read_bytes() == klass.course.feedback_html(drop, student).encode(), (student, drop)
            others = [klass.course.feedback_html(drop, s) for s in GRADED if s != student]
            assert page.read_text() not in others
            assert not revealed_hidden_tests(page.read_text(), klass.course.source(drop)), (student, drop)
    assert pages["dave"] == {} and pages["eve"] == {}
    # alice's first drop01 submission was never collected: one feedback folder, the latest
    assert len(list(klass.homes["alice"].glob(f"{DUE}/feedback/*"))) == 1


# -- bad input: a clear message, nothing lost -----------------------------------------------
@pytest.mark.slow
def test_submit_refuses_a_missing_or_renamed_notebook(klass):
    for case in ("renamed", "missing"):
        result = klass.refused[case]
        assert result.rc != 0 and "There are missing notebooks" in result.log, (case, result.log)
    assert "Copy of my notebook.ipynb: EXTRA" in klass.refused["renamed"].log
    assert klass.refused["inbound unchanged"] and klass.refused["kept"]


@pytest.mark.slow
def test_what_cannot_be_graded_is_named_and_kept(klass):
    problems = "\n".join(klass.grade.problems)
    assert len(klass.grade.problems) == 2, problems
    assert f"dave/{DROPS[1]}: {DROPS[1]}.ipynb is not a notebook" in problems
    assert f"eve/{DROPS[0]}: 'eve' is not in the roster" in problems
    assert "nothing was deleted" in problems
    assert all(f"NOT GRADED: {p}" in str(klass.grade) for p in klass.grade.problems)
    for student, drop, name in [("dave", DROPS[1], f"{DROPS[1]}.ipynb"), ("eve", DROPS[0], f"{DROPS[0]}.ipynb")]:
        kept = klass.course.root / "submitted" / student / drop / name
        assert kept.read_bytes() == klass.submitted[student, drop]
    # collect already said so, before any grading
    assert klass.collect.count("cannot be graded as it is") == 2
    # a renamed notebook is a file other than the notebook: not collected, named, left in the exchange
    assert (f"not collected: dave/{DROPS[0]}: " in klass.collect
            and "Copy of my notebook.ipynb is a file other than the notebook" in klass.collect), klass.collect
    assert not (klass.course.root / "submitted" / "dave" / DROPS[0]).exists()
    assert any((p / "Copy of my notebook.ipynb").is_file()
               for p in (klass.ex / "three-axes" / "inbound").glob(f"dave+{DROPS[0]}+*"))


@pytest.mark.slow
def test_collect_follows_no_link_a_student_wrote_into_inbound(klass):
    """Collect, run as root, once copied the source notebook, the gradebook and a root-only file
    into submitted/ through links in inbound/, and graded them 6 / 7."""
    said = {who: line for line in klass.collect.splitlines() for who in LINKERS
            if line.startswith(f"not collected: {who}/{DROPS[0]}: ")}
    assert set(said) == set(LINKERS), klass.collect
    assert "is a link, not a folder" in said["frank"]
    assert f"{DROPS[0]}.ipynb is a link" in said["grace"]
    assert "gradebook.db is a link" in said["heidi"] and "notes.txt is a link" in said["heidi"]
    for who in LINKERS:
        assert not (klass.course.root / "submitted" / who).exists(), who
        assert all(s != who for _, s in klass.grade.graded)
        assert not list(klass.homes[who].glob("*/feedback/*/*.html")), who
    for folder in ("submitted", "autograded", "feedback"):
        for path in (klass.course.root / folder).rglob("*"):
            assert not path.is_symlink() and path.name != "gradebook.db", path
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_a_drop_never_released(klass):
    alice = klass.homes["alice"]
    fetched = nbgrader_as(alice, "fetch_assignment", NEVER_RELEASED)
    assert fetched.rc != 0 and "Assignment not found" in fetched.log
    shutil.copytree(ROOT / "release" / NEVER_RELEASED, alice / NEVER_RELEASED)   # had it from elsewhere
    before = inbound(klass.ex)
    submitted = nbgrader_as(alice, "submit", NEVER_RELEASED)
    assert submitted.rc != 0 and "Assignment not found" in submitted.log
    assert inbound(klass.ex) == before
    with pytest.raises(SystemExit, match=f"{NEVER_RELEASED} was never released to the exchange"):
        klass.run_as_instructor(exchange.collect, [NEVER_RELEASED])
    with pytest.raises(SystemExit, match="there is no drop 'drop99'"):
        klass.run_as_instructor(exchange.release, ["drop99"])


@pytest.mark.slow
def test_collect_run_twice_changes_nothing(klass):
    submitted = klass.course.root / "submitted"
    before = tree(submitted), {(d, s): gradebook_submission(klass, d, s).score for d in DROPS for s in GRADED}
    # bob hands drop10 in again after it was collected: collect (without --update) says so, takes nothing
    nbgrader_as(klass.homes["bob"], "submit", DROPS[1])
    again = klass.run_as_instructor(exchange.collect, DROPS)
    assert f"{DROPS[0]}: nothing new to collect" in again
    assert f"{DROPS[1]}: bob submitted again after it was collected" in again
    after = tree(submitted), {(d, s): gradebook_submission(klass, d, s).score for d in DROPS for s in GRADED}
    assert after == before


def test_the_readme_shows_the_commands_this_test_runs():
    readme = (ROOT / "README.md").read_text()
    for command in ("db student import", "db assignment add", "nbgrader fetch_assignment", "nbgrader submit",
                    "nbgrader fetch_feedback", "c.Exchange.root", "c.ExchangeSubmit.strict = True",
                    *(f"python -m autograder.apps.exchange {step}"
                      for step in ("release", "collect", "grade", "feedback"))):
        assert command in readme, command
