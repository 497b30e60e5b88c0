"""Measured pipeline steps against the plans and the cost model.

Fast tests, one process: `SavedActivations` against bytes derived by hand for
single ops (a tensor saved twice, views, slices, parameters); `measured_bubble`
against a hand example and against `simulate`'s own idle fraction (exact, with
Fraction times); `DelayedStage` changes no number; bad input says what to change.

Slow tests, one launch of 4 pipeline ranks shared by all (toy config with 8 blocks so that
interleaving with v = 2 has a block per chunk): every stage's measured peak of saved bytes equals
in-flight microbatches (the cost model, `in_flight_micro_batches`, and the plan, `peak_in_flight`)
times one microbatch's saved bytes measured in this process, exactly; the measured bubble is within
the stated tolerance of (p - 1)/(v m + p - 1).
"""
import sys
import time
from fractions import Fraction

import cloudpickle
import pytest
import torch
import torch.nn as nn

from threeaxes.cost.activations import in_flight_micro_batches
from threeaxes.cost.bubble import bubble_fraction
from threeaxes.launch import launch
from threeaxes.pipeline import delay, make_plan, peak_in_flight, simulate
from threeaxes.pipeline.measure import (
    DelayedStage,
    SavedActivations,
    bubble_bounds,
    hop_latencies,
    measure_pipeline,
    measured_bubble,
    one_microbatch_saved_bytes,
    predicted_peak_bytes,
)
from threeaxes.pipeline.stages import build_stages
from threeaxes.plots import measured_beside_predicted
from threeaxes.toy import ToyConfig, lm_loss, make_batch
from threeaxes.trace import COMPUTE, Event, Trace

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/

F64 = torch.float64


# -- SavedActivations, one process ----------------------------------------------------

def test_an_op_saving_its_input_counts_its_bytes_until_backward():
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    with SavedActivations() as saved:
        y = x.sin()                          # sin saves its input: 12 float64 = 96 bytes
        assert saved.current == 96
        y.sum().backward()
    assert saved.peak == 96 and saved.current == 0


def test_a_tensor_saved_twice_and_its_views_count_once():
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    with SavedActivations() as saved:
        y = x * x                            # mul saves x as both operands: still 96 bytes
        assert saved.current == 96
        a = (x + 1).exp()                    # exp saves its result a: 96 more
        b = a.view(12).cos()                 # cos saves a view of a: the same bytes again
        assert saved.current == 96 + 96
        (y.sum() + b.sum()).backward()
    assert saved.peak == 192 and saved.current == 0


def test_a_slice_counts_only_its_own_bytes():
    x = torch.randn(4, 3, dtype=F64, requires_grad=True)
    with SavedActivations() as saved:
        y = x[:2].sin()                      # 2 of 4 rows: 6 float64 = 48 bytes
        z = x[2:].sin()                      # the other 2 rows: 48 more, no overlap
        assert saved.current == 96
        del y, z
    assert saved.current == 0                # the graph died without a backward: released too


def test_parameters_of_excluded_modules_are_weights_not_activations():
    layer = nn.Linear(4, 5, dtype=F64)
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    with SavedActivations() as everything:
        layer(x)                             # saves x (96 bytes) and the weight (20 float64, 160 bytes)
    with SavedActivations(exclude=layer) as activations:
        layer(x)
    assert everything.peak == 96 + 160 and activations.peak == 96


# -- measured_bubble -------------------------------------------------------------------

def _ev(rank, op, start, end):
    return Event(rank, COMPUTE, op, start, end, stage=rank, microbatch=0)


def test_measured_bubble_by_hand():
    # rank 0 busy 0-1 and 3-4, rank 1 busy 1-3: a step of 4 s, idle 2 s on each rank
    events = [_ev(0, "forward", 0, 1), _ev(1, "forward", 1, 2), _ev(1, "backward", 2, 3),
              _ev(0, "backward", 3, 4), Event(1, "comm", "recv", 0, 1)]   # comm is not work
    b = measured_bubble(events)
    assert (b.start, b.end) == (0, 4)
    assert b.busy == {0: 2, 1: 2} and b.idle_fraction == {0: 0.5, 1: 0.5} and b.mean == 0.5


@pytest.mark.parametrize("schedule,m,v", [("gpipe", 8, 1), ("1f1b", 5, 1), ("interleaved", 8, 2)])
def test_measured_bubble_of_a_simulation_is_its_idle_fraction(schedule, m, v):
    sim = simulate(make_plan(schedule, 4, m, v), Fraction(1, v), Fraction(2, v))
    assert measured_bubble(sim).mean == sim.idle_fraction          # exact: Fraction times
    assert sim.idle_fraction == Fraction(3, v * m + 3)             # the formula, written out


