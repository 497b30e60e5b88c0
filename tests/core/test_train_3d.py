"""The 3D trainer against one process, on every layout the issue names.

float64, two optimizer steps, the same seed and batches: after training,
every parameter on every rank (put back together from its tp shards and pp
stages) equals single-process training on the same global batches, and the
collectives each rank made per step match counts derived by hand below.
"""
import math
import sys

import cloudpickle
import pytest
import torch

from threeaxes.launch import RankError, launch
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, train_steps
from threeaxes.train import full_state, train_3d

CFG = ToyConfig(dtype=torch.float64)
BATCH, M, STEPS, LR = 8, 2, 2, 0.1
BATCHES = [make_batch(CFG, BATCH, seed=step) for step in range(STEPS)]
LAYOUTS = [(2, 2, 2), (1, 2, 2), (2, 1, 2), (2, 2, 1), (4, 1, 2)]
pytestmark = pytest.mark.slow


def single_process(optimizer="sgd"):
    model = ToyTransformer(CFG, seed=0)
    losses = train_steps(model, BATCHES, lr=LR, optimizer=optimizer)
    return {name: p.detach() for name, p in model.named_parameters()}, losses


@pytest.fixture(scope="module")
def reference():
    # a fixture, not module-level code: every pytest worker imports this module to collect it,
    # only the one that runs it trains
    return single_process()


# Every run by world size: one launch per world size trains them one after another on the same
# ranks (each ParallelDims.init frees the layout before it), not one launch per run.
JOBS = {**{layout: (layout, {}) for layout in LAYOUTS},
        "interleaved-adam": ((1, 2, 2), {"schedule": "interleaved", "v": 2, "optimizer": "adam"})}
_LAUNCHED = {}   # world size -> {job: every rank's result}


def _each_job(rank, world_size, cfg, batches, jobs):
    return {key: train_3d(rank, world_size, cfg, batches, dp=dp, tp=tp, pp=pp, **{"m": M, "lr": LR, **kwargs})
            for key, ((dp, tp, pp), kwargs) in jobs.items()}


def run(key):
    (dp, tp, pp), _ = JOBS[key]
    n = dp * tp * pp
    if n not in _LAUNCHED:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the ranks need not import tests/
        jobs = {k: job for k, job in JOBS.items() if math.prod(job[0]) == n}
        per_rank = launch(_each_job, n, CFG, BATCHES, jobs, timeout=120)
        _LAUNCHED[n] = {k: [out[k] for out in per_rank] for k in jobs}
    return _LAUNCHED[n][key]


def max_diff(full, reference):
    assert set(full) == set(reference)
    return max((full[k] - reference[k]).abs().max().item() for k in reference)


@pytest.fixture(scope="module", params=LAYOUTS, ids=lambda layout: "dp{}-tp{}-pp{}".format(*layout))
def layout_run(request):
    return request.param, run(request.param)


def test_every_parameter_equals_one_process(layout_run, reference):
    _, results = layout_run
    # full_state also checks that every dp replica holds exactly the same shards
    assert max_diff(full_state(results), reference[0]) < 1e-12


def test_the_last_stage_reports_the_single_process_loss(layout_run, reference):
    (dp, tp, pp), results = layout_run
    for r in results:
        if r["coords"]["pp"] == pp - 1:
            # each dp replica's loss is its slice's mean; their mean is the global loss
            assert len(r["losses"]) == STEPS
    last = [r["losses"] for r in results if r["coords"]["pp"] == pp - 1]
    mean = [sum(step) / len(last) for step in zip(*last)]
    assert mean == pytest.approx(reference[1], rel=1e-12)


def test_each_rank_makes_the_collectives_the_layout_implies(layout_run):
    (dp, tp, pp), results = layout_run
    layers_per_stage = CFG.n_layers // pp
    for r in results:
        trace, stage = r["trace"], r["coords"]["pp"]
        # tp: per block, 2 all-reduces forward (after attention, after the MLP) and 2 backward
        assert trace.count("all_reduce", "tp") == (4 * layers_per_stage * M * STEPS if tp > 1 else 0)
        # dp: one all-reduce per parameter tensor this rank holds, per step
        n_tensors = len(r["params"])
        assert trace.count("all_reduce", "dp") == (n_tensors * STEPS if dp > 1 else 0)
        # pp: each microbatch's activation goes forward and its gradient back across each boundary
        boundaries = (stage > 0) + (stage < pp - 1)
        assert trace.count("send", "pp") == boundaries * M * STEPS
        assert trace.count("recv", "pp") == boundaries * M * STEPS
        # every event ran on a group that holds this rank, of the axis's size
        for e in trace.comms():
            assert r["coords"] and len(e.group) == {"dp": dp, "tp": tp, "pp": pp}[e.axis]


def test_interleaved_schedule_and_adam_on_tp_pp():
    reference, _ = single_process("adam")
    results = run("interleaved-adam")
    # Adam divides by sqrt(v): k's bias has an exactly-zero gradient in exact arithmetic
    # (softmax ignores a shift shared by every key), so its step is roundoff over roundoff,
    # a few 1e-12 of the lr=0.1 step; every other tensor agrees to 1e-15.
    assert max_diff(full_state(results), reference) < 1e-10


def test_a_layout_that_does_not_fill_the_world_says_what_to_change():
    with pytest.raises(RankError, match=r"dp\(2\) \* tp\(2\) \* pp\(2\) = 8 != world_size\(4\)"):
        launch(train_3d, 4, CFG, BATCHES, dp=2, tp=2, pp=2, timeout=60)


def test_tp_that_does_not_divide_the_heads_says_which_would():
    with pytest.raises(RankError, match=r"tp=3 does not divide n_heads=4; choose tp in \{1, 2, 4\}"):
        launch(train_3d, 3, CFG, BATCHES, tp=3, timeout=60)


def test_more_stages_than_layers_says_what_to_change():
    with pytest.raises(RankError, match=r"pp=2 x v=4 = 8 stages > n_layers=4"):
        launch(train_3d, 2, CFG, BATCHES, pp=2, schedule="interleaved", m=2, v=4, timeout=60)
