"""The steps of the hub's browser test that are not a page (tests/browser/test_hub_class.py):
the class's Unix accounts, a command as one of them, the instructor's exchange steps, and the
message the hub gives for a server it refuses to start."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
from pathlib import Path

from autograder.apps import hub

PREFIX = "taxhub-"
INSTRUCTOR = PREFIX + "teach"
ADA, BO, CY, DEE = (PREFIX + n for n in ("ada", "bo", "cy", "dee"))   # dee: an account with no home


def remove_accounts() -> None:
    for name in (INSTRUCTOR, ADA, BO, CY, DEE):
        if hub.has_account(name):
            home = Path(hub.pwd_entry(name).pw_dir)
            subprocess.run(["userdel", name], capture_output=True)
            if home.name == name and home.parent == Path("/home"):
                shutil.rmtree(home, ignore_errors=True)


def as_account(name: str, *argv: str) -> subprocess.CompletedProcess:
    """A command as `name`'s own account, as in a terminal of theirs."""
    entry = hub.pwd_entry(name)
    return subprocess.run(list(argv), user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                          env={"HOME": entry.pw_dir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=60)


class Instructor:
    """The instructor's steps, `python -m autograder.apps.exchange release|collect|grade|feedback`, in
    this process (what its main() calls: a new interpreter and nbgrader import per step costs
    tens of seconds on a loaded 2-core machine), in the course folder with the hub's nbgrader
    config; the folder is handed back to the instructor's account after each step (their
    formgrader writes the gradebook)."""

    def __init__(self, course: Path, state: Path, home: Path):
        self.course, self.state, self.home = course, state, home
        home.mkdir(parents=True, exist_ok=True)

    def __call__(self, step, *args):
        from autograder.apps import exchange

        t0 = time.perf_counter()
        saved, here = dict(os.environ), os.getcwd()
        for var in [v for v in os.environ if v.startswith("JUPYTER")]:
            del os.environ[var]
        os.environ.update(HOME=str(self.home), JUPYTER_CONFIG_PATH=str(self.state / "jupyter" / "instructor"))
        os.chdir(self.course)
        try:
            course = exchange.load_course(self.course)
            if step == "roster":
                with course.gradebook() as gb:
                    for name in args:
                        gb.update_or_create_student(name, first_name=name.split("-")[1].title(), last_name="Student")
                return ""
            steps = {"release": exchange.release, "collect": exchange.collect,
                     "feedback": exchange.release_feedback}
            if step == "grade":
                from autograder.apps import report
                graded = exchange.grade(course, list(args), 2, progress=None)
                report.write(report.graded(course.root), course.root / "report")   # as exchange.main does
                return str(graded)
            return steps[step](course, list(args))
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(here)
            entry = hub.pwd_entry(INSTRUCTOR)
            subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(self.course)], check=True)
            print(f"instructor: {step} {time.perf_counter() - t0:.1f} s", flush=True)


def spawn_refused(class_hub: hub.Hub, name: str) -> str:
    """The message the hub gives for a server that may not start (the page shows the same)."""
    try:
        class_hub.api("POST", f"/users/{name}/server")
    except urllib.error.HTTPError as error:
        return error.read().decode()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:    # a slow refusal arrives as a failed spawn
        user = class_hub.api("GET", f"/users/{name}")
        if not (user.get("servers") or {}).get(""):
            break
        time.sleep(0.3)
    progress = class_hub.request("GET", f"/hub/api/users/{name}/server/progress", raw=True, timeout=30)
    return progress
