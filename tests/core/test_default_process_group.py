"""With no layout given and none made, the data-parallel helpers and the sharding classes
run over the default process group as one dp axis, as PyTorch's DDP,
ZeroRedundancyOptimizer and FSDP2 do; PyTorch's group arguments are taken.

One launch of 2 gloo ranks, float64, no `ParallelDims.init` until the end:

* `shard_batch` gives rank r the r-th half of the batch; `average_gradients`,
  `average_gradients_bucketed` and `DataParallel` (given nothing, the default group
  as `process_group=`, a one-axis `device_mesh=`, DDP's `bucket_cap_mb=`) leave on
  every rank the gradient one process gets from the whole batch, and DDP's (given no
  group either), to 1e-12; the collectives ran on the dp axis over both ranks;
* `ZeroOptimizer(process_group=)` and `fully_shard(mesh=)` shard over the group given;
* once a layout is made, `process_group=` takes its dp group (the layout itself) and
  refuses a group that is neither that nor every rank, saying what to pass.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch

from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

CFG = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, dtype=torch.float64)
BATCH, BUCKET_BYTES, WORLD = 8, 2048, 2   # 256 float64 numbers per bucket
# numbers per bucket of 2048 bytes, derived by hand in test_data_parallel.py
EXPECTED_BUCKETS = [[128, 8, 8, 8], [256], [32], [256],
                    [8, 8, 8, 64, 8, 64, 8, 64, 8], [64, 8, 8, 64], [128]]


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _backward(model, inputs, targets):
    lm_loss(model(inputs), targets).backward()


def _no_layout(rank, world_size, cfg, batch, bucket_bytes):
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    from threeaxes import dims as dims_module
    from threeaxes import sharding, trace
    from threeaxes.data_parallel import DataParallel, average_gradients, average_gradients_bucketed, shard_batch
    from threeaxes.dims import ParallelDims

    assert not dims_module._current, "this rank should start with no layout"
    inputs, targets = shard_batch(*batch)
    out = {"inputs": inputs}
    with trace.record() as recorded:
        model = ToyTransformer(cfg, seed=0)
        _backward(model, inputs, targets)
        average_gradients(model)
    out["per_param"] = _grads(model)
    out["comms"] = {(e.op, e.axis, e.group) for e in recorded.comms()}
    model = ToyTransformer(cfg, seed=0)
    _backward(model, inputs, targets)
    average_gradients_bucketed(model, bucket_bytes)
    out["bucketed"] = _grads(model)

    world_mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu", mesh_dim_names=("dp",))
    for label, kwargs in {"wrapper": {}, "process_group": {"process_group": dist.group.WORLD},
                          "device_mesh": {"device_mesh": world_mesh},
                          "bucket_cap_mb": {"bucket_cap_mb": bucket_bytes / 2**20}}.items():
        model = ToyTransformer(cfg, seed=rank)   # rank 0's weights reach every rank, as in DDP
        wrapped = DataParallel(model, **kwargs)
        _backward(wrapped, inputs, targets)
        wrapped.finish_gradient_synchronization()
        out[label] = _grads(model)
        out[f"{label}_buckets"] = wrapped.bucket_sizes_bytes
    model = ToyTransformer(cfg, seed=rank)
    _backward(DDP(model), inputs, targets)   # no process_group: the default one
    out["ddp"] = _grads(model)

    zero = sharding.ZeroOptimizer(ToyTransformer(cfg).parameters(), torch.optim.SGD,
                                  process_group=dist.group.WORLD, lr=0.1)
    unit = sharding.fully_shard(ToyTransformer(cfg), mesh=world_mesh)._sharding_unit
    out["sharded_over"] = [(x.dims.dp, x.dims.group("dp") is dist.group.WORLD) for x in (zero, unit)]

    dims = ParallelDims.init(dp=world_size)
    out["layout_taken"] = DataParallel(ToyTransformer(cfg), process_group=dims.group("dp")).dims is dims
    try:
        sharding.ZeroOptimizer(ToyTransformer(cfg).parameters(), torch.optim.SGD,
                               process_group=dims.group("tp"), lr=0.1)
    except ValueError as exc:
        out["refused"] = str(exc)
    return out


@pytest.fixture(scope="module")
def run():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    batch = make_batch(CFG, BATCH, seed=5)
    results = launch(_no_layout, WORLD, CFG, batch, BUCKET_BYTES, timeout=120)
    reference = ToyTransformer(CFG, seed=0)
    _backward(reference, *batch)
    return batch, results, _grads(reference)


@pytest.mark.slow
def test_with_no_layout_the_helpers_average_over_every_rank_as_ddp_and_one_process(run):
    batch, results, reference = run
    for rank, out in enumerate(results):
        # by hand: 8 examples over 2 ranks, rank r holds examples 4r .. 4r + 3
        assert torch.equal(out["inputs"], batch[0][4 * rank:4 * rank + 4])
        for label in ("per_param", "bucketed", "wrapper", "process_group", "device_mesh",
                      "bucket_cap_mb", "ddp"):
            assert out[label].keys() == reference.keys()
            for name, grad in reference.items():
                torch.testing.assert_close(out[label][name], grad, rtol=1e-12, atol=1e-12,
                                           msg=lambda m: f"rank {rank}, {label}, {name}: {m}")
        # every all-reduce ran on the dp axis over both ranks
        assert out["comms"] == {("all_reduce", "dp", (0, 1))}
        # DDP's bucket_cap_mb (MiB) = 2048 / 2**20 is bucket_bytes=2048: the bucket plan
        # derived by hand in test_data_parallel.py; with neither, one bucket per tensor (21)
        assert out["bucket_cap_mb_buckets"] == [8 * sum(b) for b in EXPECTED_BUCKETS]
        assert len(out["wrapper_buckets"]) == 21


@pytest.mark.slow
def test_pytorch_group_arguments_pick_the_group_or_say_what_to_pass(run):
    _, results, _ = run
    for rank, out in enumerate(results):
        assert out["sharded_over"] == [(2, True), (2, True)]
        assert out["layout_taken"] is True
        assert out["refused"] == (
            f"process_group holds ranks [{rank}]: neither every rank nor the current layout's dp "
            f"group. The course names groups by axis: make a layout on every rank, dims = "
            f"ParallelDims.init(dp=..., tp=..., pp=...), and pass dims= (its dp group is "
            f"dims.group('dp'))")
