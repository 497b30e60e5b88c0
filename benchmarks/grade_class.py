"""A class graded: N students x the drops, through `make grade`'s own path.

    python benchmarks/grade_class.py [--students 40] [--drops drop01,drop10] [--jobs 2] [--report DIR]
                                     [--no-own] [--no-feedback]

Each student's submission of each drop is built from the drop's solutions and its
catalogue of mistakes (grading.json): most students solve most exercises, some make
one catalogued mistake or another (a different one per student), a few leave the drop
blank, one in twenty has an answer that loops forever (it costs a cell's timeout) and
one in twenty one that crashes its kernel. Graded with `autograder.apps.grade.autograde`
(sandboxed kernels, test cells judged in the grader, `--jobs` at once); printed:
submissions per minute, the total, and the ratio to the notebooks' own run time
(each solved drop run once by nbclient in the same run), then where the workers' time
went, phase by phase (autograder/phases.py), and how long the class's feedback pages and
grades.csv took. `--report DIR` then writes
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

from autograder import phases  # noqa: E402
from autograder.apps import report  # noqa: E402
from autograder.apps.grade import grade_submissions, nbgrader, submissions, write_feedback  # noqa: E402

LOOPS = "while True:\n    pass"
CRASHES = "import os\nos._exit(1)"


def submission(course: Course, name: str, rng: random.Random):
    """One student's notebook for drop `name`: (notebook, what they did)."""
    roll = rng.random()
    if roll < 0.05:
        return course.released(name), "blank"
    nb, did = course.solved_release(name), "right"
    exercises = report.records(course.root, name)
    if roll < 0.10 and exercises:
        return set_answer(nb, rng.choice(exercises).answer, LOOPS), "loops"
    if roll < 0.15 and exercises:
        return set_answer(nb, rng.choice(exercises).answer, CRASHES), "crashes"
    for exercise in exercises:
        if exercise.mistakes and rng.random() < 0.35:
            mistake = rng.choice(exercise.mistakes)
            nb = set_answer(nb, exercise.answer, mistake.code)
            did = "mistakes"
    return nb, did


def _stopped_at_a_limit(course_root: Path, todo) -> list:
    """The submissions whose autograded notebook shows a cell stopped at its time limit."""
    import nbformat

    stopped = []
    for assignment, student in todo:
        for path in (course_root / "autograded" / student / assignment).glob("*.ipynb"):
            outputs = [o for cell in nbformat.read(path, as_version=4).cells for o in cell.get("outputs", [])]
            if any(o.get("ename") == "TimeoutError" for o in outputs):
                stopped.append((assignment, student))
                break
    return stopped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--drops", default="", help="comma-separated name prefixes (default: every drop)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=30, help="seconds a cell may run (the course: 90)")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-own", action="store_true", help="skip the notebooks' own run time (a run each)")
    parser.add_argument("--no-feedback", action="store_true", help="skip timing feedback pages and grades.csv")
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
        own = {name: 0.0 if args.no_own else own_seconds(course, name) for name in chosen}
        own_total = sum(own[a] for a, _ in todo) or float("nan")
        print(f"{len(todo)} submissions ({args.students} students x {len(chosen)} drops; "
              + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) + f"), {os.cpu_count()} CPUs")
        start = time.perf_counter()
        graded = grade_submissions(course.root, todo, args.jobs, f"--Execute.timeout={args.timeout}")
        took = time.perf_counter() - start
        for _, why in sorted(graded.failed.items()):   # each its cause's first line
            print(f"not graded: {why.splitlines()[0]}")
        seconds = graded.seconds
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
        stopped = _stopped_at_a_limit(course.root, todo)
        print(f"stopped at a cell's time limit: {len(stopped)} submissions ("
              + ", ".join(f"{sum(did_of[i] == d for i in stopped)} {d}" for d in sorted(kinds)) + ")")
        print(f"where the time went, per phase ({len(todo)} submissions; autograder/phases.py):")
        print(phases.table([graded.phases.get(item, {}) for item in todo], took, args.jobs))
        if not args.no_feedback:   # the rest of `make grade`, once for the class
            began = time.perf_counter()
            write_feedback(course.root, chosen, args.jobs)
            fed = time.perf_counter()
            nbgrader(course.root, "export", "--to=grades.csv", check=False)
            print(f"then feedback pages {fed - began:.0f} s ({len(chosen)} nbgrader generate_feedback, "
                  f"{args.jobs} at once), "
                  f"grades.csv {time.perf_counter() - fed:.0f} s")
        if args.report:
            out = report.write(report.graded(course.root), args.report)
            print(f"report: {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
