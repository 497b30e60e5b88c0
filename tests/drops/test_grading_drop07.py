"""Drop 7's exercise 2 (`smallest_m`) when a student makes two slips at once: the visible
check and the hidden test name both slips where the catalogue can tell them apart, and
otherwise say what is wrong without spelling out the search that answers it (issue 34,
section 4). The slips are written here as a student writes them, from the exercise text:
the bubble is (p-1)/(v m + p - 1) of the step (Narayanan et al. 2021, Section 2.2.2), m a
multiple of p under Megatron's interleaved schedule, strictly below the target."""
import random

import pytest

from autograder.references import drop07
from threeaxes.grading import visible


def megatron_ratio_stepping_by_one(p, target, v=1):
    """Idle over useful time, (p-1)/(v m), and m stepped by 1 even when v > 1."""
    m = 1
    while (p - 1) / (v * m) >= target:
        m += 1
    return m


def equal_allowed_stepping_by_one(p, target, v=1):
    """Stops once the bubble is at most the target, and m stepped by 1 even when v > 1."""
    m = 1
    while (p - 1) / (v * m + p - 1) > target:
        m += 1
    return m


def always_seven(p, target, v=1):
    return 7


def message(fn):
    with pytest.raises(AssertionError) as caught:
        visible.check("drop07", "smallest_m_answer", fn, show=False)
    return str(caught.value)


@pytest.mark.parametrize("fn, slip", [(megatron_ratio_stepping_by_one, "useful time"),
                                      (equal_allowed_stepping_by_one, "strictly below")])
def test_the_visible_check_names_both_slips(fn, slip):
    said = message(fn)
    assert "two slips" in said and slip in said and "multiple of p" in said, said


def test_a_wrong_answer_no_mistake_explains_is_told_what_to_check_not_the_solution():
    said = message(always_seven)
    assert "is not right" in said and "strictly below" in said and "multiple of p" in said, said
    # the old message spelled out the search: start at the step, add it until the formula is below
    assert "try m" not in said and "until" not in said and "(v m + p - 1)" not in said, said


def test_the_hidden_test_names_both_slips_on_drawn_cases():
    named = 0
    for seed in range(30):
        for p, target, v in drop07.draw_target_cases(random.Random(seed)):
            got = megatron_ratio_stepping_by_one(p, target, v)
            mistake = drop07.smallest_m_mistake(got, p, target, v)
            assert mistake is not None or got == drop07.expected_smallest_m(p, target, v)
            if v > 1 and got % p:
                assert "two slips" in mistake and "useful time" in mistake and "multiple of p" in mistake
                named += 1
    assert named > 10      # the draws reach the two slips often


def test_the_hidden_test_names_each_slip_alone_as_before():
    # Megatron's ratio alone (m stepped by p): 4 ranks, v = 2, target 0.12 -> 16, not 12
    alone = drop07.smallest_m_mistake(16, 4, 0.12, 2)
    assert drop07.expected_smallest_m(4, 0.12, 2) == 12 and "useful time" in alone and "two slips" not in alone
    # stepping by 1 alone: the first m with 3/(2m + 3) < 0.1 is 14, not a multiple of 4 (want 16)
    assert drop07.expected_smallest_m(4, 0.1, 2) == 16
    alone = drop07.smallest_m_mistake(14, 4, 0.1, 2)
    assert "multiple of p" in alone and "two slips" not in alone
