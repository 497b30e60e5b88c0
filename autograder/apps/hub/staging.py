"""The course's environment where every account can read it. The users' servers of a hub with
real accounts run as those accounts; when the course's .venv sits in a folder closed to them (a
clone in a home of mode 700), `python -m autograder.apps.hub stage DIR` copies what their servers
import (the packages, with `threeaxes` itself in place of its editable link back into the clone,
and JupyterLab's settings and assets) into DIR, and `start --env DIR` serves from there. The
grader's package (autograder/, with the hidden tests' references) is never copied."""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder import course
from autograder.apps.hub.machine import HubError, course_site, open_to_all

ROOT = course.ROOT


@dataclass(frozen=True)
class CourseEnv:
    """Where the users' servers find the course's packages and JupyterLab's files."""
    site: Path      # site-packages
    config: Path    # etc/jupyter: server extensions enabled for the environment
    data: Path      # share/jupyter: kernels, JupyterLab's assets and extensions


def this_env() -> CourseEnv:
    """The .venv this runs in."""
    prefix = Path(sys.prefix)
    return CourseEnv(course_site(), prefix / "etc" / "jupyter", prefix / "share" / "jupyter")


def staged_env(folder: Path) -> CourseEnv:
    folder = Path(folder).resolve()
    return CourseEnv(folder / "site-packages", folder / "etc" / "jupyter", folder / "share" / "jupyter")


def _share(src: str, dst: str) -> None:
    """A file others can read: a hard link where the original already is (no second copy of
    torch), a copy made readable where it is not, or where the two folders are on different disks."""
    mode = os.stat(src).st_mode
    if mode & 0o004:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
    os.chmod(dst, mode | 0o044 | (0o011 if mode & 0o100 else 0))


def _open_folders(top: Path) -> None:
    for folder, _, _ in os.walk(top):
        os.chmod(folder, os.stat(folder).st_mode | 0o055)


def stage(folder: Path, log: Callable[[str], object] = print) -> CourseEnv:
    """Copy the course's environment into `folder` (replacing what an earlier stage left there)."""
    folder = Path(folder).resolve()
    env, here = staged_env(folder), this_env()
    if folder == ROOT or ROOT in folder.parents:
        raise HubError(f"stage the course's environment outside the clone ({ROOT}), in a folder every "
                       f"account can open, such as /srv/threeaxes-course")
    log(f"staging the course's environment from {here.site} into {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # editable installs point back into the clone: the course's package is copied in their place
    shutil.copytree(here.site, env.site, symlinks=True, copy_function=_share,
                    ignore=shutil.ignore_patterns("__editable__*"))
    shutil.rmtree(env.site / "threeaxes", ignore_errors=True)
    shutil.copytree(ROOT / "threeaxes", env.site / "threeaxes", copy_function=_share,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for mine, theirs in ((here.config, env.config), (here.data, env.data)):
        if mine.is_dir():
            shutil.copytree(mine, theirs, symlinks=True, copy_function=_share)
        else:
            theirs.mkdir(parents=True)
    _open_folders(folder)
    if not open_to_all(env.site):
        closed = next(p for p in [env.site, *env.site.parents] if not p.stat().st_mode & 0o001)
        raise HubError(f"{folder} is staged, but {closed} is closed to other accounts: stage into a folder "
                       f"every account can open (such as /srv/threeaxes-course), or chmod o+x {closed}")
    return env
