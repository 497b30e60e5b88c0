"""What in nbgrader's exchange keeps students from listing, fetching or submitting, each
with its fix: `python -m autograder.apps.hub check`."""
from __future__ import annotations

from pathlib import Path

from autograder.apps.hub.settings import COURSE_ID


def check_exchange(exchange: Path, course_id: str = COURSE_ID) -> list[str]:
    """What in the exchange keeps students from listing, fetching or submitting (the
    Assignments tab then shows nothing, or "Error fetching assignment"), each with its fix."""
    exchange = Path(exchange)
    if not exchange.is_dir():
        return [f"the exchange {exchange} does not exist: sudo mkdir -p {exchange} && sudo chmod ugo+rwx {exchange}"]
    problems = []
    if exchange.stat().st_mode & 0o777 != 0o777:
        problems.append(f"the exchange {exchange} is {oct(exchange.stat().st_mode & 0o777)[2:]}, not writable by "
                        f"every user: sudo chmod ugo+rwx {exchange}")
    course = exchange / course_id
    if not course.is_dir():
        others = sorted(p.name for p in exchange.iterdir() if p.is_dir())
        if others:
            problems.append(f"nothing was released for the course {course_id!r}, but the exchange holds "
                            f"{', '.join(others)}: students' nbgrader_config.py and the instructor's must name the "
                            f"same c.CourseDirectory.course_id")
        return problems
    for folder, need, what in ((course, 0o005, "enter it"), (course / "inbound", 0o003, "submit into it"),
                               (course / "outbound", 0o005, "list it"), (course / "feedback", 0o001, "fetch from it")):
        if folder.is_dir() and folder.stat().st_mode & need != need:
            problems.append(f"students cannot {what}: {folder} is {oct(folder.stat().st_mode & 0o777)[2:]}; "
                            f"sudo chmod o+{'rwx'[1:] if need == 0o003 else 'rx' if need == 0o005 else 'x'} {folder}")
    outbound = course / "outbound"
    for drop in sorted(outbound.iterdir()) if outbound.is_dir() else []:
        closed = [p for p in [drop, *drop.rglob("*")]
                  if p.stat().st_mode & (0o005 if p.is_dir() else 0o004) != (0o005 if p.is_dir() else 0o004)]
        if closed:
            problems.append(f"{drop.name} is released but students cannot read {len(closed)} of its files "
                            f"(first: {closed[0]}), so the tab cannot fetch it: sudo chmod -R o+rX {drop}, or "
                            f"release it again with a umask of 022 (python -m autograder.apps.exchange release --force "
                            f"{drop.name})")
    return problems
