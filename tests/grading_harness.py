"""Courses graded through the real nbgrader CLI and `make grade`'s own path, for the tests.

A drop's grading data (`source/<drop>/grading.json`, read by autograder/spec.py) as the
students it makes (`Drop`; tests/graded_class.py hands them in), a temporary `Course` with the
repository's nbgrader_config.py (release, submit, autograde, feedback, export, scores read
back from the gradebook), and editing a notebook as a student does.
"""
from __future__ import annotations

import copy
import fcntl
import html
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
from grading_attacks import RUNS_OUT_OF_TIME, attacks_on

from autograder import spec
from autograder.apps.grade import nbgrader
from autograder.course import GRADING_FILE, ROOT, graded_drops, notebook, notebook_in, students
from autograder.course import folder as drop_folder
from autograder.spec import Mistake

# Every cell runs under this limit in the test course (the course allows 90 s), so a
# submission stuck in a loop costs 60 s, not 90. Drop 6's setup cell (a 4-rank launch)
# took 14.5 s at load 7; on a 2-core machine that also runs the notebooks it can take
# three times that.
CELL_TIMEOUT_S = 60
FULL = "solved_source"
ZERO = "untouched_release"
ATTACK = "attack-"


@dataclass(frozen=True)
class Drop:
    name: str       # the assignment: source/<name>/<name>.ipynb
    points: dict    # {grade id of an auto-graded test cell: points}
    mistakes: tuple

    def packs(self) -> list[tuple[Mistake, ...]]:
        """The mistakes grouped into students: greedily, in order, never two in one
        answer cell or losing the same cell, an `alone` mistake by itself."""
        packs: list[list[Mistake]] = []
        for m in self.mistakes:
            for pack in packs:
                if not m.alone and not any(o.alone or o.answer == m.answer or o.touches & m.touches
                                           for o in pack):
                    pack.append(m)
                    break
            else:
                packs.append([m])
        return [tuple(p) for p in packs]

    def students(self) -> list[str]:
        return [FULL, ZERO, *(f"mistakes-{k}" for k in range(1, len(self.packs()) + 1)),
                *(ATTACK + name for name in attacks_on(self.name))]

    def mistakes_of(self, student: str) -> tuple[Mistake, ...]:
        if not student.startswith("mistakes-"):
            return ()
        return self.packs()[int(student.split("-")[1]) - 1]

    def runs_out_of_time(self, student: str) -> bool:
        """Whether the student's notebook holds a cell that never ends."""
        return (student.startswith(ATTACK) and student[len(ATTACK):] in RUNS_OUT_OF_TIME
                or any(m.runs_out_of_time for m in self.mistakes_of(student)))

    def student_of(self, mistake: Mistake) -> str:
        return next(s for s in self.students() if mistake in self.mistakes_of(s))

    def expected(self, student: str) -> dict[str, float]:
        if student == ZERO or student.startswith(ATTACK):
            return {gid: 0.0 for gid in self.points}
        lost = {gid for m in self.mistakes_of(student) for gid in m.loses}
        partial = {gid: float(p) for m in self.mistakes_of(student) for gid, p in m.scores}
        return {gid: 0.0 if gid in lost else partial.get(gid, pts) for gid, pts in self.points.items()}


def load_drop(folder: Path) -> Drop:
    """source/<drop>/grading.json, as autograder.spec reads and checks it."""
    data = spec.load(folder / GRADING_FILE)
    return Drop(data.name, data.points, data.mistakes)


def drops(root: Path = ROOT) -> list[Drop]:
    """Every drop in source/ that has grading data, in order."""
    return [load_drop(drop_folder(name, root)) for name in graded_drops(root)]


