"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde: the notebook is run with the hidden tests put back
      -> feedback/     nbgrader generate_feedback: HTML per student, hidden tests removed
      -> grades.csv    nbgrader export

`--demo` first copies the sample submissions in autograder/samples/ into
submitted/, so the whole path can be tried on a fresh clone.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"


def nbgrader(course_root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real nbgrader CLI in `course_root` (its nbgrader_config.py applies).

    nbgrader shells out to `alembic` and starts kernels, so the environment's
    bin/ goes first on PATH even when .venv is not activated; the repository
    root goes on PYTHONPATH for the feedback preprocessor in autograder/.
    Grading kernels run cells back to back, so an early start of the ranks'
    forkserver (threeaxes' prestart) would gain nothing, and in a drop that
    never launches it would cost CPU: THREEAXES_PRESTART=0."""
    def prepend(var, path):
        return f"{path}{os.pathsep}{os.environ[var]}" if os.environ.get(var) else str(path)
    env = {**os.environ, "PATH": prepend("PATH", Path(sys.executable).parent),
           "PYTHONPATH": prepend("PYTHONPATH", ROOT), "THREEAXES_PRESTART": "0"}
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                          cwd=course_root, env=env, check=check, text=True, capture_output=not check)


def register_assignments(course_root: Path, names: list[str]) -> None:
    """Record each assignment's graded cells in the gradebook (autograde needs
    them); the release it writes goes to a scratch folder, not release/."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            nbgrader(course_root, "generate_assignment", name, "--force",
                     f"--CourseDirectory.release_directory={scratch}")


def submitted_assignments(course_root: Path) -> list[str]:
    return sorted({p.parent.name for p in (course_root / "submitted").glob("*/*/*.ipynb")})


def grade_all(course_root: Path) -> list[str]:
    names = submitted_assignments(course_root)
    if not names:
        raise SystemExit("submitted/ holds no notebooks. Collect them first "
                         "(submitted/<student>/<assignment>/<assignment>.ipynb), or run `make grade-demo`.")
    register_assignments(course_root, names)
    for name in names:
        nbgrader(course_root, "autograde", name, "--force")
        nbgrader(course_root, "generate_feedback", name, "--force")
    nbgrader(course_root, "export", "--to=grades.csv")
    return names


def copy_samples(course_root: Path) -> None:
    for nb in sorted(SAMPLES.glob("*/*/*.ipynb")):
        dest = course_root / "submitted" / nb.relative_to(SAMPLES)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, dest)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="grade the sample submissions")
    args = parser.parse_args(argv)
    if args.demo:
        copy_samples(ROOT)
    names = grade_all(ROOT)
    print(f"graded {', '.join(names)}: scores in grades.csv, feedback in feedback/")
    print((ROOT / "grades.csv").read_text())


if __name__ == "__main__":
    main()
