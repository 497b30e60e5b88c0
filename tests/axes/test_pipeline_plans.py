"""Pipeline plans, checked without processes (STYLE 9): every rule a plan
must keep, for every p in 1..8 and m in 1..16, under GPipe and 1F1B, and
the bubble formulas of threeaxes.cost.bubble against the simulated plans.

The expected values are written here from the rules and formulas, not read
back from the code under test.
"""
import ast
import importlib.util
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from threeaxes.cost import bubble_fraction, bubble_overhead
from threeaxes.pipeline import (
    SCHEDULES,
    Action,
    Plan,
    gpipe,
    interleaved_1f1b,
    make_plan,
    one_f_one_b,
    peak_in_flight,
    simulate,
)
from threeaxes.pipeline.simulate import format_timeline
from threeaxes.pipeline.stages import build_stages, check_stage_layers, split_stages
from threeaxes.toy import ToyConfig, ToyTransformer, count_parameters, make_batch
from threeaxes.trace import Event

GRID = [(p, m) for p in range(1, 9) for m in range(1, 17)]
CACHED = {"gpipe": lru_cache(None)(gpipe), "1f1b": lru_cache(None)(one_f_one_b)}


def plans():
    for name, make in CACHED.items():
        for p, m in GRID:
            yield name, p, m, make(p, m)


# -- the plan's content ----------------------------------------------------------

def test_action_prints_like_pytorch():
    assert str(Action(2, 0, "F")) == "2F0"
    assert str(Action(0, 11, "B")) == "0B11"
    assert str(Action(1, 3, "W")) == "1W3"     # zero-bubble: PyTorch's spelling too
    with pytest.raises(ValueError, match="'F'"):
        Action(0, 0, "X")
    with pytest.raises(AttributeError):
        Action(0, 0, "F").stage = 1  # frozen


def test_every_stage_runs_each_microbatch_forward_once_and_backward_once():
    for name, p, m, plan in plans():
        assert (plan.p, plan.m, len(plan)) == (p, m, p)
        for rank in range(p):
            row = [a for a in plan[rank] if a is not None]
            assert all(a.stage == rank for a in row), (name, p, m)
            assert sorted((a.microbatch, a.kind) for a in row) == \
                sorted((k, kind) for k in range(m) for kind in "FB"), (name, p, m, rank)


def test_gpipe_grid_for_two_stages_by_hand():
    F, B = (lambda s, k: Action(s, k, "F")), (lambda s, k: Action(s, k, "B"))
    expected = {0: [F(0, 0), F(0, 1), None, None, B(0, 0), B(0, 1)],
                1: [None, F(1, 0), F(1, 1), B(1, 0), B(1, 1), None]}
    plan = gpipe(2, 2)
    assert {r: plan[r] for r in plan} == expected
    assert str(plan).splitlines()[1] == "rank 0 | 0F0 0F1  .   .  0B0 0B1"


def test_one_f_one_b_phases():
    for p, m in GRID:
        plan = one_f_one_b(p, m)
        for s in range(p):
            kinds = "".join(a.kind for a in plan.actions(s))
            warmup = min(p - 1 - s, m)
            # Warmup: p-1-s forwards first; then F and B alternate; Cooldown: backwards
            assert kinds.startswith("F" * warmup + ("FB" if m > warmup else "B")), (p, m, s, kinds)
            assert kinds == "F" * warmup + "FB" * (m - warmup) + "B" * warmup, (p, m, s, kinds)


# -- timing rules ------------------------------------------------------------------

def _key(e):
    """(stage, microbatch, 'F' or 'B') of a simulated trace Event."""
    return (e.stage, e.microbatch, {"forward": "F", "backward": "B"}[e.op])


def _check_dependencies(events_by_rank, n_stages):
    at = {_key(e): e for evs in events_by_rank.values() for e in evs}
    for (s, k, kind), e in at.items():
        if kind == "F" and s > 0:
            assert e.start >= at[(s - 1, k, "F")].end, f"{s}F{k} starts before {s - 1}F{k} ends"
        if kind == "B":
            assert e.start >= at[(s, k, "F")].end, f"{s}B{k} starts before its own forward"
            if s < n_stages - 1:
                assert e.start >= at[(s + 1, k, "B")].end, f"{s}B{k} starts before {s + 1}B{k}"


def test_no_action_runs_before_what_it_depends_on_in_simulated_time():
    for name, p, m, plan in plans():
        sim = simulate(plan, forward_cost=1, backward_cost=2)
        _check_dependencies(sim.events, p)
        for rank, events in sim.events.items():
            # each rank keeps the plan's order, one action at a time
            assert [_key(e) for e in events] == \
                [(a.stage, a.microbatch, a.kind) for a in plan.actions(rank)], (name, p, m)
            assert all(a.end <= b.start for a, b in zip(events, events[1:]))
            assert all(e.end - e.start == (1 if e.op == "forward" else 2) for e in events)


