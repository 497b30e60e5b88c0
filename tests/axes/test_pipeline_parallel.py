"""Pipeline parallelism on real ranks equals one process (STYLE 8), float64.

Global batch 8, seq 8, two SGD steps. For p in {2, 4} and each schedule one
launch runs every m in {1, 2, 4, 8} inside the workers (our executor through
`threeaxes.train.pipeline_train`, then torch.distributed.pipelining where it
accepts that m; each builds its layout, `ParallelDims.init(pp=p)`), so the
parametrized tests below read cached results instead of starting ranks again.
"""
import sys

import cloudpickle
import pytest
import torch

from threeaxes.launch import launch
from threeaxes.pipeline import Action, Plan
from threeaxes.pipeline.reference import torch_pipeline_train
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, parameter_formula, train_steps
from threeaxes.train import pipeline_train

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/

CFG = ToyConfig(dtype=torch.float64, seq_len=8)
BATCH, STEPS, MS = 8, 2, (1, 2, 4, 8)
BATCHES = [make_batch(CFG, BATCH, seed=i) for i in range(STEPS)]
EXACT = dict(rtol=1e-12, atol=1e-12)


def _sweep(rank, world_size, cfg, batches, schedule, ms):
    out = {}
    for m in ms:
        ours = pipeline_train(rank, world_size, cfg, batches, schedule=schedule, m=m)
        # PyTorch's Schedule1F1B refuses m < p
        theirs = (torch_pipeline_train(rank, world_size, cfg, batches, schedule=schedule, m=m)
                  if schedule == "gpipe" or m >= world_size else None)
        out[m] = (ours, theirs)
    return out


@pytest.fixture(scope="module")
def reference():
    model = ToyTransformer(CFG, seed=0)
    losses = train_steps(model, BATCHES)
    params = {n: q.detach().clone() for n, q in model.named_parameters()}
    grads = {n: q.grad.detach().clone() for n, q in model.named_parameters()}
    return losses, params, grads


_runs = {}


def run(p, schedule):
    if (p, schedule) not in _runs:
        _runs[(p, schedule)] = launch(_sweep, p, CFG, BATCHES, schedule, MS, timeout=120)
    return _runs[(p, schedule)]


def _merged(per_rank, key):
    merged = {}
    for rank_result in per_rank:
        assert not set(merged) & set(rank_result[key]), "a parameter lives on two ranks"
        merged.update(rank_result[key])
    return merged


CASES = [(p, schedule, m) for p in (2, 4) for schedule in ("gpipe", "1f1b") for m in MS]


@pytest.mark.slow
@pytest.mark.parametrize("p,schedule,m", CASES)
def test_pp_params_equal_single_process(p, schedule, m, reference):
    ref_losses, ref_params, _ = reference
    ours = [rank_out[m][0] for rank_out in run(p, schedule)]
    params = _merged(ours, "params")
    assert set(params) == set(ref_params)
    for name, value in params.items():
        torch.testing.assert_close(value, ref_params[name], **EXACT, msg=lambda s: f"{name}: {s}")
    assert ours[-1]["losses"] == pytest.approx(ref_losses, rel=1e-12)
    assert all(r["losses"] == [] for r in ours[:-1])


