"""PyTorch's pipeline schedules beside the course's engine.

References, none of them the code under test:
* PyTorch's own `ScheduleInterleaved1F1B` and `ScheduleInterleavedZeroBubble`
  (torch/distributed/pipelining/schedules.py): their per-rank order of work
  and the microbatch counts they accept or refuse.
* Narayanan et al. 2021, Section 2.2.2: interleaved bubble (p-1)/(v m + p-1)
  of the step, i.e. overhead (1/v)(p-1)/m.
* Qi et al. 2024 (Zero Bubble Pipeline Parallelism), Section 3.1: ZB-H1 idles
  (p-1)(T_F + T_B - T_W) per rank against 1F1B's (p-1)(T_F + T_B + T_W), with
  T_B the input-gradient and T_W the weight-gradient time, and keeps 1F1B's
  peak of p microbatches in flight.
* A single process training the whole toy (float64), for the runs on ranks.
"""
import sys
from fractions import Fraction

import cloudpickle
import pytest
import torch

from threeaxes.launch import launch
from threeaxes.pipeline import Action, Plan, interleaved_1f1b, peak_in_flight, simulate
from threeaxes.pipeline.executor import run_plan
from threeaxes.pipeline.reference import torch_pipeline_train
from threeaxes.pipeline.schedules import interleaved_group
from threeaxes.pipeline.torch_plans import torch_plan
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, train_steps

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/


