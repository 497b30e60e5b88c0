"""The instructor's grading path (what `make grade` runs): submitted/ -> autograded/ (nbgrader
autograde by worker processes) -> feedback/ -> grades.csv. The README's "Grade" step says what it
does for the instructor; `run` grades a class, `pool` runs the workers, `notes` records what is
graded, `failures` says why a submission was not."""
from autograder.apps.grade.failures import cause, feedback_failures
from autograder.apps.grade.nbgrader_cli import add_students, gradebook_url, nbgrader, register_assignments
from autograder.apps.grade.notes import GRADED, LOGS, forget, pending, refused
from autograder.apps.grade.pool import Autograded, ByDrop, grade_submissions
from autograder.apps.grade.run import NotAllGraded, autograde, copy_samples, grade_all, submissions, write_feedback

__all__ = ["GRADED", "LOGS", "Autograded", "ByDrop", "NotAllGraded", "add_students", "autograde", "cause",
           "copy_samples", "feedback_failures", "forget", "grade_all", "grade_submissions", "gradebook_url",
           "nbgrader", "pending", "refused", "register_assignments", "submissions", "write_feedback"]
