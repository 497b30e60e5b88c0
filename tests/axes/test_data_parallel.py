"""Data parallelism (threeaxes.data_parallel), proved against one process and DDP.

Fast tests check the batch split, the bucket plan and the error messages in
one process. The numerics run on real gloo ranks: one launch per world size
trains with both of our variants and with PyTorch's DistributedDataParallel,
and every test of that world size reads from the same run.
"""
from __future__ import annotations

import math
import sys

import cloudpickle
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from threeaxes import dims as dims_module
from threeaxes.data_parallel import (
    average_gradients,
    average_gradients_bucketed,
    gradient_buckets,
    plan_buckets,
    shard_batch,
    train_data_parallel,
)
from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch, make_optimizer, train_steps

# One block, width 8: 21 parameter tensors, 1,208 float64 numbers. Small enough
# that a 4-rank run takes well under a second of compute.
CFG = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, dtype=torch.float64)
GLOBAL_BATCH, STEPS, LR = 8, 3, 0.1
# 256 float64 numbers per bucket
BUCKET_BYTES = 2048

# The parameter sizes (numbers, not bytes) of CFG in the reverse of registration
# order, which is the order the bucketed variant walks, worked out by hand:
#   head 16*8, ln_f bias 8, ln_f weight 8, fc2 bias 8, fc2 weight 8*32, fc1 bias 32,
#   fc1 weight 32*8, ln2 bias/weight 8 + 8, then proj, v, k, q (bias 8, weight 8*8
#   each), ln1 bias/weight 8 + 8, pos_embed 8*8, tok_embed 16*8.
REVERSED_NUMELS = [128, 8, 8, 8, 256, 32, 256, 8, 8,
                   8, 64, 8, 64, 8, 64, 8, 64, 8, 8, 64, 128]
# Filling buckets of 256 numbers in that order, closing one before it would overflow:
#   [128 8 8 8] = 152 (+256 overflows) | [256] (+32 overflows) | [32] (+256 overflows)
#   | [256] (+8 overflows) | [8 8 8 64 8 64 8 64 8] = 240 (+64 overflows)
#   | [64 8 8 64] = 144 (+128 overflows) | [128]
EXPECTED_BUCKETS = [[128, 8, 8, 8], [256], [32], [256],
                    [8, 8, 8, 64, 8, 64, 8, 64, 8], [64, 8, 8, 64], [128]]
N_TENSORS = 21
PARAM_BYTES = 1208 * 8


def _batches():
    return [make_batch(CFG, GLOBAL_BATCH, seed=10 + step) for step in range(STEPS)]


# -- one process ------------------------------------------------------------------------

def test_hand_counts_match_the_model():
    model = ToyTransformer(CFG)
    numels = [p.numel() for p in model.parameters()][::-1]
    assert numels == REVERSED_NUMELS
    assert sum(numels) * 8 == PARAM_BYTES and len(numels) == N_TENSORS


def test_shard_batch_gives_each_rank_a_contiguous_equal_slice():
    inputs, targets = make_batch(CFG, 8, seed=1)
    shards = [shard_batch(inputs, targets, ParallelDims(dp=4).at(rank)) for rank in range(4)]
    assert all(x.shape == (2, CFG.seq_len) for x, _ in shards)
    torch.testing.assert_close(torch.cat([x for x, _ in shards]), inputs)
    torch.testing.assert_close(torch.cat([y for _, y in shards]), targets)
    torch.testing.assert_close(shards[2][0], inputs[4:6])


def test_equal_shards_average_to_the_global_gradient():
    """The identity data parallelism rests on, in one process: the mean of the
    per-shard gradients is the gradient of the whole batch."""
    inputs, targets = make_batch(CFG, GLOBAL_BATCH, seed=3)
    whole = ToyTransformer(CFG)
    lm_loss(whole(inputs), targets).backward()
    summed = [torch.zeros_like(p) for p in whole.parameters()]
    for rank in range(4):
        part = ToyTransformer(CFG)
        local_inputs, local_targets = shard_batch(inputs, targets, ParallelDims(dp=4).at(rank))
        lm_loss(part(local_inputs), local_targets).backward()
        for total, p in zip(summed, part.parameters()):
            total += p.grad
    for total, p in zip(summed, whole.parameters()):
        torch.testing.assert_close(total / 4, p.grad)


def test_batch_that_does_not_split_says_what_to_use():
    inputs, targets = make_batch(CFG, 6)
    with pytest.raises(ValueError, match=r"^global batch 6 does not split over dp=4; use a multiple of 4$"):
        shard_batch(inputs, targets, ParallelDims(dp=4).at(0))


