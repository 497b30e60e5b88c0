"""The instructor's grading path (what `make grade` runs).

    submitted/<student>/<assignment>/<assignment>.ipynb      (nbgrader collect, or copied by hand)
      -> autograded/   nbgrader autograde, by JOBS worker processes (grade_worker.py):
                       the student's cells in a sandboxed kernel, the test cells
                       (hidden tests put back) judged in the grader (autograder/plugins/execute.py)
      -> feedback/     nbgrader generate_feedback: HTML per student, hidden tests removed
      -> grades.csv    nbgrader export

`--demo` first copies the sample submissions in autograder/samples/ into
submitted/, so the whole path can be tried on a fresh clone. `--jobs N` (the
Makefile's JOBS) grades N submissions at once; a progress line counts them,
with the rate and the time left.

Grading resumes: each submission graded is noted in `.graded/<student>/<assignment>`
with a digest of the files it was graded from, so a run stopped at any point
(Ctrl-C, a killed process, a reboot) and started again grades only what is not
graded yet, was submitted again since, or has lost its autograded notebook
(autograded/ deleted by hand); `--force` grades everything again. feedback/ is
written again each run.

A submission is its notebook alone (autograder/one_notebook.py): a folder in submitted/
that holds a link (the notebook itself included), a device, a pipe, a folder or any file
but the notebook and what nbgrader submit writes beside it is refused before anything of it runs or is
copied, and named with its cause at the end, as below.

One submission never stops the class: a worker that dies is replaced (the
submission it was grading is tried once more, then named), and a submission
that cannot be graded, or whose feedback page cannot be written, is named at
the end with its cause (the last lines of nbgrader's and the worker's log; all
of it in `.graded/.logs/<student>+<assignment>.log`, each worker's log in
`.graded/.logs/worker-N.log`), while everyone else gets feedback and a row in
grades.csv; the command then exits with status 1.
"""
from autograder.apps.grade.failures import cause, feedback_failures
from autograder.apps.grade.nbgrader_cli import add_students, gradebook_url, nbgrader, register_assignments
from autograder.apps.grade.notes import GRADED, LOGS, forget, pending, refused
from autograder.apps.grade.pool import Autograded, ByDrop, grade_submissions
from autograder.apps.grade.run import NotAllGraded, autograde, copy_samples, grade_all, submissions, write_feedback

__all__ = ["GRADED", "LOGS", "Autograded", "ByDrop", "NotAllGraded", "add_students", "autograde", "cause",
           "copy_samples", "feedback_failures", "forget", "grade_all", "grade_submissions", "gradebook_url",
           "nbgrader", "pending", "refused", "register_assignments", "submissions", "write_feedback"]
