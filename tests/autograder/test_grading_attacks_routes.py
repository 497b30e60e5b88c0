"""Issue 43's route and page attacks, graded through nbgrader as `make grade` grades them.

The attacks of tests/grading_attacks_routes.py on drops 1 and 4 are students of the suite's one
graded class (tests/conftest.py's `graded_class`), beside the solved source and the untouched
release; autograded and fed back with the rest of the class. Each attack scores
what the blank scores, its neighbours what they always score, no page holds a hidden test
or a line of the solutions, and neither the feedback pages nor the autograded notebooks the
formgrader shows hold a live handler or script link.
"""
import html
import json
from html.parser import HTMLParser

import nbformat
import pytest
from grading_attacks_routes import ATTACKS, DROP, PIPELINE
from grading_harness import FULL, ROOT, ZERO, cell_by_grade_id, load_drop
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from autograder.plugins import inert

pytestmark = pytest.mark.slow
GRADED = [(drop, student) for drop in ATTACKS for student in (FULL, ZERO, *ATTACKS[drop])]
STUDENTS = [pytest.param(drop, student, id=f"{drop[:6]}:{student}") for drop, student in GRADED]


@pytest.fixture
def course(graded_class, drop):
    if drop not in graded_class.assignments:
        pytest.skip(f"{drop} is not graded in this run (THREEAXES_GRADE_ONLY)")
    return graded_class


@pytest.mark.parametrize("drop, student", STUDENTS)
def test_each_attack_scores_what_a_blank_scores_and_its_neighbours_are_unchanged(course, drop, student):
    points = load_drop(ROOT / "source" / drop).points
    want = points if student == FULL else {gid: 0.0 for gid in points}
    assert course.scores(drop, student) == want


@pytest.mark.parametrize("drop, student, used", [
    (DROP, "attack-route-rank-state-bytes", ["threeaxes.cost.rank_state_bytes"]),
    (PIPELINE, "attack-route-plan-methods", ["threeaxes.pipeline.schedules.Plan.bubble_fraction",
                                             "threeaxes.pipeline.peak_in_flight"]),
    (PIPELINE, "attack-route-simulate", ["threeaxes.pipeline.simulate"])])
def test_the_route_is_named_as_the_reason(course, drop, student, used):
    page = html.unescape(course.feedback_html(drop, student))
    for name in used:
        assert "this exercise scores 0" in page and f"used {name}" in page, name


def _solution_lines(source_nb, grade_id: str) -> list[str]:
    """The lines between an answer cell's solution markers in the instructor's notebook."""
    text = cell_by_grade_id(source_nb, grade_id).source
    return text.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0].splitlines()


class _Live(HTMLParser):
    """Every attribute of a page that would run a submission's script: a handler, or a link or
    source whose URL the allowlist refuses, carrying the attacks' marker."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            value = value or ""
            if "pwned" in value and (name.startswith("on") or not inert.allowed_attribute(tag, name, value)
                                     or (name in ("href", "src") and not inert.safe_url(value, tag == "img"))):
                self.found.append(f"<{tag} {name}={value!r}>")

    handle_startendtag = handle_starttag


@pytest.mark.parametrize("drop, student", STUDENTS)
def test_no_page_holds_a_secret_or_a_live_script(course, drop, student):
    course.assert_feedback_hides_hidden_tests(drop, student)
    page = course.feedback_html(drop, student)
    if student != FULL:
        source = course.source(drop)
        solution = [line.strip() for cell in source.cells if "### BEGIN SOLUTION" in cell.source
                    and cell.cell_type == "code"
                    for line in _solution_lines(source, cell.metadata["nbgrader"]["grade_id"])
                    if len(line.strip()) > 20]
        assert solution and not [line for line in solution if line in page or html.escape(line) in page]
    live = _Live()
    live.feed(page)
    assert live.found == [], f"{student}'s feedback page: {live.found[:3]}"


@pytest.mark.parametrize("drop, student", STUDENTS)
def test_the_autograded_notebook_the_formgrader_shows_is_inert(course, drop, student):
    nb = nbformat.read(course.root / "autograded" / student / drop / f"{drop}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "pwned" in cell.source:
            assert inert.is_inert(markdown2html_mistune(cell.source)), cell.source[:200]
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {})
            assert meta == inert.clean_metadata(meta), f"{student}: output metadata {json.dumps(meta)[:200]}"
            for key in ("text/html", "text/markdown"):
                shown = out.get("data", {}).get(key)
                if shown:
                    rendered = markdown2html_mistune(shown) if key == "text/markdown" else shown
                    assert inert.is_inert(rendered), (student, key, inert.problems(rendered))
    if student == "attack-markup-in-pages":   # the attack reached the notebook, and was made inert there
        outputs = [o for c in nb.cells for o in c.get("outputs", [])]
        assert any(o.get("data", {}).get("image/png") == "AAAA" for o in outputs)
