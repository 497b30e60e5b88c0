"""Every catalogued mistake through the real grading path, in one batch.

    python benchmarks/grade_catalogue.py [--drops drop05,drop06] [--jobs 2]

For each drop, student `catalogue-k` submits the solved release with the k-th
catalogued mistake of every exercise written into its answer cell (exercises are
graded by their own test cells, so one notebook carries one mistake per exercise;
tests/grading_harness.py), and student `solved_source` the solutions. All of it is graded in one `autograde` batch
(sandboxed kernels, test cells judged in the grader). Prints, per exercise, each
mistake's points against the solution's, and whether the feedback names it; exits
1 if a mistake scores as much as the solution or the solution loses a point.

The suite grades the same students (tests/drops/test_grading.py, among the rest of its
class); this grades the catalogue alone and prints its rate.
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from graded_class import catalogue_students  # noqa: E402
from grading_harness import FULL, Course, drops  # noqa: E402

from autograder.apps import report  # noqa: E402
from autograder.apps.grade import autograde, submissions  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drops", default="", help="comma-separated name prefixes (default: every drop)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    chosen = [d.name for d in drops() if not args.drops or d.name.startswith(tuple(args.drops.split(",")))]
    os.environ["THREEAXES_PRESTART"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        course = Course(Path(tmp), chosen)
        course.release()
        planted = {}   # (drop, student) -> {answer: mistake name}
        for name in chosen:
            course.submit(FULL, name, course.solved_release(name))
            for student, (nb, marks) in catalogue_students(course, name).items():
                course.submit(student, name, nb)
                planted[(name, student)] = marks
        todo = submissions(course.root)
        start = time.perf_counter()
        autograde(course.root, todo, args.jobs, "--Execute.timeout=60", progress=None)
        took = time.perf_counter() - start
        rows = {(r["drop"], r["exercise"], r["student"]): r for r in report.graded(course.root)}
        bad, caught, named = [], 0, 0
        for (drop, student), marks in sorted(planted.items()):
            for answer, mistake in marks.items():
                got, best = rows[(drop, answer, student)], rows[(drop, answer, FULL)]
                lower = got["score"] < best["score"] == best["max"]
                caught += lower
                named += got["mistake"] == mistake
                flags = ("" if lower else "  NOT BELOW THE SOLUTION") + (
                    "" if got["mistake"] == mistake else f"  (named {got['mistake']})")
                print(f"{drop[:6]} {answer:28s} {mistake:36s} {got['score']:g}/{best['score']:g}{flags}")
                if not lower:
                    bad.append((drop, answer, mistake))
        total = sum(len(m) for m in planted.values())
        print(f"{total} catalogued mistakes in {len(todo)} submissions graded in {took:.0f} s "
              f"({60 * len(todo) / took:.1f}/min): {caught} scored below the solution, {named} named "
              f"in the feedback as catalogued")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
