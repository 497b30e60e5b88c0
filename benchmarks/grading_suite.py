"""How long the grading test's course takes: every drop released and autograded in one course.

    python benchmarks/grading_suite.py [--jobs N] [--keep DIR]

Builds exactly what tests/drops/test_grading.py grades (tests/grading_harness.py):
one nbgrader course with every drop that has a source/<drop>/grading.json,
each drop submitted by solved_source, untouched_release and one student per
typical mistake, then one nbgrader call each for generate_assignment,
autograde, generate_feedback and export. Prints the seconds of each step,
each drop's part of the autograde (the time between one graded notebook and
the one before it, summed per drop) and the total.

Autograde is `make grade`'s: one nbgrader process per submission, `--jobs`
at once (default 2, as the test). nbgrader's own warnings go to stderr
(`2>/dev/null` keeps only the figures).
"""

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from graded_class import graded_course  # noqa: E402
from grading_harness import drops  # noqa: E402


def autograde_seconds_per_drop(course) -> dict[str, tuple[int, float]]:
    """{drop: (notebooks, seconds)}: each submission's nbgrader process, summed per drop
    (with --jobs above 1 they overlap, so the sum exceeds the wall time)."""
    per_drop = defaultdict(lambda: [0, 0.0])
    for (drop, _student), seconds in course.autograde_seconds.items():
        per_drop[drop][0] += 1
        per_drop[drop][1] += seconds
    return {drop: (n, s) for drop, (n, s) in per_drop.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="submissions autograded at once")
    parser.add_argument("--keep", type=Path, default=None, help="build the course in DIR/course and keep it")
    args = parser.parse_args(argv)
    all_drops = drops()
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        timings = {}
        course = graded_course(where, all_drops, timings, jobs=args.jobs)
        per_drop = autograde_seconds_per_drop(course)
    total = sum(timings.values())
    print(f"{len(all_drops)} drops, {sum(n for n, _ in per_drop.values())} notebooks, one course "
          f"({os.cpu_count()} CPUs, autograde jobs: {args.jobs})")
    for step, seconds in timings.items():
        print(f"  {step:<10} {seconds:7.1f} s")
    print("autograde per drop:")
    for drop in all_drops:
        n, seconds = per_drop.get(drop.name, (0, 0.0))
        print(f"  {drop.name:<34} {n} notebooks {seconds:7.1f} s  ({seconds / max(n, 1):.1f} s each)")
    print(f"total {total:.1f} s, {total / len(all_drops):.1f} s per drop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
