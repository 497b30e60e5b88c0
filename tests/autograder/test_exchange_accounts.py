"""nbgrader's exchange between real accounts: two students, each a system user of their own.

tests/autograder/test_exchange.py runs a whole class as one system user (a HOME per student).
What only separate accounts can show is who may see what, so here each student is
a Unix user created for the test, with a home only they can open and nbgrader's
student id taken from their login name, as on a shared machine or a JupyterHub:

- the exchange folder set up as README says (writable by everyone) is all they share;
- neither can list the exchange's inbound folder, where the other's submission lies,
  nor the feedback folder;
- the instructor collects with nbgrader's owner check on (each submission is owned by
  the student it names), grades, releases feedback, and each student fetches their
  own page and no one else's.

It needs root (to add the users) and a Python they may run: this interpreter where
its folders are open to everyone, else the system's own of the same version with
this environment's packages on PYTHONPATH. Where those packages sit in a folder closed
to others (a clone in a home of mode 700, or under `mktemp -d`), they are first staged
where the students can read them, as an instructor there is told to
(`python -m autograder.apps.hub stage DIR`). Elsewhere it is skipped, saying why.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from grading_harness import Course, answer_ids, load_drop, set_answer, solution_of

from autograder.apps import exchange, hub

DROP = "drop10-oom-at-step-4000"     # graded without ranks: the cheapest drop
STUDENTS = {"threeaxes-ada": "solved", "threeaxes-bo": "blank"}


def _students_python() -> list[str] | None:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path(sys.executable), Path(f"/usr/bin/{version}")):
        if candidate.exists() and hub.open_to_all(candidate):
            return [str(candidate.resolve())]
    return None


def _why_not() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "adding system users needs root on Linux"
    if not shutil.which("useradd") or not shutil.which("userdel"):
        return "no useradd/userdel here"
    if _students_python() is None:
        return "no Python that other users may run (its folders are closed to them)"
    return None


def _students_site(base: Path) -> Path:
    """The packages the students' Python reads: this environment's where others may read them,
    else a copy staged under `base`, as the hub's own class does (tests/browser/test_hub_class.py)."""
    site = hub.course_site()
    if hub.open_to_all(site):
        return site
    return hub.stage(base / "course-env", log=lambda line: None).site


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""),
              pytest.mark.filterwarnings("ignore:Passing unrecognized arguments to super\\(ExchangeReleaseFeedback")]


def _config(home: Path, lines: list[str], owner: int | None = None) -> None:
    folder = home / ".jupyter"
    folder.mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text("\n".join(["c = get_config()", *lines]) + "\n")
    if owner is not None:
        for p in (folder, folder / "nbgrader_config.py"):
            os.chown(p, owner, owner)


