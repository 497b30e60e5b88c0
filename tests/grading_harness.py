"""A real nbgrader course in a temporary folder, for the grading-path tests.

    course = Course(tmp_path, ["drop01-three-kinds-of-parallel"])
    course.release()                                   # nbgrader generate_assignment
    nb = course.released("drop01-three-kinds-of-parallel")
    set_answer(nb, "fp32_bytes_answer", "fp32_bytes = 1")
    course.submit("alice", "drop01-three-kinds-of-parallel", nb)
    course.autograde("drop01-three-kinds-of-parallel")  # nbgrader autograde (every student)
    course.scores("drop01-three-kinds-of-parallel", "alice")   # {grade_id: points}

Everything goes through the nbgrader CLI with the repository's
nbgrader_config.py, exactly as an instructor runs it; scores are read back
from the gradebook database.
"""
from __future__ import annotations

import copy
import html
import shutil
from pathlib import Path

import nbformat

from autograder.grade import nbgrader

ROOT = Path(__file__).resolve().parent.parent


class Course:
    def __init__(self, tmp_path: Path, assignments: list[str]):
        self.root = Path(tmp_path) / "course"
        (self.root / "source").mkdir(parents=True)
        shutil.copy(ROOT / "nbgrader_config.py", self.root)
        for name in assignments:
            shutil.copytree(ROOT / "source" / name, self.root / "source" / name)
        self.assignments = list(assignments)

    # -- instructor steps -------------------------------------------------------
    def release(self) -> None:
        for name in self.assignments:
            nbgrader(self.root, "generate_assignment", name, "--force")

    def autograde(self, assignment: str, *extra: str) -> None:
        nbgrader(self.root, "autograde", assignment, "--force", *extra)

    def generate_feedback(self, assignment: str) -> None:
        nbgrader(self.root, "generate_feedback", assignment, "--force")

    def export_csv(self) -> str:
        nbgrader(self.root, "export", "--to=grades.csv")
        return (self.root / "grades.csv").read_text()

    # -- notebooks ----------------------------------------------------------------
    def source(self, assignment: str):
        return nbformat.read(self.root / "source" / assignment / f"{assignment}.ipynb", as_version=4)

    def released(self, assignment: str):
        return nbformat.read(self.root / "release" / assignment / f"{assignment}.ipynb", as_version=4)

    def submit(self, student: str, assignment: str, nb) -> None:
        folder = self.root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")

    def feedback_html(self, assignment: str, student: str) -> str:
        return (self.root / "feedback" / student / assignment / f"{assignment}.html").read_text()

    def solved_release(self, assignment: str):
        """The released notebook with every answer cell's solution typed in."""
        source, nb = self.source(assignment), self.released(assignment)
        for grade_id in answer_ids(source):
            nb = set_answer(nb, grade_id, solution_of(source, grade_id))
        return nb

    def assert_feedback_hides_hidden_tests(self, assignment: str, student: str) -> None:
        """No line of a hidden test (as code or HTML-escaped) is in the student's feedback."""
        page = self.feedback_html(assignment, student)
        for code in hidden_test_lines(self.source(assignment)):
            assert code not in page and html.escape(code) not in page, f"feedback reveals: {code}"

    # -- scores -------------------------------------------------------------------
    def _grades(self, assignment: str, student: str):
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gb:
            nb = gb.find_submission_notebook(assignment, assignment, student)
            return {g.name: (g.score, g.max_score, g.cell.cell_type) for g in nb.grades}

    def scores(self, assignment: str, student: str) -> dict[str, float]:
        """Points per auto-graded cell (test cells), by grade id."""
        return {name: float(score) for name, (score, _, kind) in self._grades(assignment, student).items()
                if kind == "code"}

    def max_scores(self, assignment: str, student: str) -> dict[str, float]:
        return {name: float(mx) for name, (_, mx, kind) in self._grades(assignment, student).items()
                if kind == "code"}


def released_course(tmp_path_factory, assignment: str) -> Course:
    """A course with `assignment` released and the two submissions every drop's
    grading test starts from: `solved_source` (the instructor's notebook, full
    marks expected) and `untouched_release` (the student copy as handed out, 0 expected)."""
    course = Course(tmp_path_factory.mktemp(assignment), [assignment])
    course.release()
    course.submit("solved_source", assignment, course.source(assignment))
    course.submit("untouched_release", assignment, course.released(assignment))
    return course


# -- editing a notebook like a student ---------------------------------------------
def cell_by_grade_id(nb, grade_id: str):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(f"no cell with grade_id {grade_id!r}")


def set_answer(nb, grade_id: str, source: str):
    """Return a copy of `nb` with the answer cell `grade_id` replaced by `source`."""
    nb = copy.deepcopy(nb)
    cell_by_grade_id(nb, grade_id).source = source
    return nb


def solution_of(source_nb, grade_id: str) -> str:
    """The solution text of an answer cell in the instructor's source, without delimiters."""
    text = cell_by_grade_id(source_nb, grade_id).source
    return "\n".join(line for line in text.splitlines() if "### BEGIN SOLUTION" not in line
                     and "### END SOLUTION" not in line)


def answer_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]


def hidden_test_lines(source_nb) -> list[str]:
    """Every substantial line between the hidden-test markers of a source notebook."""
    lines = []
    for cell in source_nb.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            lines += [ln.strip() for ln in hidden.splitlines()
                      if len(ln.strip()) > 20 and not ln.strip().startswith("#")]
    return lines
