"""What the grading writes for people to open: hidden tests kept out, student markup made inert.

`StripTestTracebacks`: nbgrader's `ClearHiddenTests` removes the hidden lines
from a test cell's source, but a failing hidden assertion still leaves a
traceback in the cell's output, and IPython tracebacks quote the lines around
the failure. This preprocessor replaces every error output of a graded test
cell with its last line (`AssertionError: <message>`), which is all a student
needs: the messages the checks raise say what to change without quoting the test.

`SanitizeStudentMarkup`: a submission's outputs are whatever its code displayed,
and its markdown cells whatever the student typed; the feedback page (and the
formgrader's view of the autograded notebook, which the instructor opens while
logged in to Jupyter) would render them as the page's own HTML and run their
scripts. Every code cell's outputs (all from the student's kernel, or from test cells
reading its answers) keep text, JSON, PNG and JPEG as they are, HTML, markdown and TeX
cleaned by the allowlist of `autograder.plugins.inert` (what it lets through: its
docstring), and drop every other type (JavaScript, widget views, SVG). A markdown or
raw cell's source is cleaned the same way unless it is the instructor's: a
locked cell (nbgrader puts those back from the source notebook when it
autogrades) or one whose text is a cell of the drop's source notebook
(`source/<drop>/<notebook>.ipynb` in the course nbgrader runs in); the
notebook's saved widget state goes too, an execution count that is not a
number, and nbgrader metadata whose grade id is not one nbgrader accepts (the
formgrader writes a grade id into its page unescaped). Scores do not change: nbgrader reads
them from error outputs and `text/plain`, which stay as they were.
"""
import re
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor
from traitlets import List

from autograder.plugins import inert

# shown escaped, in <pre> or as an image: kept as they are (nbgrader reads a score from text/plain)
KEPT_AS_IS = {"text/plain", "application/json", "image/png", "image/jpeg"}
_GRADE_ID = re.compile(r"[A-Za-z0-9_\-]+")     # what nbgrader accepts as a grade id
CLEANED = {"text/html": inert.clean_html, "text/markdown": inert.clean_markdown, "text/latex": inert.clean_latex}


class GetGradesSayingWhatWaits(GetGrades):
    """nbgrader's GetGrades, and each answer the instructor has not graded yet (a written
    answer, before the formgrader) marked `waiting`, with the points waiting in all: the
    course's feedback page (autograder/templates/course_feedback) says "waiting for your
    instructor" there, where nbgrader's would show 0 points."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        nb, resources = super().preprocess(nb, resources)
        resources["nbgrader"]["waiting"] = sum(
            c.metadata.nbgrader.get("points") or 0 for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("waiting"))
        return nb, resources

    def _get_score(self, cell: NotebookNode, resources: dict) -> None:
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        if grade.needs_manual_grade:
            cell.metadata.nbgrader["waiting"] = True


class CoursePreprocessor(NbGraderPreprocessor):
    """nbgrader's base for the course's preprocessors. nbconvert configures every
    preprocessor's `display_data_priority`; NbGraderPreprocessor declares it without
    config=True, so traitlets warned "not recognized" for each of ours on every run
    (nbgrader's own GetGrades declares it the same way)."""
    display_data_priority = List(GetGrades.display_data_priority.default(), config=True)


class ClearHiddenTestsQuietly(ClearHiddenTests):
    """nbgrader's ClearHiddenTests, without the same warning on every run."""
    display_data_priority = List(GetGrades.display_data_priority.default(), config=True)


class StripTestTracebacks(CoursePreprocessor):
    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


class SanitizeStudentMarkup(CoursePreprocessor):
    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        nb.metadata.pop("widgets", None)   # saved widget state: rendered by the page's widget manager
        about = resources.get("nbgrader", {})
        # nbgrader runs in the course root; else the notebook's folder is <root>/<step>/<student>/<drop>
        roots = [Path.cwd()] + list(Path(resources.get("metadata", {}).get("path") or ".").resolve().parents[2:3])
        self._instructors = next((texts for root in roots
                                  if (texts := _source_texts(root, about.get("assignment", ""),
                                                             about.get("notebook", "")))), set())
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        about = cell.get("metadata", {}).get("nbgrader")
        if isinstance(about, dict) and not _GRADE_ID.fullmatch(str(about.get("grade_id", "x"))):
            del cell.metadata["nbgrader"]    # no instructor's cell has it: the formgrader writes it unescaped
        if cell.cell_type == "code":
            cell.outputs = _clean_outputs(cell.get("outputs", []))
            if type(cell.get("execution_count")) is not int:   # the page writes it as it is
                cell.execution_count = None
        elif cell.cell_type == "markdown" and not _instructors(cell) \
                and cell.source not in getattr(self, "_instructors", set()):
            cell.source = inert.clean_markdown(cell.source)
        elif cell.cell_type == "raw" and not _instructors(cell) \
                and cell.source not in getattr(self, "_instructors", set()):
            cell.source = inert.clean_html(cell.source)
        return cell, resources


def _clean_outputs(outputs: list) -> list:
    """The outputs with HTML, markdown and TeX cleaned, every type not kept as is dropped, each
    one's metadata reduced to images' numeric sizes, and any output that is not one of
    nbformat's four kinds (with its data a mapping) dropped whole."""
    kept = []
    for out in outputs:
        kind = out.get("output_type")
        if kind in ("stream", "error"):
            kept.append(out)
            continue
        data = out.get("data")
        if kind not in ("display_data", "execute_result") or not isinstance(data, dict):
            continue
        out["metadata"] = inert.clean_metadata(out.get("metadata"))
        if kind == "execute_result" and type(out.get("execution_count")) is not int:
            out["execution_count"] = None
        for key, value in list(data.items()):
            if key in KEPT_AS_IS:   # as they were: nbgrader reads a partial score from text/plain
                continue
            value = "".join(value) if isinstance(value, list) else value   # nbformat allows a list of lines
            if key in CLEANED and isinstance(value, str):
                data[key] = CLEANED[key](value)
            else:
                del data[key]
        kept.append(out)
    return kept


def _instructors(cell: NotebookNode) -> bool:
    """A cell nbgrader restores from the source notebook when it autogrades: locked, and no
    answer of the student's."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("locked")) and not meta.get("solution")


def _source_texts(root: Path, assignment: str, notebook: str) -> set:
    """The text of every markdown and raw cell of the drop's source notebook in the course
    at `root`; empty where there is none."""
    path = Path(root) / "source" / assignment / f"{notebook}.ipynb"
    if not (assignment and notebook and path.is_file()):
        return set()
    try:
        cells = nbformat.read(path, as_version=4).cells
    except Exception:   # noqa: BLE001 - an unreadable source trusts nothing
        return set()
    return {c.source for c in cells if c.cell_type in ("markdown", "raw")}
