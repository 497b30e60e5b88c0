"""The instructor's side of nbgrader's exchange, with the course's own grading.

    python -m autograder.apps.exchange release  DROP...            nbgrader release_assignment (the drop is
                                                               recorded in the gradebook first if it is not)
    python -m autograder.apps.exchange collect  DROP... [--update]  nbgrader collect, then who came in and what
                                                               cannot be graded as it is
    python -m autograder.apps.exchange grade    DROP... [--jobs N]  what was collected, through `make grade`'s
                                                               sandboxed, judged autograde; feedback/, grades.csv
    python -m autograder.apps.exchange feedback DROP...            nbgrader release_feedback (each student then
                                                               runs `nbgrader fetch_feedback DROP`)

Run it in the course root (this repository): nbgrader reads the course from its
nbgrader_config.py, and the exchange's folder from `c.Exchange.root` in one of nbgrader's
config files (/etc/jupyter/ or ~/.jupyter/nbgrader_config.py); students use nbgrader's own
commands (fetch_assignment, submit, fetch_feedback). The steps call nbgrader's Python API
(`NbGraderAPI`, what the formgrader calls) in this one process. Collect takes a submission
only as autograder/plugins/safe_collect.py allows. No step deletes a submission: one that
cannot be graded stays in submitted/ (and in the exchange), named in the report with its
cause and its log under .graded/.logs/ (autograder/apps/grade/), and its earlier autograded
notebook and feedback page are removed, so that no stale page is released.
"""
from autograder.apps.exchange.checks import check_submissions, problem, roster
from autograder.apps.exchange.course import Course, load_course
from autograder.apps.exchange.steps import Graded, collect, export_csv, grade, main, release, release_feedback

__all__ = ["Course", "Graded", "check_submissions", "collect", "export_csv", "grade", "load_course", "main",
           "problem", "release", "release_feedback", "roster"]
