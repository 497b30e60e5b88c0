"""The instructor's side of nbgrader's exchange, with the course's own grading.

    python -m autograder.apps.exchange release  DROP...            nbgrader release_assignment (the drop is
                                                               recorded in the gradebook first if it is not)
    python -m autograder.apps.exchange collect  DROP... [--update]  nbgrader collect, then who came in and what
                                                               cannot be graded as it is
    python -m autograder.apps.exchange grade    DROP... [--jobs N]  what was collected, through `make grade`'s
                                                               sandboxed, judged autograde; feedback/, grades.csv
    python -m autograder.apps.exchange feedback DROP...            nbgrader release_feedback (each student then
                                                               runs `nbgrader fetch_feedback DROP`)

Run it in the course root (this repository): nbgrader reads the course from its
nbgrader_config.py, and the exchange's folder from `c.Exchange.root` in one of
nbgrader's config files (/etc/jupyter/ or ~/.jupyter/nbgrader_config.py).
The students use nbgrader's own commands (fetch_assignment, submit,
fetch_feedback). The instructor's nbgrader steps run through nbgrader's Python
API (`nbgrader.apps.api.NbGraderAPI`, what the formgrader calls) in this one
process, so each costs no new interpreter and nbgrader import (seconds each on
2 cores). Collect never follows a link a student wrote into the exchange, and takes
a submission only when it is the notebook alone (autograder/plugins/safe_collect.py). Bad
input is refused with what to do about it, and no step deletes a
submission: one that cannot be graded stays in submitted/ (and in the
exchange) and is named in the report, with its cause and the log file under
.graded/.logs/ that holds the rest (autograder/apps/grade/); an earlier grading's
autograded notebook and feedback page of it are removed, so that no stale page
is released. The others are graded, get their feedback pages and grades.csv.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course as layout  # `course` names the Course in this module
from autograder.apps.grade import (
    feedback_failures,
    forget,
    grade_submissions,
    gradebook_url,
    pending,
    refused,
    register_assignments,
)
from autograder.course import ROOT
from autograder.plugins import core_points

CONFIG = "nbgrader_config.py"


@dataclass(frozen=True)
class Course:
    root: Path
    course_id: str
    exchange: Path     # c.Exchange.root: <exchange>/<course_id>/{outbound,inbound,feedback}
    db_url: str
    config: object = field(repr=False, compare=False)   # nbgrader's merged traitlets Config

    @property
    def outbound(self) -> Path:
        return self.exchange / self.course_id / "outbound"

    @property
    def inbound(self) -> Path:
        return self.exchange / self.course_id / "inbound"

    def gradebook(self):
        from nbgrader.api import Gradebook
        return Gradebook(self.db_url, self.course_id)


def load_course(root: Path = ROOT) -> Course:
    """The course as nbgrader's commands see it from `root`: the config files in
    nbgrader's order (system folders, ~/.jupyter, then the course's own, which wins)."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import Exchange
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    root = Path(root).resolve()
    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(root)]:
        if (Path(folder) / CONFIG).is_file():
            config.merge(PyFileConfigLoader(CONFIG, path=folder).load_config())
    config.CourseDirectory.root = str(root)
    db_url = gradebook_url(root, config)
    config.CourseDirectory.db_url = db_url
    course_id = CourseDirectory(config=config).course_id
    return Course(root, course_id, Path(Exchange(config=config).root), db_url, config)