class Student:
    def __init__(self, name: str, base: Path, exchange_root: Path, site: Path):
        self.name, self.home, self.site = name, base / name, site
        subprocess.run(["userdel", name], capture_output=True)   # left over from a run that was killed
        subprocess.run(["useradd", "--home-dir", str(self.home), "--no-create-home", "--shell",
                        "/usr/sbin/nologin", "--user-group", name], check=True)
        self.uid, self.gid = pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
        self.home.mkdir(mode=0o700)
        os.chown(self.home, self.uid, self.gid)
        # no student_id: nbgrader takes the login name, as on a real machine
        _config(self.home, ['c.CourseDirectory.course_id = "three-axes"', f'c.Exchange.root = "{exchange_root}"',
                            "c.ExchangeSubmit.strict = True"], owner=self.uid)

    def run(self, *command: str) -> subprocess.CompletedProcess:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONPATH": str(self.site)}
        return subprocess.run([*_students_python(), *command], user=self.uid, group=self.gid, extra_groups=[],
                              env=env, cwd=self.home, capture_output=True, text=True, timeout=120)

    def nbgrader(self, *args: str) -> str:
        done = self.run("-m", "nbgrader", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def may_list(self, folder: Path) -> bool:
        done = self.run("-c", f"import os; os.listdir({str(folder)!r})")
        return done.returncode == 0

    def hand_in(self, nb) -> None:
        path = self.home / DROP / f"{DROP}.ipynb"
        nbformat.write(nb, path)
        os.chown(path, self.uid, self.gid)


@pytest.fixture(scope="module")
def accounts(released):
    base = Path(tempfile.mkdtemp(prefix="threeaxes-accounts-"))
    base.chmod(0o755)
    students = []
    try:
        ex = base / "exchange"
        ex.mkdir()
        ex.chmod(0o777)                  # README: `chmod ugo+rwx` on the exchange root
        # graded by this process (root): the model solution's cell times are read where the run keeps them
        course = Course(base / "instructor", [DROP], released=released, share_limits=True)
        instructor = base / "instructor" / "home"
        _config(instructor, [f'c.Exchange.root = "{ex}"'])   # collect's owner check stays on
        site = _students_site(base)
        students = [Student(name, base, ex, site) for name in STUDENTS]
        saved, here = dict(os.environ), os.getcwd()
        for var in [v for v in os.environ if v.startswith("JUPYTER_")]:
            del os.environ[var]
        os.environ["HOME"] = str(instructor)
        os.chdir(course.root)
        try:
            api_course = exchange.load_course(course.root)
            exchange.release(api_course, [DROP])
            for s in students:
                subprocess.run([sys.executable, "-m", "nbgrader", "db", "student", "add", s.name],
                               cwd=course.root, check=True, capture_output=True, env={**os.environ})
            source = course.source(DROP)
            for s in students:
                s.nbgrader("fetch_assignment", DROP)
                nb = nbformat.read(s.home / DROP / f"{DROP}.ipynb", as_version=4)
                if STUDENTS[s.name] == "solved":
                    for grade_id in answer_ids(source):
                        nb = set_answer(nb, grade_id, solution_of(source, grade_id))
                s.hand_in(nb)
                s.nbgrader("submit", DROP)
            collected = exchange.collect(api_course, [DROP])
            graded = exchange.grade(api_course, [DROP], 2, progress=None)
            released_feedback = exchange.release_feedback(api_course, [DROP])
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(here)
        fetched = {s.name: s.nbgrader("fetch_feedback", DROP) for s in students}
        yield {"base": base, "ex": ex, "course": course, "students": students, "collected": collected,
               "graded": graded, "released": released_feedback, "fetched": fetched}
    finally:
        for s in students:
            subprocess.run(["userdel", s.name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_students_cannot_list_what_others_handed_in_or_got_back(accounts):
    inbound = accounts["ex"] / "three-axes" / "inbound"
    outbound_feedback = accounts["ex"] / "three-axes" / "feedback"
    ada, bo = accounts["students"]
    assert len(os.listdir(inbound)) == 2    # both submissions are there (the instructor sees them)
    for s in (ada, bo):
        assert not s.may_list(inbound) and not s.may_list(outbound_feedback)
    assert not bo.may_list(ada.home) and not ada.may_list(bo.home)


def test_collect_checks_each_submission_belongs_to_its_student(accounts):
    submitted = accounts["course"].root / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted(STUDENTS)
    assert "nothing new" not in accounts["collected"]
    for s in accounts["students"]:   # the exchange kept who handed it in
        in_exchange = next((accounts["ex"] / "three-axes" / "inbound").glob(f"{s.name}+{DROP}+*"))
        assert in_exchange.stat().st_uid == s.uid


def test_each_student_fetches_their_own_feedback_with_their_own_score(accounts):
    scores = {line.split()[0]: line for line in accounts["graded"].scores}
    assert not accounts["graded"].problems
    ada, bo = accounts["students"]
    auto_points = sum(load_drop(accounts["course"].root / "source" / DROP).points.values())
    assert float(scores[ada.name].split(": ", 1)[1].split(" / ")[0]) == auto_points > 0   # written answers wait
    assert scores[bo.name].split(": ", 1)[1].startswith("0 / ")
    for s in (ada, bo):
        pages = sorted(p.relative_to(s.home).as_posix() for p in (s.home / DROP / "feedback").rglob("*.html"))
        assert len(pages) == 1 and pages[0].endswith(f"{DROP}.html"), pages
        page = next((s.home / DROP / "feedback").rglob("*.html"))
        assert page.stat().st_uid == s.uid
        other = (bo if s is ada else ada).name
        assert other not in page.read_text()