def released_course(base: Path) -> Path:
    """base/course: every drop of source/ released once, by `make release`'s own
    `generate`, with the gradebook that records them (autograde needs it) beside.
    Every pytest worker may ask at once: the first releases, under a lock on a file
    in `base`, the others wait for it and read the same folder; a course that grades
    copies it (`Course(..., released=...)`), tests/autograder/test_release.py compares its
    release/ with the committed one. So the suite releases the course once."""
    from autograder.apps.release import assignments, generate

    course = Path(base) / "course"
    with open(Path(base) / "released.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not (course / ".released").exists():
            shutil.rmtree(course, ignore_errors=True)
            (course / "source").mkdir(parents=True)
            shutil.copy(ROOT / "nbgrader_config.py", course)
            for name in assignments():
                shutil.copytree(drop_folder(name), drop_folder(name, course))
            generate(course, course, gradebook=course / "gradebook.db")
            (course / ".released").touch()
    return course


def run_folder(tmp_path_factory, worker_id: str) -> Path:
    """The folder every pytest worker of the run sees (the parent of each worker's base temp):
    where the released course (tests/conftest.py's `released`) and the shared cell times lie."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def share_cell_seconds(course_root: Path, shared: Path) -> None:
    """The model solutions' cell times (autograder/judging/cell_seconds.py) measured once for
    every course of the run: the course's folder for them is a link to one in `shared`, which
    every pytest worker sees. The grader keys them by the digest of the notebook measured and
    locks the folder while it measures, so the first course to grade a drop measures it and
    every later one reads it, as a second `make grade` of one course does."""
    from autograder.judging.cell_seconds import FOLDER

    (Path(shared) / FOLDER.name).mkdir(parents=True, exist_ok=True)
    (Path(course_root) / FOLDER).parent.mkdir(parents=True, exist_ok=True)
    (Path(course_root) / FOLDER).symlink_to(Path(shared) / FOLDER.name, target_is_directory=True)


class Course:
    def __init__(self, tmp_path: Path, assignments: list[str], released: Path | None = None,
                 share_limits: bool = False):
        """A course of `assignments` copied from source/; `released` (from
        `released_course`) gives their release and gradebook as well, and with `share_limits`
        the model solutions' cell times of every course of the run (`share_cell_seconds`)."""
        self.root = Path(tmp_path) / "course"
        (self.root / "source").mkdir(parents=True)
        shutil.copy(ROOT / "nbgrader_config.py", self.root)
        for name in assignments:
            shutil.copytree(drop_folder(name, released or ROOT), drop_folder(name, self.root))
            if released:
                shutil.copytree(drop_folder(name, released, of="release"), drop_folder(name, self.root, of="release"))
        if released:
            shutil.copy(released / "gradebook.db", self.root)
        if share_limits and released:   # graded by this account only: the shared folder is private to it
            share_cell_seconds(self.root, released.parent)
        self.assignments = list(assignments)
        self.is_released = released is not None
        self.autograde_seconds: dict = {}   # (assignment, student): seconds, over every autograde

    # -- instructor steps: each one nbgrader call for every assignment ------------
    def release(self) -> None:
        if not self.is_released:
            nbgrader(self.root, "generate_assignment", "*", "--force")

    def autograde(self, *extra: str, jobs: int = 1, todo: list | None = None) -> None:
        """`make grade`'s autograde: one nbgrader process per submission, `jobs` at once;
        `todo`: these (assignment, student) only (default: all). Adds the seconds of each
        to `self.autograde_seconds` ({(assignment, student): s})."""
        from autograder.apps.grade import autograde, submissions

        seconds = autograde(self.root, submissions(self.root) if todo is None else todo, jobs, *extra,
                            progress=None)
        self.autograde_seconds.update(seconds)

    def generate_feedback(self, students: str = "*") -> None:
        """`students`: a glob over student ids, as nbgrader reads it."""
        nbgrader(self.root, "generate_feedback", "*", "--force", f"--CourseDirectory.student_id={students}")

    def export_csv(self) -> str:
        nbgrader(self.root, "export", "--to=grades.csv")
        return (self.root / "grades.csv").read_text()

    # -- notebooks ----------------------------------------------------------------
    def source(self, assignment: str):
        return nbformat.read(notebook(assignment, self.root), as_version=4)

    def released(self, assignment: str):
        return nbformat.read(notebook(assignment, self.root, of="release"), as_version=4)

    def submit(self, student: str, assignment: str, nb) -> None:
        folder = students(assignment, student, self.root)
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, notebook_in(folder))

    def feedback_html(self, assignment: str, student: str) -> str:
        return notebook_in(students(assignment, student, self.root, of="feedback")).with_suffix(".html").read_text()

    def solved_release(self, assignment: str):
        """The released notebook with every answer cell's solution typed in."""
        source, nb = self.source(assignment), self.released(assignment)
        for grade_id in answer_ids(source):
            nb = set_answer(nb, grade_id, solution_of(source, grade_id))
        return nb

    def assert_feedback_hides_hidden_tests(self, assignment: str, student: str) -> None:
        """No line of a hidden test (as code or HTML-escaped) is in the student's feedback."""
        leaked = revealed_hidden_tests(self.feedback_html(assignment, student), self.source(assignment))
        assert not leaked, f"feedback reveals: {leaked[0]}"

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


RANK_DEMOS = "drop01-three-kinds-of-parallel"   # the drop whose notebook `without_rank_demos` takes


def without_rank_demos(nb):
    """A copy of drop 1's notebook `nb` without the cells after its first graded one that only show
    ranks at work (its 4-rank launches, and the table of what they sent): no test cell reads them,
    so a student who leaves them out scores what one who runs them does, for less CPU (about 6 s
    of a grading worker a submission)."""
    nb = copy.deepcopy(nb)
    first = next(k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader"))
    nb.cells = [c for k, c in enumerate(nb.cells)
                if k < first or c.metadata.get("nbgrader") or "world_size" not in c.source and "runs" not in c.source]
    return nb


def without_solution_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


def solution_of(source_nb, grade_id: str) -> str:
    """The solution text of an answer cell in the instructor's source, without delimiters."""
    return without_solution_markers(cell_by_grade_id(source_nb, grade_id).source)


def student_code(nb) -> list[str]:
    """The code of every cell that autograde runs as submitted (all but the graded
    cells, which it puts back from the source), solution markers left out."""
    return [without_solution_markers(c.source) for c in nb.cells
            if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]


def answer_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]


def autograded_ids(nb) -> dict[str, float]:
    """{grade id: points} of the auto-graded test cells of a source notebook."""
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata["nbgrader"].get("solution")}


def hidden_test_lines(source_nb) -> list[str]:
    """Every substantial line between the hidden-test markers of a source notebook."""
    lines = []
    for cell in source_nb.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            lines += [ln.strip() for ln in hidden.splitlines()
                      if len(ln.strip()) > 20 and not ln.strip().startswith("#")]
    return lines


def revealed_hidden_tests(page: str, source_nb) -> list[str]:
    """The hidden-test lines that a feedback page shows, as code or HTML-escaped."""
    return [code for code in hidden_test_lines(source_nb) if code in page or html.escape(code) in page]