def test_ranks_that_differ_only_in_tp_or_pp_get_the_same_slice():
    inputs, targets = make_batch(CFG, 8, seed=1)
    dims = ParallelDims(dp=2, tp=2, pp=2)
    for rank in range(8):
        # by hand: rank = pp * 4 + dp * 2 + tp, so the dp coordinate is (rank // 2) % 2
        dp_rank = (rank // 2) % 2
        x, y = shard_batch(inputs, targets, dims.at(rank))
        torch.testing.assert_close(x, inputs[4 * dp_rank:4 * dp_rank + 4], rtol=0, atol=0)
        torch.testing.assert_close(y, targets[4 * dp_rank:4 * dp_rank + 4], rtol=0, atol=0)


def test_a_rank_or_dp_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match=r"^rank=4 is outside 0\.\.3$"):
        ParallelDims(dp=4).at(4)
    with pytest.raises(ValueError, match=r"^dp=0; every axis size must be a positive integer$"):
        ParallelDims(dp=0)


def test_without_a_layout_or_ranks_the_error_says_how_to_start_them(monkeypatch):
    # with ranks and no layout the helpers use the default process group (test_data_parallel_world)
    monkeypatch.setattr(dims_module, "_current", [])
    inputs, targets = make_batch(CFG, 8)
    for call in (lambda: shard_batch(inputs, targets), lambda: average_gradients(ToyTransformer(CFG))):
        with pytest.raises(RuntimeError, match=r"^no parallel layout and torch\.distributed is not "
                                               r"running; run this inside a launched function "
                                               r"\(threeaxes\.launch\.launch\(fn, n\)\)"):
            call()


@pytest.mark.parametrize("bucket_bytes", [0, -1, 1.5])
def test_bucket_size_must_be_positive_bytes(bucket_bytes):
    with pytest.raises(ValueError, match=r"bucket_bytes=.*positive whole number of bytes"):
        plan_buckets([8, 8], bucket_bytes)
    with pytest.raises(ValueError, match=r"bucket_bytes=.*positive whole number of bytes"):
        average_gradients_bucketed(ToyTransformer(CFG), bucket_bytes)


def test_unknown_variant_lists_the_choices():
    with pytest.raises(ValueError, match=r"variant='overlapped'; choose 'per_param' or 'bucketed'"):
        train_data_parallel(0, 1, CFG, _batches(), variant="overlapped")


def test_averaging_outside_ranks_says_how_to_start_them():
    # a layout made by arithmetic alone has no process groups to all-reduce on
    with pytest.raises(ValueError, match=r"no process groups.*ParallelDims\.init\(dp=2, tp=1, pp=1\) "
                                         r"inside the launched function"):
        average_gradients(ToyTransformer(CFG), ParallelDims(dp=2).at(0))
    # with one replica there is nothing to average, and nothing is sent
    model = ToyTransformer(CFG)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    average_gradients(model, ParallelDims().at(0))
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in model.parameters())


def test_bucket_plan_of_the_toy_model_is_the_hand_derived_one():
    model = ToyTransformer(CFG)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    buckets = gradient_buckets(model, BUCKET_BYTES)
    assert [[g.numel() for g in bucket] for bucket in buckets] == EXPECTED_BUCKETS
    # the extremes: one bucket for everything, one bucket per tensor
    assert len(gradient_buckets(model, PARAM_BYTES)) == 1
    assert len(gradient_buckets(model, 1)) == N_TENSORS


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), max_size=12), cap=st.integers(1, 80))
def test_bucket_plan_rules(sizes, cap):
    plan = plan_buckets(sizes, cap)
    assert [i for bucket in plan for i in bucket] == list(range(len(sizes)))  # order kept, none lost
    for bucket in plan:
        # a bucket is over the cap only when it is one tensor that is itself too big
        assert sum(sizes[i] for i in bucket) <= cap or len(bucket) == 1
    for bucket, following in zip(plan, plan[1:]):
        # a bucket is closed only when the next tensor would not have fitted
        assert sum(sizes[i] for i in bucket) + sizes[following[0]] > cap


# -- real ranks -------------------------------------------------------------------------

