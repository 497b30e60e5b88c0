"""Running the real nbgrader CLI and its gradebook from a course root."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import course

if TYPE_CHECKING:
    from traitlets.config import Config

ROOT = course.ROOT


def nbgrader(course_root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real nbgrader CLI in `course_root` (its nbgrader_config.py applies).

    nbgrader shells out to `alembic` and starts kernels, so the environment's
    bin/ goes first on PATH even when .venv is not activated; the repository
    root goes on PYTHONPATH for the feedback preprocessor in autograder/.
    Grading kernels run cells back to back, so an early start of the ranks'
    forkserver (threeaxes' prestart) would gain nothing, and in a drop that
    never launches it would cost CPU: THREEAXES_PRESTART=0."""
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                          cwd=course_root, env=nbgrader_env(), check=check, text=True,
                          capture_output=not check)


def nbgrader_env() -> dict[str, str]:
    def prepend(var: str, path: str | Path) -> str:
        return f"{path}{os.pathsep}{os.environ[var]}" if os.environ.get(var) else str(path)
    return {**os.environ, "PATH": prepend("PATH", Path(sys.executable).parent),
            "PYTHONPATH": prepend("PYTHONPATH", ROOT), "THREEAXES_PRESTART": "0"}


def register_assignments(course_root: Path, names: list[str]) -> None:
    """Record each assignment's graded cells in the gradebook (autograde needs
    them); the release it writes goes to a scratch folder, not release/."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            nbgrader(course_root, "generate_assignment", name, "--force",
                     f"--CourseDirectory.release_directory={scratch}")


def gradebook_url(course_root: Path, config: Config) -> str:
    """The course's gradebook database, as nbgrader run in `course_root` opens it (the
    course's db_url is relative: "sqlite:///gradebook.db")."""
    from nbgrader.coursedir import CourseDirectory

    url = CourseDirectory(config=config).db_url
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url[len(prefix):].startswith("/"):
        url = f"{prefix}{Path(course_root).resolve()}/{url[len(prefix):]}"
    return url


def add_students(course_root: Path, students: Iterable[str]) -> None:
    """Every student in the gradebook before the workers start: autograde adds a
    submission's student itself, and two workers adding the same one at once collide."""
    from nbgrader.api import Gradebook
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_root)).load_config()
    os.environ["PATH"] = nbgrader_env()["PATH"]   # a new gradebook is made by running `alembic`
    with Gradebook(gradebook_url(course_root, config)) as gb:
        for student in sorted(set(students)):
            gb.update_or_create_student(student)
