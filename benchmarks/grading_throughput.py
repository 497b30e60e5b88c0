"""Grading throughput: `make grade` (sandboxed, judged, parallel) against plain serial
`nbgrader autograde`, and against the notebooks' own run time.

    python benchmarks/grading_throughput.py [--students 40] [--drops drop01,drop04] [--jobs 1,2]

One course in a temporary folder; every student submits the release of each
chosen drop with every solution typed in. Measured, in one run:

* own:      each drop's notebook executed once by nbclient, nothing else (the
            floor: what running the student's notebook costs);
* baseline: stock nbgrader (its own Execute preprocessor, test cells in the
            student's kernel), one `nbgrader autograde "*"` call, serial;
* ours:     `autograder.apps.grade.autograde` with `--jobs` N at once, each
            submission its own nbgrader process, sandboxed kernel, test cells
            judged in the grader.

Prints submissions per minute, seconds per submission against the notebook's
own time (the target: at most 1.3x), and each run's speed-up over the baseline.
The default (40 students x every drop) takes hours on 2 cores; the figures in
the closing note name the size they were measured at.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from grading_harness import Course, drops  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from autograder.apps.grade import autograde, nbgrader, submissions  # noqa: E402

STOCK_PREPROCESSORS = ("['nbgrader.preprocessors.Execute', 'nbgrader.preprocessors.IgnorePattern', "
                       "'nbconvert.preprocessors.ClearMetadataPreprocessor', 'nbgrader.preprocessors.LimitOutput', "
                       "'nbgrader.preprocessors.SaveAutoGrades', 'nbgrader.preprocessors.AssignLatePenalties', "
                       "'nbgrader.preprocessors.CheckCellMetadata']")


def build_course(where: Path, names: list[str], students: int) -> Course:
    course = Course(where, names)
    course.release()
    for name in names:
        solved = course.solved_release(name)
        for k in range(1, students + 1):
            course.submit(f"s{k:02d}", name, solved)
    return course


def own_seconds(course: Course, name: str) -> float:
    """The solved release run once by nbclient in a fresh kernel, start to end."""
    nb = course.solved_release(name)
    start = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(course.root)}}).execute()
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--drops", default="", help="comma-separated name prefixes (default: every drop)")
    parser.add_argument("--jobs", default="1,2", help="parallel runs to measure, e.g. 1,2,4")
    args = parser.parse_args(argv)
    chosen = [d.name for d in drops() if not args.drops or d.name.startswith(tuple(args.drops.split(",")))]
    os.environ["THREEAXES_PRESTART"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        course = build_course(Path(tmp), chosen, args.students)
        todo = submissions(course.root)
        n = len(todo)
        own = {name: own_seconds(course, name) for name in chosen}
        own_total = sum(own[a] for a, _ in todo)
        print(f"{n} submissions ({args.students} students x {len(chosen)} drops), {os.cpu_count()} CPUs")
        print("  own run time (nbclient, once per drop): "
              + ", ".join(f"{name[:6]} {s:.1f} s" for name, s in own.items()))

        start = time.perf_counter()
        nbgrader(course.root, "autograde", "*", "--force",
                 f"--Autograde.autograde_preprocessors={STOCK_PREPROCESSORS}")
        baseline = time.perf_counter() - start
        print(f"  baseline  serial stock nbgrader: {baseline:7.1f} s  {60 * n / baseline:5.1f} /min  "
              f"{baseline / own_total:.2f}x own time")
        for jobs in [int(j) for j in args.jobs.split(",")]:
            shutil.rmtree(course.root / "autograded", ignore_errors=True)
            start = time.perf_counter()
            autograde(course.root, todo, jobs, progress=None)
            took = time.perf_counter() - start
            print(f"  ours      jobs={jobs}:                {took:7.1f} s  {60 * n / took:5.1f} /min  "
                  f"{took * jobs / own_total:.2f}x own time per submission per job, "
                  f"{baseline / took:.2f}x the baseline's speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