def test_hop_latencies_by_hand():
    # F(0,0) on rank 0 ends at 1.0; rank 1, idle until then, starts F(1,0) at 1.25: one hop of 0.25.
    # F(1,1) waits for F(0,1) (ended 2.0) but rank 1 was busy until 2.5: no hop counted.
    # B(0,0) waits for B(1,0), ended 3.5, rank 0 idle since 2.0: starts 3.75, a hop of 0.25.
    events = [Event(0, COMPUTE, "forward", 0.0, 1.0, stage=0, microbatch=0),
              Event(0, COMPUTE, "forward", 1.0, 2.0, stage=0, microbatch=1),
              Event(1, COMPUTE, "forward", 1.25, 2.5, stage=1, microbatch=0),
              Event(1, COMPUTE, "forward", 2.5, 3.0, stage=1, microbatch=1),
              Event(1, COMPUTE, "backward", 3.0, 3.5, stage=1, microbatch=0),
              Event(0, COMPUTE, "backward", 3.75, 4.0, stage=0, microbatch=0)]
    assert hop_latencies(events) == [0.25, 0.25]
    # in a simulation a hop is free
    sim = simulate(make_plan("1f1b", 4, 8))
    assert set(hop_latencies([e for row in sim.events.values() for e in row])) == {0}


def test_measured_bubble_needs_spans():
    with pytest.raises(ValueError, match="run_plan"):
        measured_bubble([Event(0, "comm", "send", 0, 1)])


# -- DelayedStage --------------------------------------------------------------------

CFG64 = ToyConfig(n_layers=2, d_model=16, n_heads=2, seq_len=8, vocab_size=16, dtype=F64)