def test_simulated_events_are_the_package_trace_events():
    sim = simulate(one_f_one_b(2, 2), forward_cost=1, backward_cost=2)
    # rank 1 holds stage 1: its first forward waits one unit for stage 0's
    assert sim.events[1][0] == Event(rank=1, kind="compute", op="forward", start=1, end=2,
                                     module="stage 1", stage=1, microbatch=0)
    assert [e.label for e in sim.events[0]] == ["0F0", "0F1", "0B0", "0B1"]
    assert all(type(e) is Event and e.rank == r for r, evs in sim.events.items() for e in evs)


def test_grid_slots_respect_dependencies():
    for name, p, m, plan in plans():
        slot = {(a.stage, a.microbatch, a.kind): t for r in plan for t, a in enumerate(plan[r]) if a}
        for (s, k, kind), t in slot.items():
            before = [(s - 1, k, "F")] if kind == "F" and s else []
            if kind == "B":
                before = [(s, k, "F")] + ([(s + 1, k, "B")] if s < p - 1 else [])
            assert all(slot[d] < t for d in before), (name, p, m, s, k, kind)


def test_bubble_fraction_with_unit_costs_is_exact():
    # GPipe paper / Narayanan et al. 2021: (p-1)(t_f+t_b) idle per stage in a
    # step of (m+p-1)(t_f+t_b), so idle over p*makespan is (p-1)/(m+p-1).
    for name, p, m, plan in plans():
        expected = Fraction(p - 1, m + p - 1)
        sim = simulate(plan, forward_cost=1, backward_cost=2)
        assert sim.idle_fraction == expected, (name, p, m, sim.idle_fraction)
        assert sim.makespan == 3 * (m + p - 1)
        assert plan.bubble_fraction() == expected, (name, p, m)   # counted from the grid
        assert plan.idle_slots() == 2 * p * (p - 1)
        # the cost model's formula says the same
        assert bubble_fraction(p, m, schedule=name) == pytest.approx(float(expected))


def test_activations_held_by_stage_0():
    for p, m in GRID:
        # GPipe runs every forward before any backward
        assert peak_in_flight(CACHED["gpipe"](p, m), 0) == m
        # 1F1B: the p-1 warmup forwards plus the one of the first 1F1B pair
        plan = CACHED["1f1b"](p, m)
        assert peak_in_flight(plan, 0) == min(p, m) <= p
        for s in range(p):
            assert peak_in_flight(plan, s) == min(p - s, m)


@pytest.mark.parametrize("p,v", [(2, 2), (4, 2), (2, 4), (3, 3)])
def test_interleaved_overhead_is_p_minus_1_over_v_m(p, v):
    for m in (p, 2 * p, 4 * p):
        plan = interleaved_1f1b(p, m, v)
        assert (plan.v, plan.n_stages) == (v, p * v)
        for r in plan:
            assert {a.stage for a in plan.actions(r)} == {r + c * p for c in range(v)}
        sim = simulate(plan, forward_cost=1, backward_cost=2)
        _check_dependencies(sim.events, p * v)
        # Narayanan et al. 2021, Section 2.2.2: bubble over ideal time = (1/v)(p-1)/m
        assert sim.bubble_overhead == Fraction(p - 1, v * m)
        assert bubble_overhead(p, m, schedule="interleaved", virtual_stages=v) == \
            pytest.approx(float(sim.bubble_overhead))
    with pytest.raises(ValueError, match="multiple of p"):
        interleaved_1f1b(4, 6, 2)


# -- plans that are wrong say so -----------------------------------------------------

def test_invalid_plans_are_rejected_with_a_fix():
    F, B = (lambda s, k: Action(s, k, "F")), (lambda s, k: Action(s, k, "B"))
    with pytest.raises(ValueError, match="missing"):
        Plan({0: [F(0, 0)]})
    with pytest.raises(ValueError, match="twice"):
        Plan({0: [F(0, 0), B(0, 0), B(0, 0)]})
    with pytest.raises(ValueError, match="lives on rank 1"):
        Plan({0: [F(1, 0)], 1: [F(0, 0), B(0, 0), B(1, 0)]})
    with pytest.raises(ValueError, match="from_orders"):
        Plan({0: [F(0, 0), None, B(0, 0)], 1: [F(1, 0), B(1, 0)]})
    with pytest.raises(ValueError, match="deadlocks"):
        Plan.from_orders({0: [B(0, 0), F(0, 0)]})


