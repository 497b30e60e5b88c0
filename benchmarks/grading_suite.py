"""How long the grading test's course takes: every drop released and autograded in one course.

    python benchmarks/grading_suite.py [--jobs N] [--keep DIR]

Builds exactly what tests/test_grading.py grades (tests/grading_harness.py):
one nbgrader course with every drop that has a source/<drop>/grading.json,
each drop submitted by solved_source, untouched_release and one student per
typical mistake, then one nbgrader call each for generate_assignment,
autograde, generate_feedback and export. Prints the seconds of each step,
each drop's part of the autograde (the time between one graded notebook and
the one before it, summed per drop) and the total.

`--jobs 2` autogrades with one nbgrader call per drop, two at once, in the
same course; a drop's seconds are then those of its call. nbgrader's own
warnings go to stderr (`2>/dev/null` keeps only the figures).
"""

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from grading_harness import drops, graded_course  # noqa: E402


def autograde_seconds_per_drop(course, started: float) -> dict[str, tuple[int, float]]:
    """{drop: (notebooks, seconds)}. One call for all drops grades one notebook after
    the other and writes each when done, so a notebook took the time since the
    previous write; with one call per drop, a drop took its call."""
    written = sorted((p.stat().st_mtime, p.parent.name) for p in course.root.glob("autograded/*/*/*.ipynb"))
    per_drop, previous = defaultdict(lambda: [0, 0.0]), started
    for mtime, drop in written:
        per_drop[drop][0] += 1
        per_drop[drop][1] += mtime - previous
        previous = mtime
    if "*" not in course.autograde_seconds:
        for drop, seconds in course.autograde_seconds.items():
            per_drop[drop][1] = seconds
    return {drop: (n, s) for drop, (n, s) in per_drop.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1,
                        help="autograde N drops at once (default: one nbgrader call for all, as the test)")
    parser.add_argument("--keep", type=Path, default=None, help="build the course in DIR/course and keep it")
    args = parser.parse_args(argv)
    all_drops = drops()
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        timings, start = {}, time.time()
        course = graded_course(where, all_drops, timings, jobs=args.jobs)
        autograde_start = start + timings["release"] + timings["submit"]
        per_drop = autograde_seconds_per_drop(course, autograde_start)
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