def _steps(trace):
    """A rank's forward and backward Events, one list per training step (the
    optimizer span closes each step)."""
    steps, current = [], []
    for e in trace.compute():
        if e.op == "optimizer":
            steps.append(current)
            current = []
        else:
            current.append(e)
    assert current == [], "every step ends with the optimizer"
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("p,schedule,m", CASES)
def test_pp_events_and_bytes(p, schedule, m):
    ours = [rank_out[m][0] for rank_out in run(p, schedule)]
    at = {}
    for rank, result in enumerate(ours):
        steps = _steps(result["trace"])
        assert len(steps) == STEPS
        for step in steps:
            assert sorted((e.microbatch, e.op) for e in step) == \
                sorted((k, op) for k in range(m) for op in ("forward", "backward"))
            assert all(e.rank == rank and e.stage == rank and e.start <= e.end for e in step)
        at.update({(e.stage, e.microbatch, e.op): e for e in steps[-1]})
    # wall clock: a stage starts a microbatch only after its neighbour finished it
    for (s, k, op), e in at.items():
        if op == "forward" and s > 0:
            assert e.start >= at[(s - 1, k, "forward")].end
        if op == "backward" and s < p - 1:
            assert e.start >= at[(s + 1, k, "backward")].end
    # every step, each boundary carries the whole batch's activation (batch, seq, d_model)
    # forward and its gradient backward, in m pieces: 8 bytes per float64
    per_step = BATCH * CFG.seq_len * CFG.d_model * 8
    for rank, result in enumerate(ours):
        trace = result["trace"]
        directions = (rank < p - 1) + (rank > 0)
        assert trace.total_bytes("send", "pp") == trace.total_bytes("recv", "pp") == STEPS * directions * per_step
        assert trace.count("send", "pp") == trace.count("recv", "pp") == STEPS * directions * m
        # only the neighbours along pp: rank - 1 and rank + 1, in the pp group of every rank
        assert {e.peer for e in trace.comms()} == {q for q in (rank - 1, rank + 1) if 0 <= q < p}
        assert {e.group for e in trace.comms()} == {tuple(range(p))}
        assert trace.count() == trace.count(axis="pp")   # dp = tp = 1: nothing else is sent


@pytest.mark.slow
@pytest.mark.parametrize("p,schedule,m", [c for c in CASES if c[1] == "gpipe" or c[2] >= c[0]])
def test_torch_pipelining_matches_ours_and_single_process(p, schedule, m, reference):
    ref_losses, ref_params, ref_grads = reference
    ours = [rank_out[m][0] for rank_out in run(p, schedule)]
    theirs = [rank_out[m][1] for rank_out in run(p, schedule)]
    assert theirs[-1]["losses"] == pytest.approx(ours[-1]["losses"], rel=1e-12)
    assert theirs[-1]["losses"] == pytest.approx(ref_losses, rel=1e-12)
    params, grads, our_params = _merged(theirs, "params"), _merged(theirs, "grads"), _merged(ours, "params")
    for name in ref_params:
        torch.testing.assert_close(params[name], ref_params[name], **EXACT)
        torch.testing.assert_close(params[name], our_params[name], **EXACT)
        torch.testing.assert_close(grads[name], ref_grads[name], **EXACT)


def _odd_plans(rank, world_size, cfg, batches):
    F, B = (lambda s, k: Action(s, k, "F")), (lambda s, k: Action(s, k, "B"))
    # stage 1 takes microbatches out of order; stage 0 returns gradients newest first
    odd = Plan.from_orders({0: [F(0, k) for k in range(4)] + [B(0, k) for k in (3, 2, 1, 0)],
                            1: [F(1, 1), F(1, 0), B(1, 1), F(1, 3), B(1, 0), F(1, 2), B(1, 3), B(1, 2)]},
                           "odd")
    return {"odd": pipeline_train(rank, world_size, cfg, batches, schedule=odd),
            "interleaved": pipeline_train(rank, world_size, cfg, batches, schedule="interleaved",
                                          m=4, v=2)}


@pytest.mark.slow
def test_any_valid_plan_runs_and_matches(reference):
    _, ref_params, _ = reference
    out = launch(_odd_plans, 2, CFG, BATCHES, timeout=120)
    for name in ("odd", "interleaved"):
        params = _merged([r[name] for r in out], "params")
        assert set(params) == set(ref_params)
        for key, value in params.items():
            torch.testing.assert_close(value, ref_params[key], **EXACT)
    # interleaved: rank 0 holds layers 0 and 2 (stages 0 and 2), rank 1 layers 1 and 3
    assert {k.split(".")[1] for k in out[0]["interleaved"]["params"] if k.startswith("blocks")} == {"0", "2"}


def test_stage_parameter_counts_match_the_formula():
    from threeaxes.pipeline.stages import build_stages
    counts = parameter_formula(CFG)
    per_block = counts["blocks"] // CFG.n_layers
    stages = build_stages(CFG, 2)
    assert sum(q.numel() for q in stages[0].parameters()) == \
        counts["tok_embed"] + counts["pos_embed"] + 2 * per_block
    assert sum(q.numel() for q in stages[1].parameters()) == 2 * per_block + counts["ln_f"] + counts["head"]