def test_layout_errors_say_what_to_change():
    with pytest.raises(ValueError, match=r"pp=5 > n_layers=4.*choose pp in \{1, 2, 4\}"):
        split_stages(4, 5)
    with pytest.raises(ValueError, match=r"pp=3 does not divide n_layers=4.*uneven=True"):
        split_stages(4, 3)
    assert split_stages(4, 3, uneven=True) == [[0, 1], [2], [3]]
    assert split_stages(4, 2) == [[0, 1], [2, 3]]
    assert split_stages(4, 4) == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="in order"):
        check_stage_layers([[0, 1], [1, 2, 3]], 4)
    for make in (gpipe, one_f_one_b):
        with pytest.raises(ValueError, match=r"m=0.*>= 1"):
            make(2, 0)
    from threeaxes.pipeline.executor import split_microbatches
    with pytest.raises(ValueError, match=r"global batch 8 is not divisible by m=3; choose m in \{1, 2, 4, 8\}"):
        split_microbatches(torch.zeros(8, 4), 3)


# -- plans by name: one table ----------------------------------------------------------

def test_make_plan_builds_every_schedule_by_name():
    assert sorted(SCHEDULES) == ["1f1b", "gpipe", "interleaved"]
    assert str(make_plan("gpipe", 3, 4)) == str(gpipe(3, 4))
    assert str(make_plan("1f1b", 3, 4)) == str(one_f_one_b(3, 4))
    plan = make_plan("interleaved", 2, 4, v=2)
    assert (plan.p, plan.m, plan.v, plan.n_stages) == (2, 4, 2, 4)
    with pytest.raises(ValueError, match=r"schedule='zero-bubble'; choose one of \['1f1b', 'gpipe', 'interleaved'\]"):
        make_plan("zero-bubble", 2, 4)
    with pytest.raises(ValueError, match="v=2 chunks per rank needs schedule='interleaved'"):
        make_plan("1f1b", 2, 4, v=2)


def test_one_schedule_engine_and_one_schedules_table():
    # the second engine (threeaxes/cost/timeline.py) is gone, and nothing names it
    assert importlib.util.find_spec("threeaxes.cost.timeline") is None
    import threeaxes.cost
    import threeaxes.plots
    assert not hasattr(threeaxes.cost, "simulate_schedule")
    for gone in ("draw_timeline", "TimelineData", "_from_schedules_module"):
        assert not hasattr(threeaxes.plots, gone), gone
    # exactly one module of the package defines SCHEDULES
    root = Path(threeaxes.__file__).parent
    defines = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == "SCHEDULES" for t in targets):
                defines.append(path.relative_to(root).as_posix())
    assert defines == ["pipeline/schedules.py"], (
        f"SCHEDULES is defined in {defines}; keep the one table in pipeline/schedules.py "
        f"and import it elsewhere")


# -- stages, in one process ------------------------------------------------------------

@pytest.mark.parametrize("pp", [1, 2, 4])
def test_stages_partition_the_model_and_compose_to_it(pp):
    cfg = ToyConfig(dtype=torch.float64, seq_len=8)
    full = ToyTransformer(cfg, seed=0)
    stages = build_stages(cfg, pp, seed=0)
    names = [n for s in stages.values() for n, _ in s.named_parameters()]
    assert sorted(names) == sorted(n for n, _ in full.named_parameters())   # each once
    assert sum(q.numel() for s in stages.values() for q in s.parameters()) == count_parameters(full)["total"]
    assert "tok_embed.weight" in dict(stages[0].named_parameters())
    assert "head.weight" in dict(stages[pp - 1].named_parameters())
    x, _ = make_batch(cfg, 4)
    y = x
    for s in range(pp):
        y = stages[s](y)
    torch.testing.assert_close(y, full(x), rtol=0, atol=0)


def test_text_timeline_draws_idle_time():
    sim = simulate(gpipe(2, 2), 1, 2)
    text = format_timeline(sim.events, width=9)
    # makespan 9: rank 0 does F F for 2, waits 3, then B B for 4
    assert text.splitlines() == ["rank 0 |FF...BBBB|", "rank 1 |.FFBBBB..|"]


def test_text_timeline_of_trace_events_skips_communication():
    compute = [Event(0, "compute", "forward", 10.0, 11.0), Event(0, "compute", "backward", 12.0, 14.0)]
    comm = [Event(0, "comm", "send", 11.0, 12.0, axis="pp", peer=1)]
    assert format_timeline({0: compute + comm}, width=4) == "rank 0 |F.BB|"


def test_standard_plans_send_in_the_order_they_are_received():
    # NCCL has no tags: GPipe, 1F1B and interleaved 1F1B must cross each link in FIFO order
    from threeaxes.pipeline.executor import _check_fifo
    for *_, plan in plans():
        _check_fifo(plan)
    for p, v in [(2, 2), (4, 2), (3, 3)]:
        _check_fifo(interleaved_1f1b(p, 2 * p, v))
    F, B = (lambda s, k: Action(s, k, "F")), (lambda s, k: Action(s, k, "B"))
    swapped = Plan.from_orders({0: [F(0, 0), F(0, 1), B(0, 0), B(0, 1)],
                                1: [F(1, 1), F(1, 0), B(1, 0), B(1, 1)]})
    with pytest.raises(ValueError, match="gloo"):
        _check_fifo(swapped)

