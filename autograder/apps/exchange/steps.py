"""The four steps: release, collect, grade, feedback (and the command line over them)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from autograder import course as layout  # `course` names the Course here
from autograder.apps.exchange.checks import (
    check_exchange_ready,
    check_known,
    check_released,
    check_submissions,
    collected_times,
    roster,
    waiting_students,
)
from autograder.apps.exchange.course import Course, load_course, logged_ok, nbgrader_api
from autograder.apps.grade import feedback_failures, forget, grade_submissions, pending, register_assignments
from autograder.plugins import core_points


def release(course: Course, drops: list[str], force: bool = False) -> str:
    check_known(course, drops)
    check_exchange_ready(course)
    for drop in drops:
        if not layout.folder(drop, course.root, of="release").is_dir():
            raise SystemExit(f"release/{drop}/ does not exist: run `make release` first")
        if (course.outbound / drop).is_dir() and not force:
            raise SystemExit(f"{drop} is already in the exchange ({course.outbound / drop}); students may "
                             f"have fetched it. To replace it anyway: release --force {drop}")
    with course.gradebook() as gb:   # (a due date set first records a drop with no notebooks)
        recorded = {a.name for a in gb.assignments if a.notebooks}
    # autograde needs each drop's graded cells in the gradebook (`make release` keeps no gradebook)
    register_assignments(course.root, [d for d in drops if d not in recorded])
    api = nbgrader_api(course, **({"ExchangeReleaseAssignment.force": True} if force else {}))
    for drop in drops:
        logged_ok(api.release_assignment(drop), f"release_assignment {drop}")
    lines = [f"released {', '.join(drops)}: students run `nbgrader fetch_assignment <drop>`"]
    if not roster(course):
        lines.append("the roster is empty: nbgrader db student import roster.csv "
                     "(columns id,first_name,last_name,email) before grading")
    return "\n".join(lines)


def collect(course: Course, drops: list[str], update: bool = False) -> str:
    check_known(course, drops)
    check_exchange_ready(course)
    check_released(course, drops)
    lines, api = [], nbgrader_api(course)
    for drop in drops:
        before = collected_times(course, drop)
        logged_ok(api.collect(drop, update=update), f"collect {drop}")
        from autograder.plugins.safe_collect import SafeCollect

        lines += [f"not collected: {why}. Nothing of it was read or copied; ask the student to submit "
                  f"the notebook alone (nbgrader submit {drop})" for why in SafeCollect.refused]
        after = collected_times(course, drop)
        new = sorted(set(after) - set(before))
        updated = sorted(s for s in before if s in after and after[s] != before[s])
        if new or updated:
            lines.append(f"{drop}: collected {', '.join(new) or 'nobody new'}"
                         + (f"; updated {', '.join(updated)}" if updated else ""))
        else:
            lines.append(f"{drop}: nothing new to collect ({len(after)} submissions already in submitted/; "
                         f"nothing there was changed)")
        waiting = waiting_students(course, drop, after)
        if waiting:
            lines.append(f"{drop}: {', '.join(waiting)} submitted again after it was collected; "
                         f"collect --update {drop} takes the latest (then grade again)")
        lines += [f"cannot be graded as it is: {why}" for why in check_submissions(course, [drop])[1]]
    return "\n".join(lines)


@dataclass
class Graded:
    graded: list = field(default_factory=list)     # (drop, student)
    problems: list = field(default_factory=list)   # one message each
    scores: list = field(default_factory=list)     # lines: student, drop, score, late

    def __str__(self) -> str:
        return "\n".join([*self.scores, *(f"NOT GRADED: {p}" for p in self.problems)])


def grade(course: Course, drops: list[str], jobs: int = 2, *extra: str, progress: TextIO = sys.stderr) -> Graded:
    """Grade every collected submission of `drops` that can be graded; the others are
    named in `problems` and left as they are. Then feedback/ and grades.csv."""
    check_known(course, drops)
    good, problems = check_submissions(course, drops)
    if not good and not problems:
        raise SystemExit(f"submitted/ holds nothing of {', '.join(drops)}: "
                         f"collect first (python -m autograder.apps.exchange collect {' '.join(drops)})")
    report = Graded(problems=problems)
    todo = pending(course.root, good)   # what an earlier, stopped run left (autograder/apps/grade/)
    failed = set()
    if todo:
        # grade.grade_submissions names each one nbgrader could not grade, with its cause
        graded = grade_submissions(course.root, todo, jobs, *extra, progress=progress)
        for drop, student in sorted(graded.failed):
            forget(course.root, drop, student)   # no stale autograded notebook or feedback page
            report.problems.append(graded.failed[drop, student])
        failed = set(graded.failed)
    if good:
        api = nbgrader_api(course)
        for drop in sorted({d for d, _ in good}):
            if not any(layout.side("autograded", course.root).glob(f"*/{drop}/*.ipynb")):
                continue   # nothing of it graded: each named already
            # nbgrader writes every page it can and fails at the end: the others' pages stand
            result = api.generate_feedback(drop, force=True)
            if not result.get("success"):
                said = (result.get("log") or "") + (result.get("error") or "")
                report.problems += feedback_failures(course.root, drop, said)
    try:
        export_csv(course)
    except Exception as error:   # noqa: BLE001 - named; the grades stay in the gradebook
        report.problems.append(f"grades.csv could not be written: {type(error).__name__}: {error}")
    with course.gradebook() as gb:
        for drop, student in good:
            if (drop, student) in failed:
                continue
            try:
                sub = gb.find_submission(drop, student)
            except Exception:  # noqa: BLE001 - MissingEntry: never graded
                continue
            report.graded.append((drop, student))
            late = f", late by {sub.total_seconds_late:.0f} s" if sub.total_seconds_late > 0 else ""
            report.scores.append(f"{student} {drop}: {sub.score:g} / {sub.max_score:g}{late}")
    return report


def export_csv(course: Course) -> Path:
    """`nbgrader export --to=grades.csv`: its CSV plugin, every student and drop in the gradebook."""
    from nbgrader.plugins import CsvExportPlugin

    plugin = CsvExportPlugin(config=course.config)
    plugin.to = str(course.root / "grades.csv")
    with course.gradebook() as gb:
        plugin.export(gb)
    core_points.add_columns(course.root / "grades.csv", course.db_url, course.course_id)
    return course.root / "grades.csv"


def release_feedback(course: Course, drops: list[str]) -> str:
    check_known(course, drops)
    check_exchange_ready(course)
    lines, api = [], nbgrader_api(course)
    for drop in drops:
        students = sorted({p.parent.parent.name for p in layout.side("feedback", course.root).glob(f"*/{drop}/*.html")})
        if not students:
            raise SystemExit(f"feedback/ has no pages for {drop}: grade it first "
                             f"(python -m autograder.apps.exchange grade {drop})")
        logged_ok(api.release_feedback(drop), f"release_feedback {drop}")
        lines.append(f"{drop}: feedback released for {', '.join(students)}; "
                     f"each runs `nbgrader fetch_feedback {drop}`")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    helps = {"release": "nbgrader release_assignment", "collect": "nbgrader collect, then what cannot be graded",
             "grade": "the course's sandboxed, judged grading; feedback/ and grades.csv",
             "feedback": "nbgrader release_feedback"}
    for name, text in helps.items():
        step = steps.add_parser(name, help=text)
        step.add_argument("drops", nargs="+", metavar="DROP")
        if name == "release":
            step.add_argument("--force", action="store_true", help="replace a drop already in the exchange")
        if name == "collect":
            step.add_argument("--update", action="store_true", help="take submissions newer than those collected")
        if name == "grade":
            step.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    args = parser.parse_args(argv)
    course = load_course(Path.cwd())
    if args.step == "release":
        print(release(course, args.drops, args.force))
    elif args.step == "collect":
        print(collect(course, args.drops, args.update))
    elif args.step == "feedback":
        print(release_feedback(course, args.drops))
    else:
        report = grade(course, args.drops, args.jobs)
        print(report)
        from autograder.apps import report as class_report  # make report's page, for the class graded so far
        if report.graded:
            print(f"the class's report: {class_report.write(class_report.graded(course.root), course.root / 'report')}"
                  f"/index.html")
        print("scores in grades.csv, feedback pages in feedback/; "
              "next: python -m autograder.apps.exchange feedback " + " ".join(args.drops))
        return 1 if report.problems else 0
    return 0
