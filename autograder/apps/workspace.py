"""The student's own copy of the course (what `make lab` and `make reset` run).

Students work in `work/` (git-ignored), never in the tracked notebooks, so a
`git pull` that brings a new drop never meets a notebook JupyterLab saved over.
`work/` mirrors the repository's layout, so the start page's relative links
(`../release/<drop>/<drop>.ipynb`, `practice.ipynb`) resolve inside it:

    work/notebooks/*.ipynb        copies of notebooks/*.ipynb
    work/release/<drop>/...       copies of release/<drop>/...

* `sync` copies what the student lacks and never touches a file that exists:
  the first run creates `work/`, later runs add new drops and new notebooks,
  and name the files the course changed since they were copied.
* `reset(drop)` renames the student's files of one drop to
  `<name>.bak-<timestamp>` and copies the release's files again.
* `lab_command` builds the JupyterLab command: student mode (default) serves
  `work/`, opens its start page from the printed URL and switches nbgrader's
  instructor interface off; instructor mode serves the repository root with
  nbgrader whole. Both hide build folders from the file browser.

`python -m autograder.apps.workspace sync | reset DROP | lab [--instructor]`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course

ROOT = course.ROOT
WORK = "work"
START_PAGE = "notebooks/00-start-here.ipynb"

# What the file browser hides: jupyter_server's defaults plus build folders.
HIDE_GLOBS = [
    "__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~",    # jupyter_server's defaults
    "*.egg-info", ".pytest_cache", ".ipynb_checkpoints", "build", "dist",
]

# nbgrader's instructor side, switched off in student mode. The server
# extensions answer the formgrader and course-list pages and the assignment
# list (which needs a JupyterHub exchange a local checkout lacks); the lab
# plugins are the menu, panels and cell toolbar that call them. Validate stays: it
# runs a student's notebook and reports failing checks.
NBGRADER_SERVER_OFF = [
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
]
NBGRADER_LAB_OFF = [
    "@jupyter/nbgrader:menu",             # the Nbgrader menu: assignment list, courses, formgrader
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
]
# JupyterLab's own, off for students too: the "get notified about official Jupyter news?"
# pop-up that greets a new server, and its check for updates (JupyterLab's documented way,
# user/announcements: disable this plugin)
LAB_NEWS = "@jupyterlab/apputils-extension:announcements"


@dataclass
class SyncReport:
    added: list[Path] = field(default_factory=list)   # copied now, relative to work/
    kept: list[Path] = field(default_factory=list)    # already there, left as the student has it
    updated: list[Path] = field(default_factory=list)  # kept, but the course changed it since the copy


# work/.copied.json: the digest of each course file when it was copied, so a
# later run can tell the student the course changed a file they hold.
RECORD = ".copied.json"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_record(work: Path) -> dict[str, str]:
    path = work / RECORD
    return json.loads(path.read_text()) if path.exists() else {}


def write_record(work: Path, record: dict[str, str]) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def course_files(root: Path = ROOT) -> list[Path]:
    """Every file a student gets a copy of, relative to the repository root."""
    files = sorted(p.relative_to(root) for p in course.notebooks(root).glob("*.ipynb"))
    for drop in (course.folder(name, root, of="release") for name in course.drops(root, of="release")):
        files += sorted(p.relative_to(root) for p in drop.rglob("*")
                        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(drop).parts))
    return files


def copy_course_file(root: Path, work: Path, rel: Path, record: dict[str, str]) -> None:
    target = work / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / rel, target)
    record[rel.as_posix()] = digest(root / rel)


def sync(root: Path = ROOT, work: Path | None = None) -> SyncReport:
    """Copy into `work` every course file it lacks; never overwrite one it has.
    A kept file whose course version changed since it was copied is reported
    in `updated` (the student takes it with `reset`)."""
    work = work or root / WORK
    report = SyncReport()
    record = read_record(work)
    for rel in course_files(root):
        if (work / rel).exists():
            report.kept.append(rel)
            copied = record.get(rel.as_posix())
            if copied is not None and copied != digest(root / rel):
                report.updated.append(rel)
            continue
        copy_course_file(root, work, rel, record)
        report.added.append(rel)
    write_record(work, record)
    return report


def drops(root: Path = ROOT) -> list[str]:
    return course.drops(root, of="release")


def backup_name(path: Path, stamp: str) -> Path:
    """`<name>.bak-<stamp>`, with `-2`, `-3`... when that name is taken."""
    candidate, n = path.with_name(f"{path.name}.bak-{stamp}"), 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
    return candidate


def reset(drop: str, root: Path = ROOT, work: Path | None = None, stamp: str | None = None) -> list[Path]:
    """Put the release's copy of `drop` back in `work`; returns the backups made."""
    work = work or root / WORK
    known = drops(root)
    if drop not in known:
        raise ValueError(
            f"no drop named {drop!r} in release/; reset one of: {', '.join(known)} "
            f"(e.g. `make reset DROP={known[0]}`)" if known else f"release/ holds no drops to reset {drop!r} to"
        )
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    backups, record = [], read_record(work)
    for rel in [p for p in course_files(root) if p.parts[:2] == ("release", drop)]:
        target = work / rel
        if target.exists():
            backup = backup_name(target, stamp)
            target.rename(backup)
            backups.append(backup)
        copy_course_file(root, work, rel, record)
    write_record(work, record)
    return backups