def pytorch_accepts(p, m):
    """PyTorch's rule, written from its docstring: rounds = max(1, m // p), m % rounds == 0."""
    rounds = max(1, m // p)
    return m % rounds == 0


RELAXED = [(p, m, v) for p in (2, 3, 4, 8) for v in (2, 3) for m in range(1, 3 * p + 2)
           if pytorch_accepts(p, m)]


# -- the rule on m -----------------------------------------------------------------

def test_the_multiple_of_p_rule_is_megatrons_and_pytorch_relaxes_it():
    with pytest.raises(ValueError, match="Megatron's interleaved schedule"):
        interleaved_1f1b(8, 13, 2)
    # the drop-12 case: 13 micro-batches on 8 stages, one round of 13 in PyTorch
    assert pytorch_accepts(8, 13) and interleaved_group(8, 13, relaxed=True) == 13
    torch_plan("interleaved", 8, 13, 2)                      # PyTorch builds it
    # 26 on 8: three rounds, and 26 is not a multiple of 3: both refuse
    assert not pytorch_accepts(8, 26)
    with pytest.raises(ValueError, match="multiple of the number of rounds"):
        torch_plan("interleaved", 8, 26, 2)
    with pytest.raises(ValueError, match=r"3 rounds.*nearest m it accepts are 24 and 27"):
        interleaved_1f1b(8, 26, 2, relaxed=True)
    assert interleaved_group(4, 8) == 4 and interleaved_group(4, 10, relaxed=True) == 5


@pytest.mark.parametrize("p, m, v", RELAXED)
def test_relaxed_interleaved_runs_pytorchs_order(p, m, v):
    theirs, ours = torch_plan("interleaved", p, m, v), interleaved_1f1b(p, m, v, relaxed=True)
    for r in range(p):
        assert ours.actions(r) == theirs.actions(r), (p, m, v, r)
        assert {a.stage for a in ours.actions(r)} == {r + c * p for c in range(v)}


@pytest.mark.parametrize("p, m, v", RELAXED)
def test_relaxed_interleaved_bubble_is_narayanans_when_m_is_at_least_p(p, m, v):
    idle = simulate(interleaved_1f1b(p, m, v, relaxed=True), Fraction(1, v), Fraction(2, v)).idle_fraction
    formula = Fraction(p - 1, v * m + p - 1)
    if m >= p:
        assert idle == formula
    else:                          # fewer microbatches than stages: the fill cannot overlap
        assert idle > formula


# -- zero bubble -------------------------------------------------------------------

@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("costs", [(1, 1, 1), (2, 2, 1), (2, 1, 1), (1, 1, Fraction(1, 2))])
def test_pytorchs_zero_bubble_plan_idles_qi_et_al_zb_h1(p, costs):
    t_f, t_b, t_w = costs          # forward, input gradient, weight gradient
    for m in range(p, 3 * p + 1):
        if not pytorch_accepts(p, m):
            continue
        plan = torch_plan("zero_bubble", p, m, 1)
        idle = simulate(plan, t_f, t_b + t_w, t_w).idle_fraction
        zb_idle = (p - 1) * (t_f + t_b - t_w)
        assert idle == Fraction(zb_idle) / (m * (t_f + t_b + t_w) + zb_idle), (p, m, costs)
        one_f_one_b_idle = (p - 1) * (t_f + t_b + t_w)
        assert idle < Fraction(one_f_one_b_idle) / (m * (t_f + t_b + t_w) + one_f_one_b_idle)
        assert peak_in_flight(plan, 0) == p                     # 1F1B's peak, not more


def test_split_backward_plans_are_checked():
    F = lambda s, k: Action(s, k, "F")        # noqa: E731
    I = lambda s, k: Action(s, k, "I")        # noqa: E731
    W = lambda s, k: Action(s, k, "W")        # noqa: E731
    B = lambda s, k: Action(s, k, "B")        # noqa: E731
    # two stages, one microbatch, by hand: rank 1's I unblocks rank 0's I; W waits for nothing else
    plan = Plan.from_orders({0: [F(0, 0), I(0, 0), W(0, 0)], 1: [F(1, 0), I(1, 0), W(1, 0)]})
    assert plan[0] == [F(0, 0), None, None, I(0, 0), W(0, 0)]
    assert plan[1] == [None, F(1, 0), I(1, 0), W(1, 0), None]
    with pytest.raises(ValueError, match="0W0 is missing"):
        Plan({0: [F(0, 0), I(0, 0)]})
    with pytest.raises(ValueError, match="keep either B or I and W"):
        Plan({0: [F(0, 0), B(0, 0), I(0, 0), W(0, 0)]})
    with pytest.raises(ValueError, match="0W0 in slot 1 runs before 0I0"):
        Plan({0: [F(0, 0), W(0, 0), I(0, 0)]})
    with pytest.raises(ValueError, match="zero-bubble plan"):
        run_plan(plan, {}, torch.zeros(1, 1), torch.zeros(1, 1))


# -- on real ranks ---------------------------------------------------------------------

CFG = ToyConfig(n_layers=8, dtype=torch.float64, seq_len=8)
RUNS = [("interleaved", 6, 2), ("zero_bubble", 6, 1), ("zero_bubble", 6, 2)]   # m % p != 0


def _all_runs(rank, world_size, cfg, batches):
    return {key: torch_pipeline_train(rank, world_size, cfg, batches, schedule=key[0], m=key[1],
                                      v=key[2], lr=0.1)
            for key in RUNS}


def test_pytorchs_relaxed_and_zero_bubble_schedules_train_like_one_process():
    batches = [make_batch(CFG, 6, seed=i) for i in range(2)]
    model = ToyTransformer(CFG, seed=0)
    train_steps(model, batches, lr=0.1)
    want = dict(model.named_parameters())
    results = launch(_all_runs, 4, CFG, batches, timeout=120)
    for key in RUNS:
        got = {n: q for r in results for n, q in r[key]["params"].items()}
        assert sorted(got) == sorted(want), key
        for n, q in got.items():
            torch.testing.assert_close(q, want[n].detach(), rtol=1e-12, atol=1e-12, msg=str(key))
        # the plan that ran is the one PyTorch builds for that (p, m, v)
        ran, built = results[0][key]["plan"], torch_plan(key[0], 4, key[1], key[2])
        assert all(ran.actions(r) == built.actions(r) for r in range(4)), key
