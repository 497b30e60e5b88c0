"""What each exchange step checks first, each with the fix in its message."""
from __future__ import annotations

import difflib

from autograder import course as layout  # `course` names the Course here
from autograder.apps.exchange.course import Course
from autograder.apps.grade import refused


def check_known(course: Course, drops: list[str]) -> None:
    names = layout.drops(course.root)
    for drop in drops:
        if drop not in names:
            near = difflib.get_close_matches(drop, names, n=1, cutoff=0.3)
            raise SystemExit(f"there is no drop {drop!r} in source/"
                             + (f"; did you mean {near[0]}?" if near else f"; the drops are {', '.join(names)}"))


def check_exchange_ready(course: Course) -> None:
    if not course.exchange.is_dir():
        raise SystemExit(
            f"the exchange folder {course.exchange} does not exist. Create it once, writable by every "
            f"user (sudo mkdir -p {course.exchange} && sudo chmod ugo+rwx {course.exchange}), and name it "
            f"as c.Exchange.root in nbgrader_config.py (in /etc/jupyter/ for every user of the machine).")


def check_released(course: Course, drops: list[str]) -> None:
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


def collected_times(course: Course, drop: str) -> dict[str, str]:
    """{student: the timestamp of what nbgrader collect put in submitted/<student>/<drop>/}."""
    return {p.parent.parent.name: p.read_text().strip()
            for p in layout.side("submitted", course.root).glob(f"*/{drop}/timestamp.txt")}


def waiting_students(course: Course, drop: str, collected: dict[str, str]) -> list[str]:
    """Students whose newest submission in the exchange is newer than the collected one."""
    from nbgrader.utils import parse_utc

    newest: dict[str, str] = {}
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
