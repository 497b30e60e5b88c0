"""For tests/autograder/test_exchange.py: a test user as this process with its own HOME
and working folder, nbgrader's command line typed by that user, their nbgrader_config.py,
the folders the exchange fills, the links a student writes into inbound/ by hand, and a
submission as the gradebook holds it."""
from __future__ import annotations

import io
import logging
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import nbformat

SECRET = "root-only-secret-5e0c"      # in the file only root may read (plant_links)
JUPYTER_VARS = ("JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH", "JUPYTER_DATA_DIR", "JUPYTER_PATH",
                "JUPYTER_RUNTIME_DIR")


# -- users -------------------------------------------------------------------------------
@contextmanager
def as_user(home: Path, cwd: Path | None = None):
    """This process as `home`'s user: HOME (so nbgrader reads ~/.jupyter/nbgrader_config.py
    and keeps its submission cache in ~/.local/share/jupyter) and the working folder."""
    saved, here = dict(os.environ), os.getcwd()
    for var in JUPYTER_VARS:
        os.environ.pop(var, None)
    os.environ["HOME"] = str(home)
    os.chdir(cwd or home)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(here)


def nbgrader_as(home: Path, *args: str, cwd: Path | None = None) -> SimpleNamespace:
    """`nbgrader ARGS` typed by `home`'s user: (rc, log)."""
    from jupyter_core.application import NoStart
    from nbgrader.apps import NbGraderApp

    log = io.StringIO()
    with as_user(home, cwd):
        app = NbGraderApp.instance()
        try:
            app.initialize(list(args))
            app.init_logging(logging.StreamHandler, [log], color=False, subapps=True)
            app.start()
            rc = 0
        except NoStart:   # a command with subcommands (`db student import`) ends this way
            rc = 0
        except SystemExit as stop:
            rc = stop.code or 0
        finally:
            app.reset()
    return SimpleNamespace(rc=rc, log=log.getvalue())


def write_config(home: Path, lines: list[str]) -> None:
    (home / ".jupyter").mkdir(parents=True)
    (home / ".jupyter" / "nbgrader_config.py").write_text("\n".join(["c = get_config()", *lines]) + "\n")


def student_config(home: Path, student: str, exchange_root: Path) -> None:
    write_config(home, [
        'c.CourseDirectory.course_id = "three-axes"',
        f'c.Exchange.root = "{exchange_root}"',
        # refuse a submission whose notebook is missing or renamed, before it leaves
        "c.ExchangeSubmit.strict = True",
        # only because every test user is one system user; nbgrader takes the login name
        f'c.CourseDirectory.student_id = "{student}"',
    ])


def notebook_path(home: Path, drop: str) -> Path:
    return home / drop / f"{drop}.ipynb"


def inbound(exchange_root: Path) -> list[str]:
    return sorted(p.name for p in (exchange_root / "three-axes" / "inbound").iterdir())


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def plant_links(ex: Path, course_root: Path, base: Path, drop: str, blank) -> None:
    """What students can write into inbound/ without nbgrader submit (the second red team's
    attack): frank's entry is a link to the instructor's source folder; grace's holds her
    notebook as a link to the source notebook; heidi's holds her own blank notebook and,
    beside it, links to the gradebook and to a file only root may read."""
    inbound = ex / "three-axes" / "inbound"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    secret = base / "root-only.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    (inbound / f"frank+{drop}+{stamp}+aaaa").symlink_to(course_root / "source" / drop, target_is_directory=True)
    grace = inbound / f"grace+{drop}+{stamp}+bbbb"
    grace.mkdir()
    (grace / f"{drop}.ipynb").symlink_to(course_root / "source" / drop / f"{drop}.ipynb")
    (grace / "timestamp.txt").write_text(stamp)
    heidi = inbound / f"heidi+{drop}+{stamp}+cccc"
    heidi.mkdir()
    nbformat.write(blank, heidi / f"{drop}.ipynb")
    (heidi / "timestamp.txt").write_text(stamp)
    (heidi / "gradebook.db").symlink_to(course_root / "gradebook.db")
    (heidi / "notes.txt").symlink_to(secret)


def gradebook_submission(k, drop, student):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{k.course.root / 'gradebook.db'}") as gb:
        sub = gb.find_submission(drop, student)
        return SimpleNamespace(score=sub.score, max_score=sub.max_score, late=sub.total_seconds_late,
                               timestamp=sub.timestamp)