def test_delayed_stage_changes_no_number_and_lasts_what_it_says(monkeypatch):
    plain, = build_stages(CFG64, 1).values()
    slow = DelayedStage(build_stages(CFG64, 1)[0], 0.25, 0.3)
    tokens, labels = make_batch(CFG64, 2, seed=1)
    lm_loss(plain(tokens), labels).backward()
    t0 = time.perf_counter()
    loss = lm_loss(slow(tokens), labels)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    assert t1 - t0 >= 0.25 and t2 - t1 >= 0.3
    for (name, a), (_, b) in zip(plain.named_parameters(), slow.stage.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
    # the wrapped stage called on its own takes no delay: it never reaches the sleep
    # (asserted without a clock, so a loaded machine cannot fail it)
    # long targets cost nothing under the spy, and leave a wait however loaded the machine is
    spied = DelayedStage(build_stages(CFG64, 1)[0], 5.0, 6.0)
    sleeps = []
    with monkeypatch.context() as patched:
        patched.setattr(delay.time, "sleep", sleeps.append)
        lm_loss(spied.stage(tokens), labels).backward()
        assert sleeps == []
        lm_loss(spied(tokens), labels).backward()   # the spy does see the wrapper's waits
    assert len(sleeps) == 2 and sleeps[0] > 4 and sleeps[1] > 5


def test_delayed_stage_refuses_a_bad_duration():
    stage = build_stages(CFG64, 1)[0]
    for bad in (-0.01, "5ms", True, 60):
        with pytest.raises(ValueError, match="seconds between 0 and 10"):
            DelayedStage(stage, bad, 0.01)


def test_predicted_peak_bytes_is_peak_in_flight_times_bytes_with_one_stage_per_rank():
    for schedule in ("gpipe", "1f1b"):
        plan = make_plan(schedule, 4, 6)
        for r in range(4):
            assert predicted_peak_bytes(plan, r, {s: 1000 for s in range(4)}) == \
                peak_in_flight(plan, r) * 1000


# -- measured on 4 ranks -------------------------------------------------------------

# 8 blocks: 2 per stage with p = 4, 1 per chunk when interleaved with v = 2
CFG = ToyConfig(n_layers=8, d_model=16, n_heads=2, seq_len=8, vocab_size=16)
P, BATCH, LAYER_F, LAYER_B = 4, 8, 0.02, 0.04
RUNS = [("gpipe", 8, 1), ("1f1b", 8, 1), ("interleaved", 8, 2), ("1f1b", 4, 1)]


@pytest.fixture(scope="module")
def measured():
    return launch(measure_pipeline, P, CFG, RUNS, batch=BATCH, layer_forward_s=LAYER_F,
                  layer_backward_s=LAYER_B, repeats=2, timeout=120)


def _one_microbatch_bytes(plan, m):
    stages = build_stages(CFG, plan.n_stages)
    return {s: one_microbatch_saved_bytes(stage, BATCH // m) for s, stage in stages.items()}


@pytest.mark.slow
@pytest.mark.parametrize("schedule,m", [("gpipe", 8), ("1f1b", 8), ("1f1b", 4)])
def test_peak_saved_bytes_are_in_flight_times_one_microbatch(measured, schedule, m):
    plan = make_plan(schedule, P, m)
    one = _one_microbatch_bytes(plan, m)
    for stage in range(P):
        peak = measured[stage][(schedule, m, 1)]["peak_bytes"]
        in_flight = in_flight_micro_batches(P, m, stage=stage, schedule=schedule)
        assert in_flight == peak_in_flight(plan, stage)
        assert peak == in_flight * one[stage], (schedule, m, stage, peak, one[stage])
        assert peak % one[stage] == 0 and peak // one[stage] == in_flight
    # what the course claims: stage 0 holds m microbatches under GPipe, p under 1F1B
    stage0 = measured[0][(schedule, m, 1)]["peak_bytes"] // one[0]
    assert stage0 == (m if schedule == "gpipe" else min(P, m))


@pytest.mark.slow
def test_interleaved_peak_matches_the_plan_walked_chunk_by_chunk(measured):
    plan = make_plan("interleaved", P, 8, 2)
    one = _one_microbatch_bytes(plan, 8)
    for rank in range(P):
        assert measured[rank][("interleaved", 8, 2)]["peak_bytes"] == \
            predicted_peak_bytes(plan, rank, one)
    # rank 0 at its peak holds 2(p - 1) + (v - 1)p + 1 = 11 chunks: 5.5 stages' worth
    chunks = {0: 8, 4: 3}
    assert predicted_peak_bytes(plan, 0, one) == sum(n * one[s] for s, n in chunks.items())
    assert sum(chunks.values()) / 2 == in_flight_micro_batches(P, 8, schedule="interleaved",
                                                               virtual_stages=2)


@pytest.mark.slow
@pytest.mark.parametrize("schedule,m,v", RUNS)
def test_the_trace_holds_every_forward_and_backward_once(measured, schedule, m, v):
    spans = Trace.merge(r[(schedule, m, v)]["trace"] for r in measured).compute()
    keys = sorted((e.stage, e.microbatch, e.op) for e in spans)
    want = sorted((s, k, op) for s in range(P * v) for k in range(m) for op in ("forward", "backward"))
    assert keys == want
    for e in spans:
        assert e.rank == e.stage % P


@pytest.mark.slow
@pytest.mark.parametrize("schedule,m,v", RUNS)
def test_measured_bubble_is_the_formula_within_tolerance(measured, schedule, m, v):
    got = measured_bubble(Trace.merge(r[(schedule, m, v)]["trace"] for r in measured)).mean
    want = bubble_fraction(P, m, schedule=schedule, virtual_stages=v)
    low, high = bubble_bounds(want)
    assert want > low and high < 1
    assert low <= got <= high, f"{schedule} m={m}: measured {got:.3f}, formula {want:.3f}"


@pytest.mark.slow
def test_a_batch_that_does_not_split_into_m_says_which_m_would():
    from threeaxes.launch import RankError

    with pytest.raises(RankError, match=r"choose m in \{1, 2, 3, 6\}"):
        launch(measure_pipeline, 2, CFG, [("1f1b", 4, 1)], batch=6, timeout=60)


@pytest.mark.slow
def test_measured_beside_predicted_draws_two_timelines(measured):
    key = ("1f1b", 8, 1)
    events = Trace.merge(r[key]["trace"] for r in measured).events
    fig = measured_beside_predicted(events, make_plan("1f1b", P, 8), 2 * LAYER_F, 2 * LAYER_B)
    top, bottom = fig.axes[:2]
    assert top.get_title().startswith("measured") and bottom.get_title().startswith("predicted")
    assert top.get_xlim() == bottom.get_xlim()


# -- drop 7's grading references --------------------------------------------------------

def test_drop07_drawn_targets_sit_on_no_boundary():
    import random

    from autograder.references import drop07

    assert drop07.on_a_boundary(4, 0.1)            # m = 27: 3/30 is exactly 10%
    for seed in range(60):
        cases = drop07.draw_target_cases(random.Random(seed))
        assert [v for _, _, v in cases].count(1) == 3 and all(v >= 1 for _, _, v in cases)
        for p, target, v in cases:
            m = drop07.expected_smallest_m(p, target, v)
            step = 1 if v == 1 else p
            # written from the formula with exact fractions: m is the first step past (p-1)(1-t)/(v t)
            for k in range(step, 2 * m + step, step):
                assert Fraction(p - 1, v * k + p - 1) != Fraction(target).limit_denominator(10 ** 6)
            below, above = Fraction(p - 1, v * m + p - 1), Fraction(p - 1, v * (m - step) + p - 1)
            assert below < Fraction(str(target)) <= above


def test_drop07_drawn_schedules_have_the_papers_answer_and_catch_ignored_interleaving():
    import random

    from autograder.references import drop07

    def by_hand(schedule, p, m, v):
        # Narayanan et al. 2021, 2.2.1-2.2.2: bubble (p-1)/(v m + p - 1); stage 0 holds m (GPipe),
        # min(p, m) (1F1B), 2(p-1) + (v-1)p + 1 chunks, all m v when m = p, of 1/v each (interleaved)
        held = m if schedule == "gpipe" else min(p, m) if v == 1 else (
            m * v if m == p else min(m * v, 2 * (p - 1) + (v - 1) * p + 1)) / v
        return {"bubble": (p - 1) / (v * m + p - 1), "stage0_in_flight": float(held)}

    for seed in range(30):
        cases = drop07.draw_schedule_cases(random.Random(seed))
        assert {c[0] for c in cases} == {"gpipe", "1f1b", "interleaved"}
        one_f_one_b = [(p, m) for schedule, p, m, _ in cases if schedule == "1f1b"]
        assert any(m < p for p, m in one_f_one_b) and any(m > p for p, m in one_f_one_b)
        for case in cases:
            assert drop07.prediction_mistake(by_hand(*case), *case) is None
        ignored = [drop07.prediction_mistake({**by_hand(*c), "bubble": (c[1] - 1) / (c[2] + c[1] - 1)}, *c)
                   for c in cases if c[3] > 1]
        assert ignored and all("plain 1F1B's" in m for m in ignored)


def test_drop07_references_name_the_usual_mistakes():
    from autograder.references import drop07

    # p = 4, target 10%: (p-1)/(m+p-1) < 0.1 needs m > 27 (m = 27 gives exactly 10%); (p-1)/m needs m > 30
    assert drop07.expected_smallest_m(4, 0.1) == 28
    assert drop07.smallest_m_mistake(28, 4, 0.1) is None
    assert "(p-1)/m" in drop07.smallest_m_mistake(31, 4, 0.1)
    assert "multiple of p" in drop07.smallest_m_mistake(13, 4, 0.12, 2)
    right = {"bubble": 3 / 19, "stage0_in_flight": 5.5}         # p=4, m=8, v=2, by hand
    assert drop07.prediction_mistake(right, "interleaved", 4, 8, 2) is None
    assert "interleaving" in drop07.prediction_mistake({**right, "bubble": 3 / 11}, "interleaved", 4, 8, 2)
    assert "plain 1F1B" in drop07.prediction_mistake({**right, "stage0_in_flight": 4.0},
                                                     "interleaved", 4, 8, 2)
    assert "all m=8 forwards" in drop07.prediction_mistake({"bubble": 3 / 11, "stage0_in_flight": 4.0},
                                                           "gpipe", 4, 8)
    assert "useful time" in drop07.prediction_mistake({"bubble": 3 / 8, "stage0_in_flight": 4.0},
                                                      "1f1b", 4, 8)


def test_drop07_answers_become_plain_values_first():
    from autograder.references import drop07

    class AlwaysEqual(float):
        def __eq__(self, other):
            return True

    with pytest.raises(AssertionError, match="should be a number"):
        drop07.plain_prediction({"bubble": AlwaysEqual(0), "stage0_in_flight": 4})
    with pytest.raises(AssertionError, match="exactly the keys"):
        drop07.plain_prediction([0.27, 4])
    with pytest.raises(AssertionError, match="whole number"):
        drop07.check_smallest_m(lambda p, t, v: AlwaysEqual(28), 4, 0.1)


def test_bubble_bounds_follow_from_the_busy_share():
    # formula 1/4: ideal busy share 3/4; accepted busy shares 0.7 x 3/4 = 0.525 .. 1.03 x 3/4 = 0.7725
    low, high = bubble_bounds(0.25)
    assert low == pytest.approx(1 - 0.7725) and high == pytest.approx(1 - 0.525)
