"""The bubble formulas against Megatron-LM Section 2.2, and against the plans
of threeaxes.pipeline.schedules simulated action by action (the package's one
schedule engine). Every expected value is the formula typed in here."""
from fractions import Fraction

import pytest

from threeaxes.cost import bubble_fraction, bubble_overhead
from threeaxes.pipeline import make_plan, simulate

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 8, 16, 32)]


@pytest.mark.parametrize("p, m", GRID)
def test_megatron_section_2_2_1_overhead(p, m):
    # Narayanan et al. 2021 Section 2.2.1: t_pb / t_id = (p - 1)/m for GPipe and 1F1B
    for schedule in ("gpipe", "1f1b"):
        assert bubble_overhead(p, m, schedule=schedule) == pytest.approx((p - 1) / m)


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3), (8, 4)])
def test_megatron_section_2_2_2_interleaved_overhead(p, v):
    # Section 2.2.2: interleaving v chunks per GPU divides the bubble by v
    for m in (p, 2 * p, 8 * p):
        assert bubble_overhead(p, m, virtual_stages=v) == pytest.approx((p - 1) / (v * m))
        assert bubble_overhead(p, m, schedule="interleaved", virtual_stages=v) \
            == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("p, m", GRID)
def test_fraction_of_wall_time_by_hand(p, m):
    # a step lasts (m + p - 1)(t_f + t_b); m (t_f + t_b) of it is work
    assert bubble_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("p, m", GRID)
def test_fraction_and_overhead_describe_the_same_idle_time(p, m):
    f, o = bubble_fraction(p, m), bubble_overhead(p, m)
    assert o == pytest.approx(f / (1 - f))
    assert 0 <= f < 1


def test_the_two_ratios_differ_where_it_matters():
    # p = 8, m = 8: the stage idles 7/15 of the step, yet the step takes 7/8 longer
    assert bubble_fraction(8, 8) == pytest.approx(7 / 15)
    assert bubble_overhead(8, 8) == pytest.approx(7 / 8)


# ---- against the plans, simulated --------------------------------------------

PLAN_GRID = [(schedule, p, m, v)
             for p in (1, 2, 3, 4, 8)
             for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                 ("interleaved", 3), ("interleaved", 4))
             # interleaving sends microbatches in groups of p: m a multiple of p
             for m in sorted({p, 2 * p, 3 * p} if v > 1 else {1, 2, 3, p + 1, 2 * p, 16})]


@pytest.mark.parametrize("schedule, p, m, v", PLAN_GRID)
@pytest.mark.parametrize("t_f, t_b", [(1, 2), (1, 1), (2, 3)])
def test_formulas_agree_with_the_simulated_plans(schedule, p, m, v, t_f, t_b):
    # Narayanan et al. 2021, Section 2.2: fill and drain take (p - 1)(t_f + t_b)/v
    # on each rank, against m (t_f + t_b) of work: idle over work is (p-1)/(v m)
    sim = simulate(make_plan(schedule, p, m, v), forward_cost=t_f, backward_cost=t_b)
    overhead = Fraction(p - 1, v * m)
    fraction = Fraction(p - 1, v * m + p - 1)
    assert sim.bubble_overhead == overhead, (schedule, p, m, v)
    assert sim.idle_fraction == fraction, (schedule, p, m, v)
    # each rank does m micro-batches through v chunks: work m v (t_f + t_b)
    assert sim.makespan == m * v * (t_f + t_b) * (1 + overhead)
    assert bubble_fraction(p, m, schedule=schedule, virtual_stages=v) == \
        pytest.approx(float(fraction))
    assert bubble_overhead(p, m, schedule=schedule, virtual_stages=v) == \
        pytest.approx(float(overhead))
    # '1f1b' with v chunks is the same interleaved schedule to the cost model
    if v > 1:
        assert bubble_fraction(p, m, virtual_stages=v) == pytest.approx(float(fraction))


@pytest.mark.parametrize("p, m, v", [(4, 8, 1), (4, 8, 2), (3, 6, 3)])
def test_simulated_plans_run_every_action_once(p, m, v):
    sim = simulate(make_plan("interleaved" if v > 1 else "1f1b", p, m, v))
    for r, events in sim.events.items():
        # rank r holds stages r, r + p, ..., r + (v - 1) p
        assert sorted((e.op, e.microbatch, e.stage) for e in events) == sorted(
            (op, k, r + c * p) for op in ("forward", "backward") for k in range(m)
            for c in range(v))


def test_plan_slots_bubble_matches_formula_with_equal_costs():
    # With F and B one slot each, the None slots of a plan are its bubble.
    p, m = 4, 8
    for schedule in ("gpipe", "1f1b"):
        plan = make_plan(schedule, p, m)
        assert plan.n_slots == 2 * (m + p - 1)
        for r in plan:
            busy = sum(a is not None for a in plan[r])
            assert busy == 2 * m
            assert 1 - busy / plan.n_slots == pytest.approx(bubble_fraction(p, m))


@pytest.mark.parametrize("args, kwargs, match", [
    ((4, 6), dict(virtual_stages=2), "multiple of pp=4"),
    ((4, 8), dict(schedule="gpipe", virtual_stages=2), "interleaved"),
    ((4, 8), dict(schedule="interleaved"), "virtual_stages >= 2"),
    ((4, 8), dict(schedule="zb"), "choose schedule"),
    ((0, 8), {}, "pp=0"),
    ((4, 0), {}, "micro_batches=0"),
])
def test_bad_arguments_say_what_to_change(args, kwargs, match):
    for fn in (bubble_fraction, bubble_overhead):
        with pytest.raises(ValueError, match=match):
            fn(*args, **kwargs)
