"""The 3D run built from PyTorch's own pieces (threeaxes.train_reference) against
one process and against our train_3d.

float64, two optimizer steps, batch 8, m = 2, the same seed and batches. On
dp x tp x pp = 2 x 2 x 2 (8 ranks), with PyTorch's FSDP-based `replicate` and
with `fully_shard` for dp, every parameter put back together by
`train.full_state` equals single-process training and equals `train_3d` (the three
runs one after another on the same 8 ranks, one launch).
DistributedDataParallel does not compose with pipelining: one 2-rank launch
reproduces the PyTorch error the module records, so this test notices the day
PyTorch fixes it.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch

from threeaxes.launch import RankError, launch
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, train_steps
from threeaxes.train import full_state, train_3d
from threeaxes.train_reference import DDP_PIPELINING_ERROR, torch_train_3d, tp_plan

CFG = ToyConfig(dtype=torch.float64)
BATCH, M, STEPS, LR = 8, 2, 2, 0.1
BATCHES = [make_batch(CFG, BATCH, seed=step) for step in range(STEPS)]
DP, TP, PP = 2, 2, 2


def _launch(fn, world_size, *args, **kwargs):
    # Send test-module workers by value, so the ranks need not import pytest.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return launch(fn, world_size, *args, timeout=120, **kwargs)


def _max_diff(full, reference):
    assert set(full) == set(reference)
    return max((full[k] - reference[k]).abs().max().item() for k in reference)


# -- one process ------------------------------------------------------------------------------

def test_tp_plan_is_megatrons_split():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = tp_plan([2, 3])
    columns = {k for k, v in plan.items() if type(v) is ColwiseParallel}
    rows = {k for k, v in plan.items() if type(v) is RowwiseParallel}
    assert columns == {f"blocks.{i}.{n}" for i in (2, 3) for n in ("attn.q", "attn.k", "attn.v", "mlp.fc1")}
    assert rows == {f"blocks.{i}.{n}" for i in (2, 3) for n in ("attn.proj", "mlp.fc2")}
    # every key names a real module of the full model (StageModule keeps these names)
    names = dict(ToyTransformer(CFG).named_modules())
    assert all(k in names for k in plan)


def test_ddp_is_refused_naming_the_pytorch_error_and_what_composes():
    # refused before any process group is needed, so a plain process can check it
    with pytest.raises(NotImplementedError) as err:
        torch_train_3d(0, 8, CFG, BATCHES, dp=2, tp=2, pp=2, m=M, dp_api="ddp")
    message = str(err.value)
    assert "rebuilt parameter indices size is not same as original model parameters size" in message
    assert "dp_api='replicate' or 'fully_shard'" in message


def test_bad_arguments_say_what_to_change():
    with pytest.raises(ValueError, match=r"schedule='interleaved'; .* \('gpipe', '1f1b'\)"):
        torch_train_3d(0, 8, CFG, BATCHES, dp=2, tp=2, pp=2, m=M, schedule="interleaved")
    with pytest.raises(ValueError, match=r"dp_api='zero'; choose one of"):
        torch_train_3d(0, 8, CFG, BATCHES, dp=2, tp=2, pp=2, m=M, dp_api="zero")
    with pytest.raises(ValueError, match=r"batch of 8 does not split into dp=2 slices of m=3 .* multiple of 6"):
        torch_train_3d(0, 8, CFG, BATCHES, dp=2, tp=2, pp=2, m=3)


# -- real ranks -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    model = ToyTransformer(CFG, seed=0)
    losses = train_steps(model, BATCHES, lr=LR, optimizer="sgd")
    return {name: p.detach() for name, p in model.named_parameters()}, losses


def _three_runs(rank, world_size, cfg, batches, **kwargs):
    """On each rank: our train_3d, then PyTorch's with replicate, then with fully_shard, one
    after another (each ParallelDims.init frees the layout before it): one launch, not three."""
    return {"ours": train_3d(rank, world_size, cfg, batches, **kwargs),
            **{dp_api: torch_train_3d(rank, world_size, cfg, batches, dp_api=dp_api, **kwargs)
               for dp_api in ("replicate", "fully_shard")}}


@pytest.fixture(scope="module")
def three_runs():
    per_rank = _launch(_three_runs, DP * TP * PP, CFG, BATCHES, dp=DP, tp=TP, pp=PP, m=M, lr=LR)
    return {key: [out[key] for out in per_rank] for key in ("ours", "replicate", "fully_shard")}


@pytest.fixture(scope="module")
def ours(three_runs):
    return full_state(three_runs["ours"])


@pytest.fixture(scope="module", params=["replicate", "fully_shard"])
def torch_run(request, three_runs):
    return request.param, three_runs[request.param]


@pytest.mark.slow
def test_pytorch_3d_equals_one_process(torch_run, reference):
    dp_api, results = torch_run
    # full_state also checks that the dp replicas hold exactly the same shards
    assert _max_diff(full_state(results), reference[0]) < 1e-12, dp_api


@pytest.mark.slow
def test_pytorch_3d_equals_our_train_3d(torch_run, ours):
    dp_api, results = torch_run
    assert _max_diff(full_state(results), ours) < 1e-12, dp_api


@pytest.mark.slow
def test_pytorch_3d_last_stage_reports_the_single_process_loss(torch_run, reference):
    _, results = torch_run
    last = [r["losses"] for r in results if r["coords"]["pp"] == PP - 1]
    assert all(len(steps) == STEPS for steps in last)
    assert not any(r["losses"] for r in results if r["coords"]["pp"] != PP - 1)
    # each dp slice's loss is its own mean; the mean over dp is the global loss
    mean = [sum(step) / len(last) for step in zip(*last)]
    assert mean == pytest.approx(reference[1], rel=1e-12)


def _ddp_under_pipelining(rank, world_size, cfg, batches, m, lr):
    """Plain PyTorch: DDP on the dp mesh inside a one-stage GPipe pipeline, which runs
    m forwards before the first backward."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torch.nn.parallel import DistributedDataParallel

    from threeaxes.data_parallel import shard_batch
    from threeaxes.dims import ParallelDims
    from threeaxes.pipeline.stages import build_stage
    from threeaxes.toy import lm_loss

    dims = ParallelDims.init(dp=world_size)
    module = build_stage(cfg, 0, 1)
    ddp = DistributedDataParallel(module, device_mesh=dims.mesh["dp"])
    stage = PipelineStage(ddp, 0, 1, torch.device("cpu"), group=dims.group("pp"))
    pipe = ScheduleGPipe(stage, n_microbatches=m, loss_fn=lm_loss)
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    for inputs, targets in batches:
        inputs, targets = shard_batch(inputs, targets, dims)
        opt.zero_grad()
        pipe.step(inputs, target=targets)
        opt.step()


@pytest.mark.slow
@pytest.mark.skipif(tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13),
                    reason="the error the module quotes is torch 2.13's; 2.10 does not raise it")
def test_ddp_under_pipelining_raises_the_error_the_module_records():
    with pytest.raises(RankError) as err:
        _launch(_ddp_under_pipelining, 2, CFG, BATCHES, M, LR)
    message = str(err.value)
    # every piece of the first line the module quotes (it elides only the file and line)
    for piece in DDP_PIPELINING_ERROR.split(" ... "):
        assert piece in message, piece