def _api(course: Course, **settings):
    """nbgrader's API on the course; `settings`: {"Section.key": value} on top of its config."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config(course.config)
    # collect never follows a link a student wrote into inbound/ (autograder/plugins/safe_collect.py)
    config.ExchangeFactory.collect = "autograder.plugins.safe_collect.SafeCollect"
    for key, value in settings.items():
        section, name = key.split(".")
        config[section][name] = value
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def _ok(result: dict, what: str) -> str:
    """The log of an NbGraderAPI call; what nbgrader said, when it failed."""
    if not result.get("success"):
        said = (result.get("log") or "") + (result.get("error") or "")
        raise SystemExit(f"nbgrader {what} failed:\n{said[-3000:]}")
    return result.get("log") or ""


# -- checks, each with the fix in its message -----------------------------------------
def _known(course: Course, drops: list[str]) -> None:
    names = layout.drops(course.root)
    for drop in drops:
        if drop not in names:
            near = difflib.get_close_matches(drop, names, n=1, cutoff=0.3)
            raise SystemExit(f"there is no drop {drop!r} in source/"
                             + (f"; did you mean {near[0]}?" if near else f"; the drops are {', '.join(names)}"))


def _exchange_ready(course: Course) -> None:
    if not course.exchange.is_dir():
        raise SystemExit(
            f"the exchange folder {course.exchange} does not exist. Create it once, writable by every "
            f"user (sudo mkdir -p {course.exchange} && sudo chmod ugo+rwx {course.exchange}), and name it "
            f"as c.Exchange.root in nbgrader_config.py (in /etc/jupyter/ for every user of the machine).")


def _released(course: Course, drops: list[str]) -> None:
    for drop in drops:
        if not (course.outbound / drop).is_dir():
            done = sorted(p.name for p in course.outbound.glob("*")) if course.outbound.is_dir() else []
            raise SystemExit(f"{drop} was never released to the exchange ({course.outbound / drop} does not "
                             f"exist; released: {', '.join(done) or 'nothing yet'}). Release it first: "
                             f"python -m autograder.apps.exchange release {drop}")


def roster(course: Course) -> list[str]:
    """The student ids in the gradebook (`nbgrader db student import roster.csv`)."""
    with course.gradebook() as gb:
        return sorted(s.id for s in gb.students)


def _collected(course: Course, drop: str) -> dict[str, str]:
    """{student: the timestamp of what nbgrader collect put in submitted/<student>/<drop>/}."""
    return {p.parent.parent.name: p.read_text().strip()
            for p in layout.side("submitted", course.root).glob(f"*/{drop}/timestamp.txt")}


def _waiting(course: Course, drop: str, collected: dict[str, str]) -> list[str]:
    """Students whose newest submission in the exchange is newer than the collected one."""
    from nbgrader.utils import parse_utc

    newest = {}
    for path in course.inbound.glob(f"*+{drop}+*"):
        student, _, stamp = path.name.rsplit("+", 3)[:3]   # student+drop+timestamp[+random]
        newest[student] = max(newest.get(student, stamp), stamp, key=parse_utc)
    return sorted(s for s, stamp in newest.items()
                  if s in collected and parse_utc(stamp) > parse_utc(collected[s]))


def problem(course: Course, drop: str, student: str, students: list[str]) -> str | None:
    """Why submitted/<student>/<drop>/ cannot be graded as it is, or None."""
    import nbformat

    where = f"submitted/{student}/{drop}/"
    kept = f"Not graded; nothing was deleted ({where} and the exchange keep it)."
    if student not in students:
        return (f"{student}/{drop}: {student!r} is not in the roster ("
                + (f"the gradebook's students: {', '.join(students)}" if students else "the roster is empty")
                + f"). If they are in the class: nbgrader db student add {student} --first-name=... "
                f"--last-name=..., then grade again; if not, delete {where}. {kept}")
    folder = course.root / where
    why = refused(course.root, drop, student)
    if why and "holds no notebook" not in why:   # a link, a device, a folder, another file: read nothing
        return f"{student}/{drop}: {why}. {kept}"
    for expected in sorted(layout.folder(drop, course.root, of="release").glob("*.ipynb")):
        path = folder / expected.name
        if not path.is_file():
            others = sorted(p.name for p in folder.glob("*.ipynb"))
            fix = (f"it holds {', '.join(others)}: if that is the student's work, rename it to "
                   f"{expected.name} in {where} and grade again" if others else
                   f"it holds no notebook: ask {student} to submit again")
            return f"{student}/{drop}: the notebook {expected.name} is missing; {fix}. {kept}"
        try:
            nbformat.read(path, as_version=4)
        except Exception as error:  # noqa: BLE001 - nbformat: NotJSONError, a dict that is not a notebook, bad bytes
            reason = str(error).splitlines()[0][:200]
            return (f"{student}/{drop}: {expected.name} is not a notebook ({type(error).__name__}: {reason}). "
                    f"Ask {student} to submit it again from JupyterLab (nbgrader submit {drop}), then "
                    f"collect --update {drop} and grade again. {kept}")
    return None


def check_submissions(course: Course, drops: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """([(drop, student) that can be graded], [what is wrong with each of the others])."""
    students, good, problems = roster(course), [], []
    for drop in drops:
        for folder in sorted(layout.side("submitted", course.root).glob(f"*/{drop}")):
            why = problem(course, drop, folder.parent.name, students)
            (problems.append(why) if why else good.append((drop, folder.parent.name)))
    return good, problems


# -- the four steps -------------------------------------------------------------------
def release(course: Course, drops: list[str], force: bool = False) -> str:
    _known(course, drops)
    _exchange_ready(course)
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
    api = _api(course, **({"ExchangeReleaseAssignment.force": True} if force else {}))
    for drop in drops:
        _ok(api.release_assignment(drop), f"release_assignment {drop}")
    lines = [f"released {', '.join(drops)}: students run `nbgrader fetch_assignment <drop>`"]
    if not roster(course):
        lines.append("the roster is empty: nbgrader db student import roster.csv "
                     "(columns id,first_name,last_name,email) before grading")
    return "\n".join(lines)


def collect(course: Course, drops: list[str], update: bool = False) -> str:
    _known(course, drops)
    _exchange_ready(course)
    _released(course, drops)
    lines, api = [], _api(course)
    for drop in drops:
        before = _collected(course, drop)
        _ok(api.collect(drop, update=update), f"collect {drop}")
        from autograder.plugins.safe_collect import SafeCollect

        lines += [f"not collected: {why}. Nothing of it was read or copied; ask the student to submit "
                  f"the notebook alone (nbgrader submit {drop})" for why in SafeCollect.refused]
        after = _collected(course, drop)
        new = sorted(set(after) - set(before))
        updated = sorted(s for s in before if s in after and after[s] != before[s])
        if new or updated:
            lines.append(f"{drop}: collected {', '.join(new) or 'nobody new'}"
                         + (f"; updated {', '.join(updated)}" if updated else ""))
        else:
            lines.append(f"{drop}: nothing new to collect ({len(after)} submissions already in submitted/; "
                         f"nothing there was changed)")
        waiting = _waiting(course, drop, after)
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


def grade(course: Course, drops: list[str], jobs: int = 2, *extra: str, progress=sys.stderr) -> Graded:
    """Grade every collected submission of `drops` that can be graded; the others are
    named in `problems` and left as they are. Then feedback/ and grades.csv."""
    _known(course, drops)
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
        api = _api(course)
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
    _known(course, drops)
    _exchange_ready(course)
    lines, api = [], _api(course)
    for drop in drops:
        students = sorted({p.parent.parent.name for p in layout.side("feedback", course.root).glob(f"*/{drop}/*.html")})
        if not students:
            raise SystemExit(f"feedback/ has no pages for {drop}: grade it first "
                             f"(python -m autograder.apps.exchange grade {drop})")
        _ok(api.release_feedback(drop), f"release_feedback {drop}")
        lines.append(f"{drop}: feedback released for {', '.join(students)}; "
                     f"each runs `nbgrader fetch_feedback {drop}`")
    return "\n".join(lines)


def main(argv=None) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
