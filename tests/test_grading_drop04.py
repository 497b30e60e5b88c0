"""Drop 4 through the real nbgrader CLI: exact scores for typical submissions.

Points (from the source notebook): stage_boundaries_cover_layers_evenly 2,
bubble_fraction_matches_plan 2, stage0_holds_m_under_gpipe_and_at_most_p_under_1f1b 2
(and one hand-graded written answer, not counted here).
"""
import pytest

from grading_harness import released_course, set_answer

DROP = "drop04-pipeline-parallel"
POINTS = {"stage_boundaries_cover_layers_evenly": 2.0,
          "bubble_fraction_matches_plan": 2.0,
          "stage0_holds_m_under_gpipe_and_at_most_p_under_1f1b": 2.0}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One course, four students, one autograde run (each notebook runs once)."""
    course = released_course(tmp_path_factory, DROP)
    source = course.source(DROP)
    # Megatron's overhead ratio (idle over useful time) where the fraction of the step is asked.
    course.submit("bubble_over_m", DROP, set_answer(source, "bubble_fraction_answer", (
        "def bubble_fraction(p, m):\n"
        "    return (p - 1) / m\n")))
    # Ranges one layer too long: neighbouring stages share a layer, the last one invents layer n.
    course.submit("off_by_one_boundaries", DROP, set_answer(source, "stage_layers_answer", (
        "def stage_layers(n_layers, pp):\n"
        "    if n_layers % pp:\n"
        "        raise ValueError('pp must divide n_layers')\n"
        "    k = n_layers // pp\n"
        "    return [list(range(s * k, (s + 1) * k + 1)) for s in range(pp)]\n")))
    course.autograde(DROP)
    return course


def test_the_solved_source_gets_full_marks(graded):
    assert graded.scores(DROP, "solved_source") == POINTS
    assert graded.max_scores(DROP, "solved_source") == POINTS


def test_the_untouched_release_gets_zero_on_every_autograded_cell(graded):
    assert graded.scores(DROP, "untouched_release") == {k: 0.0 for k in POINTS}


def test_bubble_over_m_loses_exactly_the_bubble_points(graded):
    assert graded.scores(DROP, "bubble_over_m") == {**POINTS, "bubble_fraction_matches_plan": 0.0}


def test_off_by_one_boundaries_lose_exactly_the_boundary_points(graded):
    assert graded.scores(DROP, "off_by_one_boundaries") == \
        {**POINTS, "stage_boundaries_cover_layers_evenly": 0.0}


def test_feedback_names_the_mistake(graded):
    graded.generate_feedback(DROP)
    html = graded.feedback_html(DROP, "off_by_one_boundaries")
    assert "should each appear exactly once" in html   # the visible check's message reaches the student
    graded.assert_feedback_hides_hidden_tests(DROP, "off_by_one_boundaries")
