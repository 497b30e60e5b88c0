"""The overlapped DataParallel wrapper's bookkeeping, in one process (dp=1: the hooks run,
nothing is sent): the bucket plan, frozen and unused parameters, DDP's options taken or
refused, the errors that say what to change, and the bucket hooks alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from data_parallel_overlap_helpers import BUCKET_BYTES, CFG, EXPECTED_BUCKETS, N_TENSORS, WithExtras

from threeaxes.data_parallel import DataParallel, gradient_buckets
from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyTransformer, lm_loss, make_batch

ONE_RANK = ParallelDims().at(0)  # dp=1, no processes: the hooks run, nothing is sent


def test_bucket_plan_is_the_hand_derived_one_and_gradient_buckets_s():
    model = ToyTransformer(CFG)
    wrapped = DataParallel(model, BUCKET_BYTES, dims=ONE_RANK)
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    assert [[sizes[n] for n in bucket] for bucket in wrapped.bucket_names] == EXPECTED_BUCKETS
    assert wrapped.bucket_names[0][0] == "head.weight"          # the last layer's bucket comes first
    assert wrapped.bucket_names[-1] == ["tok_embed.weight"]
    assert wrapped.bucket_sizes_bytes == [8 * sum(b) for b in EXPECTED_BUCKETS]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    assert [[g.numel() for g in b] for b in gradient_buckets(model, BUCKET_BYTES)] == EXPECTED_BUCKETS
    per_param = DataParallel(ToyTransformer(CFG), dims=ONE_RANK)
    assert [len(b) for b in per_param.bucket_names] == [1] * N_TENSORS


def test_one_replica_leaves_the_gradients_of_plain_backward():
    inputs, targets = make_batch(CFG, 4, seed=1)
    plain = ToyTransformer(CFG)
    lm_loss(plain(inputs), targets).backward()
    wrapped = DataParallel(ToyTransformer(CFG), BUCKET_BYTES, dims=ONE_RANK)
    lm_loss(wrapped(inputs), targets).backward()
    wrapped.finish_gradient_synchronization()
    for (name, p), q in zip(plain.named_parameters(), wrapped.module.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)


def test_a_second_backward_before_finishing_names_the_call_to_make():
    wrapped = DataParallel(ToyTransformer(CFG), dims=ONE_RANK)
    inputs, targets = make_batch(CFG, 4, seed=1)
    lm_loss(wrapped(inputs), targets).backward()
    with pytest.raises(RuntimeError, match=r"second backward.*call model\.finish_gradient_synchronization\(\) "
                                           r"after each loss\.backward\(\)"):
        lm_loss(wrapped(inputs), targets).backward()
    # after finishing, the next step's backward is fine again
    fresh = DataParallel(ToyTransformer(CFG), dims=ONE_RANK)
    for _ in range(2):
        lm_loss(fresh(inputs), targets).backward()
        fresh.finish_gradient_synchronization()


def test_finishing_without_a_backward_says_to_run_one():
    wrapped = DataParallel(ToyTransformer(CFG), dims=ONE_RANK)
    with pytest.raises(RuntimeError, match=r"no gradient since the last call; run loss\.backward\(\)"):
        wrapped.finish_gradient_synchronization()


def test_frozen_parameters_are_in_no_bucket_and_unused_ones_get_zeros():
    model = WithExtras(CFG, seed=0)
    wrapped = DataParallel(model, BUCKET_BYTES, dims=ONE_RANK)
    names = [n for bucket in wrapped.bucket_names for n in bucket]
    assert "toy.pos_embed.weight" not in names and len(names) == N_TENSORS - 1 + 2
    inputs, targets = make_batch(CFG, 4, seed=1)
    lm_loss(wrapped(inputs), targets).backward()  # the extra layer is not used
    wrapped.finish_gradient_synchronization()
    assert model.toy.pos_embed.weight.grad is None
    assert torch.equal(model.extra.weight.grad, torch.zeros_like(model.extra.weight))
    assert model.toy.head.weight.grad.abs().max() > 0


@pytest.mark.parametrize("bucket_bytes", [0, -5, 1.5])
def test_bucket_size_must_be_positive_bytes(bucket_bytes):
    with pytest.raises(ValueError, match=r"bucket_bytes=.*positive whole number of bytes"):
        DataParallel(ToyTransformer(CFG), bucket_bytes, dims=ONE_RANK)


def test_mixed_dtypes_in_a_bucket_say_what_to_change():
    model = ToyTransformer(CFG)
    model.head.float()
    with pytest.raises(ValueError, match=r"single dtype \(e\.g\. model\.double\(\)\) or pass bucket_bytes=None"):
        DataParallel(model, BUCKET_BYTES, dims=ONE_RANK)
    DataParallel(model, None, dims=ONE_RANK)  # one parameter per all-reduce: any dtypes


@pytest.mark.parametrize("returns, message", [
    (lambda grads: grads[0], r"launch_bucket returned Tensor; return a pair \(flat, pending\)"),
    (lambda grads: (grads[0], None), r"flat buffer should be a 1-d tensor of the bucket's 128 gradient numbers"),
    (lambda grads: (grads[0].reshape(-1), None), r"pending is a NoneType, which has no wait\(\)"),
])
def test_a_launch_bucket_that_breaks_the_contract_is_told_what_to_return(returns, message):
    wrapped = DataParallel(ToyTransformer(CFG), dims=ONE_RANK, launch_bucket=lambda grads, dims: returns(grads))
    inputs, targets = make_batch(CFG, 4, seed=1)
    with pytest.raises(TypeError, match=message):
        lm_loss(wrapped(inputs), targets).backward()


def test_ddp_options_pass_where_they_mean_ours_else_say_what_to_use():
    from types import SimpleNamespace

    # DDP's bucket_cap_mb (MiB) is bucket_bytes: 2048 bytes = 2048 / 2**20 MiB; options
    # whose meaning is what happens here pass
    wrapped = DataParallel(ToyTransformer(CFG), dims=ONE_RANK, bucket_cap_mb=BUCKET_BYTES / 2**20,
                           find_unused_parameters=True, static_graph=False, init_sync=True,
                           device_ids=None, gradient_as_bucket_view=False)
    assert wrapped.bucket_bytes == BUCKET_BYTES
    assert wrapped.bucket_sizes_bytes == [8 * sum(b) for b in EXPECTED_BUCKETS]
    for option, instead in (({"device_ids": [0]}, r"move it there before wrapping"),
                            ({"broadcast_buffers": False}, r"copied to every rank once, when wrapping"),
                            ({"gradient_as_bucket_view": True}, r"the buckets are copies"),
                            ({"mixed_precision": object()}, r"cast the model yourself"),
                            ({"init_sync": False}, r"always copied to every rank when wrapping")):
        with pytest.raises(ValueError, match=rf"^DataParallel: {next(iter(option))}=.* \(PyTorch's\) "
                                             rf"is not taken here: .*{instead}"):
            DataParallel(ToyTransformer(CFG), dims=ONE_RANK, **option)
    with pytest.raises(TypeError, match=r"DataParallel\(\) got an unexpected keyword argument 'bucket_mb'"):
        DataParallel(ToyTransformer(CFG), dims=ONE_RANK, bucket_mb=1)
    with pytest.raises(ValueError, match=r"^pass bucket_bytes= or bucket_cap_mb= \(DDP's, in MiB\), "
                                         r"not both$"):
        DataParallel(ToyTransformer(CFG), BUCKET_BYTES, dims=ONE_RANK, bucket_cap_mb=1)
    with pytest.raises(ValueError, match=r"^DataParallel: a mesh of 2 axes; pass the one axis to run "
                                         r"over \(dims\.mesh\['dp'\]\), or dims= the whole layout$"):
        DataParallel(ToyTransformer(CFG), device_mesh=SimpleNamespace(ndim=2))


def test_naive_vs_overlapped_refuses_nothing_to_time():
    from threeaxes.data_parallel.compare import naive_vs_overlapped, step_seconds

    with pytest.raises(ValueError, match=r"steps=0, warmup=1; time at least one step"):
        naive_vs_overlapped(0, 1, CFG, make_batch(CFG, 4), BUCKET_BYTES, steps=0, warmup=1)
    with pytest.raises(ValueError, match=r"variant='fast'; choose one of \('naive', 'overlapped'\)"):
        step_seconds([], "fast")


def test_bucket_hooks_launch_in_order_and_the_unused_bucket_when_backward_ends():
    from threeaxes.data_parallel.overlap import BucketHooks

    a, b, c = (nn.Parameter(torch.ones(2, dtype=torch.float64)) for _ in range(3))
    launched = []
    hooks = BucketHooks([[b], [a], [c]], lambda index, grads: launched.append(
        (index, [g.tolist() for g in grads])), second_backward="call done() first")
    (3 * a + 5 * b).sum().backward()        # c is unused: zeros, launched as backward ends
    assert launched == [(0, [[5.0, 5.0]]), (1, [[3.0, 3.0]]), (2, [[0.0, 0.0]])]
    assert hooks.backwards == 1
    with pytest.raises(RuntimeError, match="call done\\(\\) first"):
        (a * b).sum().backward()
    hooks.done()
    hooks.remove()
    (a * b).sum().backward()                # no hooks any more: nothing launched
    assert len(launched) == 3


def test_bucket_hooks_that_accumulate_launch_every_bucket_each_backward():
    from threeaxes.data_parallel.overlap import BucketHooks

    a, b = (nn.Parameter(torch.ones(1, dtype=torch.float64)) for _ in range(2))
    launched = []
    BucketHooks([[a, b]], lambda index, grads: launched.append(index), accumulate=True)
    for _ in range(3):
        (a * b).sum().backward()
    assert launched == [0, 0, 0]
