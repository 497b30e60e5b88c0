"""Drop 8's grading references: what the hidden tests draw, what the trusted ranks send
back, and how an answer is judged against it. The counts are checked against a
derivation written here: per block, two all-reduces in forward (attention and MLP,
Megatron's g) and two in backward (the conjugate f); one dp all-reduce per gradient
tensor; one send per microbatch to each pipeline neighbour."""
import random

import pytest

from autograder.references import drop08
from threeaxes.grading import check_on_ranks


def by_hand(dp, tp, pp, m, n_layers, stage, n_tensors):
    neighbours = (stage > 0) + (stage < pp - 1)
    return {"tp": (2 + 2) * (n_layers // pp) * m if tp > 1 else 0,
            "dp": n_tensors if dp > 1 else 0,
            "pp": neighbours * m}


def forward_only(*args):
    counts = by_hand(*args)
    return dict(counts, tp=counts["tp"] // 2)


def tp_slowest(dp, tp, pp, rank):
    """The grading.json mistake: ranks numbered with pp fastest."""
    return drop08.expected_layout_groups(dp, tp, pp, rank, ("pp", "dp", "tp"))


def neighbours_one_apart(dp, tp, pp, rank):
    got = drop08.expected_layout_groups(dp, tp, pp, rank)
    stage = rank // (dp * tp)
    return dict(got, prev=rank - 1 if stage > 0 else None, next=rank + 1 if stage < pp - 1 else None)


@pytest.mark.parametrize("seed", range(30))
def test_every_layout_draw_catches_both_layout_mistakes(seed):
    layouts = drop08.draw_layouts(random.Random(seed))
    assert len(layouts) == len(set(layouts)) == 3
    assert all(2 <= d * t * p <= 16 for d, t, p in layouts) and min(layouts[0]) > 1
    for wrong in (tp_slowest, neighbours_one_apart):
        caught = [drop08.layout_mistake(wrong(*layout, r), *layout, r)
                  for layout in layouts for r in range(layout[0] * layout[1] * layout[2])]
        assert any(caught), (wrong.__name__, layouts)
    first = layouts[0]
    assert "tp slowest" in next(filter(None, (drop08.layout_mistake(tp_slowest(*first, r), *first, r)
                                              for r in range(first[0] * first[1] * first[2]))))


@pytest.mark.parametrize("seed", range(30))
def test_every_count_draw_has_tp_with_pp_a_dp_axis_and_an_axis_of_four(seed):
    runs = drop08.draw_count_runs(random.Random(seed))
    assert all(d * t * p == 4 and n % p == 0 and 1 <= m <= 3 for d, t, p, m, n in runs)
    assert runs[0][:3] == (1, 2, 2) and runs[1][0] > 1 and 4 in runs[2][:3]


@pytest.mark.slow
def test_the_trusted_ranks_count_what_the_derivation_says_and_name_the_usual_slips():
    runs = [(1, 2, 2, 2, 4), (2, 1, 2, 3, 2), (1, 1, 4, 2, 4), (1, 4, 1, 1, 2)]
    traced = check_on_ranks(drop08.traced_counts, 4, runs)
    assert type(traced) is list and all(type(r) is tuple and len(r) == len(runs) for r in traced)
    for i, run in enumerate(runs):
        for rank, per_run in enumerate(traced):
            got = per_run[i]
            assert got["counts"] == by_hand(*run, got["stage"], got["n_tensors"]), (run, rank, got)
    assert drop08.counts_mistake(by_hand, runs, traced) is None
    assert "backward makes two more" in drop08.counts_mistake(forward_only, runs, traced)
    with pytest.raises(AssertionError, match="exactly the keys"):
        drop08.counts_mistake(lambda *args: {"ok": True}, runs, traced)
    # a middle stage talks to two neighbours: counting one is named with the run that shows it
    ends_only = lambda *a: dict(by_hand(*a), pp=a[3])   # noqa: E731
    message = drop08.counts_mistake(ends_only, runs, traced)
    assert "collectives_per_step(1, 1, 4, 2, 4, 1," in message, message


@pytest.mark.slow
def test_the_mesh_reference_equals_the_enumeration():
    for layout in [(1, 2, 2), (2, 1, 2), (4, 1, 1)]:
        mesh = check_on_ranks(drop08.mesh_layout_groups, 4, *layout)
        assert mesh == [drop08.expected_layout_groups(*layout, r) for r in range(4)], layout


def test_an_error_in_the_answer_names_the_drawn_call():
    def broken(dp, tp, pp, rank):
        return [][rank]
    with pytest.raises(AssertionError, match=r"layout_groups\(2, 3, 2, 5\) raised IndexError"):
        drop08.ask_layout_groups(broken, 2, 3, 2, 5)
    raised = r"collectives_per_step\(1, 2, 2, 1, 2, 0, 9\) raised ZeroDivisionError"
    with pytest.raises(AssertionError, match=raised):
        drop08.counts_mistake(lambda *args: 1 / 0, [(1, 2, 2, 1, 2)],
                              [({"stage": 0, "n_tensors": 9, "counts": {"tp": 4, "dp": 0, "pp": 1}},)])