def _run_everything(rank, world_size, cfg, batches, bucket_bytes, lr):
    """One rank: our two variants, DDP, first-step gradients of both, the error messages."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from threeaxes.data_parallel import average_gradients, shard_batch, train_data_parallel
    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp=world_size)
    out = {variant: train_data_parallel(rank, world_size, cfg, batches, variant=variant,
                                        bucket_bytes=bucket_bytes, lr=lr)
           for variant in ("per_param", "bucketed")}

    # Gradients after one backward: ours (per-parameter all-reduce) and DDP's.
    inputs, targets = shard_batch(*batches[0], dims)
    ours = ToyTransformer(cfg, seed=0)
    lm_loss(ours(inputs), targets).backward()
    average_gradients(ours, dims)
    out["our_grads"] = {n: p.grad.clone() for n, p in ours.named_parameters()}

    model = ToyTransformer(cfg, seed=0)
    ddp = DDP(model, process_group=dims.group("dp"))
    opt = make_optimizer(model, lr, "sgd")
    for step, (global_inputs, global_targets) in enumerate(batches):
        inputs, targets = shard_batch(global_inputs, global_targets, dims)
        opt.zero_grad()
        lm_loss(ddp(inputs), targets).backward()  # DDP all-reduces and averages inside backward
        if step == 0:
            out["ddp_grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    out["ddp_state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    errors = {}
    for name, call in {
        "train_data_parallel": lambda: train_data_parallel(rank, world_size + 2, cfg, batches),
        "init": lambda: ParallelDims.init(dp=world_size, tp=2),
    }.items():
        try:
            call()
        except ValueError as exc:
            errors[name] = str(exc)
    out["errors"] = errors
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"dp{n}")
def run(request):
    from threeaxes.launch import launch

    world_size = request.param
    batches = _batches()
    # Send the worker by value, so the ranks need not import this test module (and pytest).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    results = launch(_run_everything, world_size, CFG, batches, BUCKET_BYTES, LR, timeout=120)
    reference = ToyTransformer(CFG, seed=0)
    losses = train_steps(reference, batches, lr=LR, optimizer="sgd")
    return world_size, results, reference.state_dict(), losses


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["per_param", "bucketed"])
def test_every_rank_ends_equal_to_one_process(run, variant):
    world_size, results, reference, losses = run
    for rank, result in enumerate(results):
        state = result[variant]["state_dict"]
        assert state.keys() == reference.keys()
        for name, value in state.items():
            torch.testing.assert_close(value, reference[name], rtol=1e-12, atol=1e-12,
                                       msg=lambda m: f"rank {rank}, {variant}, {name}: {m}")
    # the mean of the ranks' local losses is the single-process loss, step by step
    for step, loss in enumerate(losses):
        mean = sum(r[variant]["losses"][step] for r in results) / world_size
        assert math.isclose(mean, loss, rel_tol=1e-12)
    # and training moved the weights (so the comparison is not vacuous)
    start = ToyTransformer(CFG, seed=0).state_dict()
    assert max((reference[k] - start[k]).abs().max() for k in start) > 1e-3


@pytest.mark.slow
def test_gradients_and_weights_equal_ddp(run):
    world_size, results, reference, _ = run
    for rank, result in enumerate(results):
        for name, grad in result["ddp_grads"].items():
            torch.testing.assert_close(result["our_grads"][name], grad, rtol=1e-12, atol=1e-12,
                                       msg=lambda m: f"rank {rank}, grad of {name}: {m}")
        for name, value in result["ddp_state"].items():
            for variant in ("per_param", "bucketed"):
                torch.testing.assert_close(result[variant]["state_dict"][name], value,
                                           rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_trace_counts_one_all_reduce_per_tensor_or_per_bucket(run):
    world_size, results, _, _ = run
    for result in results:
        for variant, per_step in (("per_param", N_TENSORS), ("bucketed", len(EXPECTED_BUCKETS))):
            trace = result[variant]["trace"]
            assert trace.count() == trace.count("all_reduce", axis="dp") == STEPS * per_step
            # every gradient number crosses exactly once per step, whatever the bucketing
            assert trace.total_bytes("all_reduce", axis="dp") == STEPS * PARAM_BYTES
            # every rank is a dp rank, so each all-reduce ran on the group of all of them
            assert {e.group for e in trace.comms()} == {tuple(range(world_size))}
        bucket_bytes = [e.bytes for e in result["bucketed"]["trace"].events[:len(EXPECTED_BUCKETS)]]
        assert bucket_bytes == [8 * sum(b) for b in EXPECTED_BUCKETS]


@pytest.mark.slow
def test_a_layout_that_is_not_the_world_says_what_to_change(run):
    world_size, results, _, _ = run
    for result in results:
        errors = result["errors"]
        assert errors["train_data_parallel"] == (
            f"dp({world_size + 2}) * tp(1) * pp(1) = {world_size + 2} != world_size({world_size}); "
            f"change one axis so the product is {world_size}")
        assert errors["init"] == (
            f"dp({world_size}) * tp(2) * pp(1) = {2 * world_size} != world_size({world_size}); "
            f"change one axis so the product is {world_size}")
