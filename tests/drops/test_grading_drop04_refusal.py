"""Drop 4's exercise 1 states a rule: stage_layers(n_layers, pp) raises ValueError when pp
does not divide n_layers. The visible check holds cases where it must (issue 34, section 4),
so an answer that never raises is named there, in the student's own names, and not told
"right on every stored case"; the layers of the others come from the exercise's text
(stage s holds s*k .. s*k+k-1, k = n_layers // pp), written here by hand."""
import pytest

from threeaxes.grading import drop04, visible


def by_hand(n_layers, pp):
    if n_layers % pp:
        raise ValueError(f"pp={pp} does not divide n_layers={n_layers}")
    k = n_layers // pp
    return [list(range(s * k, s * k + k)) for s in range(pp)]


def never_raises(n_layers, pp):
    k = n_layers // pp
    return [list(range(s * k, s * k + k)) for s in range(pp)]


def checked(fn):
    return lambda n_layers, pp: drop04.layers_or_refusal(fn, n_layers, pp)


def test_the_stored_cases_hold_calls_that_must_raise():
    cases = visible.load("drop04")["stage_layers_answer"]["cases"]
    refused = [c["args"] for c in cases if c["want"] == drop04.REFUSED]
    assert refused and all(n % pp for n, pp in refused)
    assert all(c["want"] == by_hand(*c["args"]) for c in cases if c["want"] != drop04.REFUSED)


def test_a_right_answer_passes(capsys):
    visible.check("drop04", "stage_layers_answer", checked(by_hand))
    assert "ValueError" in capsys.readouterr().out


def test_an_answer_that_never_raises_is_named_in_the_students_terms():
    with pytest.raises(AssertionError) as caught:
        visible.check("drop04", "stage_layers_answer", checked(never_raises), show=False)
    said = str(caught.value)
    assert said.startswith("stage_layers(") and "or_refusal" not in said, said
    assert "raise ValueError" in said and "right on every stored case" not in said, said


def test_another_error_is_reported_with_the_call():
    def wrong_error(n_layers, pp):
        raise TypeError("no")

    with pytest.raises(AssertionError, match=r"stage_layers\(4, 2\) raised TypeError"):
        drop04.layers_or_refusal(wrong_error, 4, 2)