def write_student_config(config_dir: Path) -> Path:
    """A Jupyter config folder holding the lab page config that disables
    nbgrader's instructor plugins and JupyterLab's news; added to JUPYTER_CONFIG_PATH
    for one launch."""
    page_config = config_dir / "labconfig" / "page_config.json"
    page_config.parent.mkdir(parents=True, exist_ok=True)
    disabled = {"disabledExtensions": {name: True for name in [*NBGRADER_LAB_OFF, LAB_NEWS]}}
    page_config.write_text(json.dumps(disabled, indent=1) + "\n")
    return config_dir


def lab_command(
    mode: str = "student", root: Path = ROOT, work: Path | None = None, extra: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that start JupyterLab in `mode` ("student" or "instructor")."""
    if mode not in ("student", "instructor"):
        raise ValueError(
            f"mode {mode!r} is not known; use mode='student' (make lab) or 'instructor' (make lab-instructor)"
        )
    work = work or root / WORK
    serve = work if mode == "student" else root
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={serve}"]
    # the printed URL is the server's default_url: make it the start page, not the Launcher
    argv.append(f"--LabApp.default_url=/lab/tree/{START_PAGE}")
    argv += [f"--ContentsManager.hide_globs={glob}" for glob in HIDE_GLOBS]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")   # Jupyter refuses root unless told; containers often are root
    env = dict(os.environ)
    if mode == "instructor":   # the source notebooks' hidden tests import autograder.references
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    if mode == "student":
        argv += [f"--ServerApp.jpserver_extensions={name}=False" for name in NBGRADER_SERVER_OFF]
        config_dir = write_student_config(work / ".jupyter-student")
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(config_dir), env.get("JUPYTER_CONFIG_PATH")]))
    return argv + list(extra or []), env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autograder.apps.workspace", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="copy new drops and notebooks into work/, overwriting nothing")
    reset_parser = sub.add_parser("reset", help="back up your copy of one drop and take the release's again")
    reset_parser.add_argument("drop", nargs="?", default="")
    lab = sub.add_parser("lab", help="sync, then start JupyterLab on work/ (student mode)")
    lab.add_argument("--instructor", action="store_true", help="serve the repository root with nbgrader's formgrader")
    args, extra = parser.parse_known_args(argv)

    if args.command == "reset":
        if not args.drop:
            parser.exit(2, f"say which drop: make reset DROP=<one of {', '.join(drops(ROOT))}>\n")
        try:
            backups = reset(args.drop, ROOT)
        except ValueError as error:
            parser.exit(2, f"{error}\n")
        for backup in backups:
            print(f"your copy is kept as {backup.relative_to(ROOT)}")
        print(f"{WORK}/release/{args.drop} now holds the release's copy")
        return
    if args.command == "sync" or not args.instructor:
        report = sync(ROOT)
        new = sorted({rel.parts[1] if rel.parts[0] == "release" else rel.name for rel in report.added})
        if new:
            print(f"new in {WORK}/: {', '.join(new)}")
        print(f"{WORK}/ is your copy of the course; {len(report.kept)} files already there were left as they are")
        for rel in report.updated:
            if rel.parts[0] == "release":
                take = f"`make reset DROP={rel.parts[1]}` takes it and keeps yours as a backup"
            else:
                take = f"rename your {WORK}/{rel} and run `make lab` again to take it"
            print(f"the course has a newer {rel} than your copy; {take}")
        if args.command == "sync":
            return
    command, env = lab_command("instructor" if args.instructor else "student", root=ROOT, extra=extra)
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
