"""The overlapped DataParallel wrapper on real gloo ranks, proved against one process and
DDP: one launch per world size trains with the wrapper (one all-reduce per parameter, and
bucketed) and with PyTorch's DistributedDataParallel, and every test of that world size
reads from the same run; the naive and overlapped steps timed side by side. Its bookkeeping
in one process is tests/axes/test_data_parallel_wrapper.py.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch
from data_parallel_overlap_helpers import BUCKET_BYTES, CFG, EXPECTED_BUCKETS, GLOBAL_BATCH, LR, STEPS, WithExtras

from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyTransformer, lm_loss, make_batch, train_steps


def _batches():
    return [make_batch(CFG, GLOBAL_BATCH, seed=20 + step) for step in range(STEPS)]


def _sgd_steps(model, loss_of, batches, dims, finish=None):
    """STEPS SGD steps on this rank's slice; returns the first step's gradients."""
    from threeaxes.data_parallel import shard_batch

    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    first = None
    for global_inputs, global_targets in batches:
        inputs, targets = shard_batch(global_inputs, global_targets, dims)
        opt.zero_grad()
        loss_of(inputs, targets).backward()
        if finish:
            finish()
        if first is None:
            first = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    return first


def _run_everything(rank, world_size, cfg, batches, bucket_bytes):
    """One rank: the wrapper (per parameter, bucketed) and DDP, each from rank-dependent
    initial weights; a traced step; the frozen/unused model against DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from threeaxes import comms, trace
    from threeaxes.data_parallel import DataParallel, shard_batch
    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp=world_size)
    out = {}
    for label, size in (("per_param", None), ("bucketed", bucket_bytes)):
        # each rank starts from its own seed: the wrapper must broadcast rank 0's weights
        model = DataParallel(ToyTransformer(cfg, seed=rank), size, dims=dims)
        grads = _sgd_steps(model.module, lambda x, y: lm_loss(model(x), y), batches, dims,
                           model.finish_gradient_synchronization)
        out[label] = {"grads": grads, "state": {k: v.clone() for k, v in model.module.state_dict().items()},
                      "buckets": model.bucket_names, "bucket_bytes": model.bucket_sizes_bytes}

    def divide_then_sum(grads, dims):  # what DDP's default comm hook does
        flat = torch.cat([g.reshape(-1) for g in grads]) / dims.size("dp")
        return flat, comms.all_reduce(flat, "dp", dims=dims, async_op=True)

    model = DataParallel(ToyTransformer(cfg, seed=rank), bucket_bytes, dims=dims, launch_bucket=divide_then_sum)
    grads = _sgd_steps(model.module, lambda x, y: lm_loss(model(x), y), batches, dims,
                       model.finish_gradient_synchronization)
    out["launch_bucket"] = {"grads": grads, "state": {k: v.clone() for k, v in model.module.state_dict().items()}}

    model = ToyTransformer(cfg, seed=rank)
    ddp = DDP(model, process_group=dims.group("dp"))  # DDP broadcasts rank 0's weights too
    out["ddp"] = {"grads": _sgd_steps(model, lambda x, y: lm_loss(ddp(x), y), batches, dims),
                  "state": {k: v.clone() for k, v in model.state_dict().items()}}

    # one traced step of the bucketed wrapper: per-layer compute spans and the all-reduces
    model = DataParallel(ToyTransformer(cfg, seed=0), bucket_bytes, dims=dims)
    inputs, targets = shard_batch(*batches[0], dims)
    with trace.record() as recorded, trace.module_spans(model.module):
        lm_loss(model(inputs), targets).backward()
        model.finish_gradient_synchronization()
    out["trace"] = recorded

    # frozen pos_embed, an extra layer used only by dp rank 0: ours against DDP
    for label in ("extras_ours", "extras_ddp"):
        model = WithExtras(cfg, seed=rank, used_on=(0,))
        model.use_extra = dims.coord("dp") in model.used_on
        if label == "extras_ours":
            wrapped = DataParallel(model, bucket_bytes, dims=dims)
            grads = _sgd_steps(model, lambda x, y: lm_loss(wrapped(x), y), batches, dims,
                               wrapped.finish_gradient_synchronization)
        else:
            wrapped = DDP(model, process_group=dims.group("dp"), find_unused_parameters=True)
            grads = _sgd_steps(model, lambda x, y: lm_loss(wrapped(x), y), batches, dims)
        out[label] = {"grads": grads, "state": {k: v.clone() for k, v in model.state_dict().items()}}
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"dp{n}")
def run(request):
    from threeaxes.launch import launch

    world_size = request.param
    batches = _batches()
    # Send the worker by value, so the ranks need not import this test module (and pytest).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    results = launch(_run_everything, world_size, CFG, batches, BUCKET_BYTES, timeout=120)
    reference = ToyTransformer(CFG, seed=0)
    train_steps(reference, batches, lr=LR, optimizer="sgd")
    return world_size, results, reference.state_dict(), _extras_in_one_process(world_size, batches)


