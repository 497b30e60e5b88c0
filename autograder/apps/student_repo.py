"""A copy of the course for students, without what only the instructor may see.

    python -m autograder.apps.student_repo ../three-axes-student      (make student-repo)

The course repository holds the solutions and hidden tests (`source/`) and
sample submissions with answers typed in (`autograder/samples/`). An
instructor who grades for credit publishes this export instead: every file
git tracks at HEAD but those, as a new repository with one commit. Students
run `make lab` there as here. Left out with them: the test suite and the
grading benchmarks, which need `source/`, the grading code, which needs
the gradebook, and the references the hidden tests compute their answers with
(`autograder/references/`): the package students install holds none, only the
visible checks' stored cases.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from autograder import course

ROOT = course.ROOT
INSTRUCTOR_ONLY = ("source/", "autograder/samples/", "submitted/", "tests/", ".ci/",
                   "benchmarks/grading_suite.py", "autograder/apps/grade/", "autograder/plugins/execute.py",
                   "autograder/judging/judge.py", "autograder/apps/judge_check.py",
                   "autograder/runtime/kernel_host.py", "autograder/runtime/kernel_session.py",
                   "autograder/runtime/sandbox.py", "autograder/plugins/feedback.py",
                   "autograder/apps/release.py", "autograder/apps/student_repo.py", "autograder/references/",
                   "autograder/cases.py", "autograder/judging/borrowed.py", "autograder/judging/oracle.py",
                   "autograder/withheld.py", "autograder/apps/grade_worker.py", "autograder/apps/report.py",
                   "autograder/apps/config_cases.py", "autograder/apps/exchange/",
                   "autograder/runtime/cell_runner.py", "autograder/judging/warm_start.py",
                   "autograder/runtime/forked_kernel.py", "autograder/runtime/host_forkserver.py")


def student_files(root: Path = ROOT) -> list[str]:
    tracked = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True,
                             text=True).stdout.splitlines()
    return [f for f in tracked if not f.startswith(INSTRUCTOR_ONLY)]


def export(dest: Path, root: Path = ROOT) -> list[str]:
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} exists and is not empty: pick a new folder, or remove it first")
    files = student_files(root)
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                            text=True).stdout.strip()
    git = ["git", "-c", "user.name=Three Axes", "-c", "user.email=course@localhost"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"Three Axes for students (from {commit})"],
                   cwd=dest, check=True)
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    files = export(args.dest)
    print(f"{len(files)} files in {args.dest} (no source/, samples or grading code); "
          f"publish it and let students run `make lab` there", file=sys.stderr)


if __name__ == "__main__":
    main()
