"""nbgrader settings for the course: source/ -> release/ -> submitted/ -> autograded/ -> feedback/.

Run nbgrader from the repository root (the Makefile does), or use
`python -m autograder.apps.release` / `python -m autograder.apps.grade`.
"""
import importlib.util
from pathlib import Path

import nbgrader

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "three-axes"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# timeout: a second nbgrader process (formgrader beside autograde, or parallel
# autogrades) waits up to 60 s for the database lock instead of failing
c.CourseDirectory.db_url = "sqlite:///gradebook.db?timeout=60"

# Files of source/<drop>/ that nbgrader never copies (not into release/,
# autograded/ or feedback/): nbgrader's defaults, and grading.json, the
# instructor's list of graded cells and typical mistakes (see CONTRIBUTING.md).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "grading.json"]

# What the release puts where a solution was.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Test cells are judged in the grader, never in the student's kernel, which runs
# sandboxed (autograder/plugins/execute.py): JudgedExecute stands where nbgrader's Execute was.
# SanitizeStudentMarkup: the autograded notebook, which the formgrader shows the
# instructor, holds the student's HTML made inert and no JavaScript (autograder/plugins/feedback.py).
c.Autograde.autograde_preprocessors = [
    "autograder.plugins.execute.JudgedExecute",
    "autograder.plugins.feedback.SanitizeStudentMarkup",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# A cell that runs longer than this is interrupted and marked as an error; the
# rest of the notebook is still graded. Drops launch real ranks, so allow a
# minute per cell; the launcher's own timeout (60 s) stops stuck collectives.
c.Execute.timeout = 90
c.Execute.interrupt_on_timeout = True

# Feedback shows the test cells as the student received them: hidden tests
# are removed before feedback is generated; the student's HTML is made inert and
# JavaScript and widget views dropped (again: an autograded notebook may predate that step).
# GetGradesSayingWhatWaits and the course's page: a written answer not graded yet says
# "waiting for your instructor" instead of 0 points, and messages wrap (autograder/templates/).
c.GenerateFeedback.preprocessors = [
    "autograder.plugins.feedback.GetGradesSayingWhatWaits",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "autograder.plugins.feedback.ClearHiddenTestsQuietly",
    "autograder.plugins.feedback.StripTestTracebacks",
    "autograder.plugins.feedback.SanitizeStudentMarkup",
]
_course_grading = importlib.util.find_spec("autograder")   # the course's grading package, wherever it is
if _course_grading is not None:
    c.HTMLExporter.template_name = "course_feedback"
    # HTMLExporter less its BeautifulSoup pass over each page (autograder/plugins/feedback_page.py)
    c.GenerateFeedback.exporter_class = "autograder.plugins.feedback_page.FeedbackPage"
    c.HTMLExporter.extra_template_basedirs = [
        str(Path(_course_grading.origin).parent / "templates"),
        str(Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader" / "templates"),
    ]
    # nbgrader collect, too, never follows a link a student wrote into inbound/ and takes the
    # notebook alone (autograder/plugins/safe_collect.py)
    c.ExchangeFactory.collect = "autograder.plugins.safe_collect.SafeCollect"