def _extras_in_one_process(world_size, batches):
    """WithExtras trained in one process: the loss is the mean of the dp slices'
    losses, with the extra layer in slice 0's loss only. First-step grads, final state."""
    from threeaxes.data_parallel import shard_batch

    model = WithExtras(CFG, seed=0, used_on=(0,))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    first = None
    for batch in batches:
        opt.zero_grad()
        for k in range(world_size):
            model.use_extra = k in model.used_on
            inputs, targets = shard_batch(*batch, ParallelDims(dp=world_size).at(k))
            (lm_loss(model(inputs), targets) / world_size).backward()
        if first is None:
            first = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    return {"grads": first, "state": model.state_dict()}


def _assert_all_close(got, want, what):
    assert got.keys() == want.keys()
    for name in want:
        if want[name] is None:
            assert got[name] is None, f"{what}, {name}: DDP left no gradient, we did"
            continue
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12,
                                   msg=lambda m: f"{what}, {name}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["per_param", "bucketed", "launch_bucket"])
def test_every_parameter_equals_one_process_and_ddp(run, variant):
    world_size, results, reference, _ = run
    for rank, result in enumerate(results):
        _assert_all_close(result[variant]["state"], reference, f"rank {rank} {variant} vs one process")
        _assert_all_close(result[variant]["state"], result["ddp"]["state"], f"rank {rank} {variant} vs DDP")
        _assert_all_close(result[variant]["grads"], result["ddp"]["grads"], f"rank {rank} {variant} grads vs DDP")
    # training moved the weights, so the comparison is not vacuous
    start = ToyTransformer(CFG, seed=0).state_dict()
    assert max((reference[k] - start[k]).abs().max() for k in start) > 1e-3


@pytest.mark.slow
def test_frozen_and_rank_dependent_unused_parameters_match_ddp(run):
    world_size, results, _, single = run
    for rank, result in enumerate(results):
        ours, ddp = result["extras_ours"], result["extras_ddp"]
        _assert_all_close(ours["grads"], single["grads"], f"rank {rank} first-step grads vs one process")
        _assert_all_close(ours["state"], single["state"], f"rank {rank} weights vs one process")
        assert ours["grads"]["toy.pos_embed.weight"] is None  # frozen: never reduced
        # used by rank 0 only: every rank holds rank 0's gradient / dp, as DDP computes it
        assert ours["grads"]["extra.weight"].abs().max() > 0
        _assert_all_close(ours["grads"], ddp["grads"], f"rank {rank} first-step grads vs DDP")
        _assert_all_close(ours["state"], ddp["state"], f"rank {rank} weights vs DDP")
        _assert_all_close(ours["state"], results[0]["extras_ours"]["state"], f"rank {rank} vs rank 0")


@pytest.mark.slow
def test_the_trace_shows_all_reduces_overlapping_backward_in_bucket_order(run):
    world_size, results, _, _ = run
    for rank, result in enumerate(results):
        t = result["trace"]
        reduces = sorted(t.comms("all_reduce", axis="dp"), key=lambda e: e.start)
        # one all-reduce per bucket, started in bucket order: head's bucket first
        assert [e.bytes for e in reduces] == [8 * sum(b) for b in EXPECTED_BUCKETS]
        assert result["bucketed"]["buckets"][0][0] == "head.weight"
        backward = t.compute("backward", rank=rank)
        assert {e.module for e in backward} == {"tok_embed", "pos_embed", "blocks.0", "ln_f", "head"}
        last_backward_end = max(e.end for e in backward)
        # overlap: the first bucket went out while backward was still computing
        assert reduces[0].start < last_backward_end
        assert {e.group for e in reduces} == {tuple(range(world_size))}


@pytest.mark.slow
def test_naive_and_overlapped_steps_both_equal_one_process():
    from threeaxes.data_parallel.compare import VARIANTS, naive_vs_overlapped, step_seconds
    from threeaxes.launch import launch

    batch = make_batch(CFG, GLOBAL_BATCH, seed=3)
    results = launch(naive_vs_overlapped, 2, CFG, batch, BUCKET_BYTES, steps=2, warmup=1, timeout=120)
    reference = ToyTransformer(CFG, seed=0)
    train_steps(reference, [batch] * (1 + 2 + 1), lr=0.1)  # warm-up, timed, traced
    for variant in VARIANTS:
        for rank, result in enumerate(results):
            _assert_all_close(result[variant]["state"], reference.state_dict(), f"rank {rank} {variant}")
            assert len(result[variant]["seconds"]) == 2
            t = result[variant]["trace"]
            # the traced step: one all-reduce per bucket, every layer's forward and backward, one optimizer step
            assert [e.bytes for e in t.comms("all_reduce", "dp")] == [8 * sum(b) for b in EXPECTED_BUCKETS]
            assert len(t.compute("forward")) == len(t.compute("backward")) == 5
            assert len(t.compute("optimizer")) == 1
        # the slowest rank's time per step, then the median over steps
        per_step = [max(r[variant]["seconds"][i] for r in results) for i in range(2)]
        assert step_seconds(results, variant) == pytest.approx(sum(per_step) / 2)
    naive_ends = [max(e.end for e in results[r]["naive"]["trace"].compute("backward")) for r in range(2)]
    for r in range(2):
        # naive: every all-reduce starts after backward has ended
        assert min(e.start for e in results[r]["naive"]["trace"].comms()) >= naive_ends[r]
