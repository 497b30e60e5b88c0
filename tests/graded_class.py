"""The suite's one graded class: who hands in what for each drop, and the class graded.

Every drop with grading data (tests/grading_harness.py's `Drop`) gets these students:

    solved_source       the instructor's notebook                      full marks
    untouched_release   the release as handed out                      0 on every auto-graded cell
    mistakes-1, -2, ... the release with every solution typed in,      0 on the cells its mistakes
                        then some of the drop's mistakes, each in        `lose`, full marks on all
                        its own answer cell                              others
    attack-<name>       the release with one cell of attack code         0 on every auto-graded cell,
                        first (grading_attacks.py; some drops only);     as untouched_release
                        drop 1's without its rank demos (`attacked_release`);
                        an attack that never ends in its first answer cell
    catalogue-1, -2, .. the release with every solution typed in, then   less than solved_source on
                        the k-th catalogued mistake of each exercise     each exercise it changed,
                        (grading.json "exercises")                       the mistake named

Mistakes share a notebook when they can: each student takes, in order, every mistake whose
answer cell and lost cells no earlier mistake of that student touches (a mistake with "alone":
true always gets a student of its own), so a drop with mistakes in two answer cells costs one
notebook run, not two; every mistake's feedback phrase is still checked on its student's page.
The release with every solution typed in and nothing else is not run: in every cell autograde
keeps as submitted it holds the solved source's code (`student_code` lets a test check that).

`graded_course` releases, submits, autogrades (`make grade`'s own path), feeds back and exports
them all, each step once for every drop; tests/conftest.py's `graded_class` is the suite's one.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import nbformat
from grading_attacks import ATTACKS, RUNS_OUT_OF_TIME, attacks_on
from grading_harness import (
    ATTACK,
    CELL_TIMEOUT_S,
    FULL,
    RANK_DEMOS,
    ROOT,
    ZERO,
    Course,
    Drop,
    answer_ids,
    drops,
    set_answer,
    without_rank_demos,
)

# The submissions made to run into the limit (a mistake marked "runs_out_of_time", the attacks of
# grading_attacks.RUNS_OUT_OF_TIME: loops that burn a core until they are stopped) are graded first,
# so that none ends the run last. Each loop is in an answer cell, which the model solution times, so
# it is stopped at the limit's floor (autograder/judging/cell_seconds.py), 5 s, where a cell of its
# own would run to the course's limit; the attack that ignores the interrupt ends with it, no grace.
CATALOGUE = "catalogue-"
# How many catalogue students each drop hands in (catalogue-1 .. -k, carrying the first k mistakes
# of each exercise): 1 in the suite, every one with THREEAXES_GRADE_CATALOGUE=all. Every catalogued
# mistake is also judged in-process, by its visible check (test_visible_cases.py) and its hidden
# draws (test_catalogue.py). Graded all through the real path, the catalogue students were 129 of
# the class's 224 submissions; the first of each exercise, 16.
_DEPTH = os.environ.get("THREEAXES_GRADE_CATALOGUE", "1")
CATALOGUE_DEPTH = None if _DEPTH == "all" else int(_DEPTH)


def drops_to_grade(root: Path = ROOT) -> list[Drop]:
    """`drops()`, or only those THREEAXES_GRADE_ONLY names (comma-separated name prefixes, e.g.
    drop05), for someone writing one drop; CI leaves it unset and grades every drop."""
    only = tuple(p for p in os.environ.get("THREEAXES_GRADE_ONLY", "").split(",") if p)
    return [d for d in drops(root) if not only or d.name.startswith(only)]


def submit_all(course: Course, drop: Drop) -> None:
    """The students of the module docstring, for one drop."""
    solved = course.solved_release(drop.name)
    course.submit(FULL, drop.name, course.source(drop.name))
    course.submit(ZERO, drop.name, course.released(drop.name))
    for name in attacks_on(drop.name):
        nb = attacked_release(course, drop.name)
        if name in RUNS_OUT_OF_TIME:   # see above: the limit of the first answer cell
            nb = set_answer(nb, answer_ids(nb)[0], ATTACKS[name])
        else:
            nb = copy.deepcopy(nb)
            nb.cells.insert(1, nbformat.v4.new_code_cell(ATTACKS[name]))
        course.submit(ATTACK + name, drop.name, nb)
    for student in drop.students()[2:]:
        if student.startswith(ATTACK):
            continue
        nb = solved
        for mistake in drop.mistakes_of(student):
            nb = set_answer(nb, mistake.answer, mistake.code)
        course.submit(student, drop.name, nb)
    for student, (nb, _) in catalogue_students(course, drop.name).items():
        course.submit(student, drop.name, nb)


def attacked_release(course: Course, assignment: str):
    """The notebook an attack starts from: the release as handed out, but drop 1's without its
    rank demos (`without_rank_demos`). An attack is judged by its test cells, which read none of
    them; untouched_release still runs them, and the attacks there cost 14 submissions times
    about 6 s of a grading worker less."""
    nb = course.released(assignment)
    return without_rank_demos(nb) if assignment == RANK_DEMOS else nb


def catalogue_students(course: Course, assignment: str) -> dict[str, tuple]:
    """{student: (notebook, {answer: mistake name})}: student catalogue-k hands in the solved
    release with the k-th catalogued mistake of every exercise that has one written into
    its answer cell (k up to CATALOGUE_DEPTH). Each exercise is scored by its own test
    cells, so one notebook carries one mistake per exercise."""
    from autograder.apps.report import records

    solved = course.solved_release(assignment)
    catalogued = [e for e in records(course.root, assignment) if e.mistakes]
    students = {}
    deepest = max((len(e.mistakes) for e in catalogued), default=0)
    for k in range(deepest if CATALOGUE_DEPTH is None else min(deepest, CATALOGUE_DEPTH)):
        nb, marks = solved, {}
        for e in catalogued:
            if k < len(e.mistakes):
                nb = set_answer(nb, e.answer, e.mistakes[k].code)
                marks[e.answer] = e.mistakes[k].name
        students[f"{CATALOGUE}{k + 1}"] = (nb, marks)
    return students


def graded_course(tmp_path: Path, all_drops: list[Drop], timings: dict | None = None,
                  jobs: int = 1, released: Path | None = None, extra: dict | None = None) -> Course:
    """One course with every drop released (or taken from `released`, see
    `released_course`), submitted by every student, autograded, with feedback and
    grades.csv; `timings` (if given) receives seconds per step. `extra`: more students,
    {(assignment, student): build}, each handing in `build(course)` (a notebook)."""
    extra = extra or {}
    names = [d.name for d in all_drops]
    course = Course(tmp_path, names + sorted({a for a, _ in extra} - set(names)), released, share_limits=True)
    looping = [(d.name, s) for d in all_drops for s in d.students() if d.runs_out_of_time(s)]

    def autograde():
        from autograder.apps.grade import submissions

        course.autograde(f"--Execute.timeout={CELL_TIMEOUT_S}", jobs=jobs,
                         todo=looping + [t for t in submissions(course.root) if t not in looping])

    steps = [("release", course.release),
             ("submit", lambda: ([submit_all(course, d) for d in all_drops],
                                 [course.submit(s, a, build(course)) for (a, s), build in extra.items()])),
             ("autograde", autograde),
             # every student but catalogue-k, whose test reads the autograded notebooks (the
             # others' names start with s, u, m or a)
             ("feedback", lambda: course.generate_feedback(f"[!{CATALOGUE[0]}]*")),
             ("export", course.export_csv)]
    for step, run in steps:
        start = time.perf_counter()
        run()
        if timings is not None:
            timings[step] = time.perf_counter() - start
    return course
