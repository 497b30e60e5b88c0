"""`python -m autograder.apps.grade` (what `make grade` runs)."""
import argparse

from autograder import course
from autograder.apps.grade import __doc__ as DOC
from autograder.apps.grade.run import NotAllGraded, copy_samples, grade_all


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=DOC.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="grade the sample submissions")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    parser.add_argument("--force", action="store_true", help="grade again what is already graded")
    args = parser.parse_args(argv)
    if args.demo:
        copy_samples(course.ROOT)
    try:
        names, missing = grade_all(course.ROOT, args.jobs, force=args.force), None
    except NotAllGraded as some:
        names, missing = some.names, some
    print(f"graded {', '.join(names)}: scores in grades.csv, feedback in feedback/")
    if (course.ROOT / "grades.csv").is_file():
        print((course.ROOT / "grades.csv").read_text())
    if missing is not None:
        raise missing


if __name__ == "__main__":
    main()
