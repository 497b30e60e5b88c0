"""A class graded: N students x the drops, through `make grade`'s own path.

    python benchmarks/grade_class.py [--students 40] [--drops drop01,drop10] [--jobs 2] [--report DIR]

Each student's submission of each drop is built from the drop's solutions and its
catalogue of mistakes (grading.json): most students solve most exercises, some make
one catalogued mistake or another (a different one per student), a few leave the drop
blank, one in twenty has an answer that loops forever (it costs a cell's timeout) and
one in twenty one that crashes its kernel. Graded with `autograder.grade.autograde`
(sandboxed kernels, test cells judged in the grader, `--jobs` at once); printed:
submissions per minute, the total, and the ratio to the notebooks' own run time
(each solved drop run once by nbclient in the same run). `--report DIR` then writes
`make report`'s pages for the class (the README's chart comes from one).
"""
import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from grading_harness import Course, drops, set_answer  # noqa: E402
from grading_throughput import own_seconds  # noqa: E402

from autograder import report  # noqa: E402
from autograder.grade import autograde, submissions  # noqa: E402

LOOPS = "while True:\n    pass"
CRASHES = "import os\nos._exit(1)"


def submission(course: Course, name: str, rng: random.Random):
    """One student's notebook for drop `name`: (notebook, what they did)."""
    roll = rng.random()
    if roll < 0.05:
        return course.released(name), "blank"
    nb, did = course.solved_release(name), "right"
    exercises = report.exercises(course.root, name)
    if roll < 0.10 and exercises:
        return set_answer(nb, rng.choice(exercises)["answer"], LOOPS), "loops"
    if roll < 0.15 and exercises:
        return set_answer(nb, rng.choice(exercises)["answer"], CRASHES), "crashes"
    for exercise in exercises:
        if exercise.get("mistakes") and rng.random() < 0.35:
            mistake = rng.choice(exercise["mistakes"])
            nb = set_answer(nb, exercise["answer"], "\n".join(mistake["code"]))
            did = "mistakes"
    return nb, did


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--drops", default="", help="comma-separated name prefixes (default: every drop)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=30, help="seconds a cell may run (the course: 90)")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    chosen = [d.name for d in drops() if not args.drops or d.name.startswith(tuple(args.drops.split(",")))]
    os.environ["THREEAXES_PRESTART"] = "0"
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        course = Course(Path(tmp), chosen)
        course.release()
        kinds, did_of = {}, {}
        for name in chosen:
            for k in range(1, args.students + 1):
                nb, did = submission(course, name, rng)
                course.submit(f"s{k:02d}", name, nb)
                kinds[did] = kinds.get(did, 0) + 1
                did_of[(name, f"s{k:02d}")] = did
        todo = submissions(course.root)
        own = {name: own_seconds(course, name) for name in chosen}
        own_total = sum(own[a] for a, _ in todo)
        print(f"{len(todo)} submissions ({args.students} students x {len(chosen)} drops; "
              + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) + f"), {os.cpu_count()} CPUs")
        start = time.perf_counter()
        seconds = autograde(course.root, todo, args.jobs, f"--Execute.timeout={args.timeout}")
        took = time.perf_counter() - start
        print(f"graded in {took:.0f} s: {60 * len(todo) / took:.1f} submissions per minute with "
              f"{args.jobs} jobs; the notebooks' own run time {own_total:.0f} s "
              f"(ratio {took * args.jobs / own_total:.2f} per job)")
        # where a worker's time went: each kind of submission's seconds, from handing it to
        # the worker to its answer (a drop's first submission in a worker also pays its opening)
        busy = sum(seconds.values())
        for did in sorted(kinds):
            spent = [t for item, t in seconds.items() if did_of[item] == did]
            print(f"  {did:9s} {len(spent):4d} submissions, {sum(spent):6.0f} s of the workers' "
                  f"{busy:.0f} s ({sum(spent) / busy:.0%}), {sum(spent) / len(spent):5.1f} s each")
        if args.report:
            out = report.write(report.graded(course.root), args.report)
            print(f"report: {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
