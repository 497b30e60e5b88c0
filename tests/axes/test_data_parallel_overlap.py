"""The overlapped DataParallel wrapper, proved against one process and DDP.

Fast tests run the wrapper's bookkeeping in one process (dp=1: hooks, bucket
plan, frozen and unused parameters, the errors). The numerics run on real gloo
ranks: one launch per world size trains with the wrapper (one all-reduce per
parameter, and bucketed) and with PyTorch's DistributedDataParallel, and every
test of that world size reads from the same run.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch
import torch.nn as nn

from threeaxes.data_parallel import DataParallel, gradient_buckets
from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch, train_steps

# One block, width 8: 21 parameter tensors, 1,208 float64 numbers (as in test_data_parallel).
CFG = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, dtype=torch.float64)
GLOBAL_BATCH, STEPS, LR = 8, 3, 0.1
BUCKET_BYTES = 2048  # 256 float64 numbers
# The bucket plan for 256-number buckets, derived by hand in test_data_parallel.py
# (parameter sizes in the reverse of registration order, head first).
EXPECTED_BUCKETS = [[128, 8, 8, 8], [256], [32], [256],
                    [8, 8, 8, 64, 8, 64, 8, 64, 8], [64, 8, 8, 64], [128]]
N_TENSORS = 21
ONE_RANK = ParallelDims().at(0)  # dp=1, no processes: the hooks run, nothing is sent


def _batches():
    return [make_batch(CFG, GLOBAL_BATCH, seed=20 + step) for step in range(STEPS)]


class WithExtras(nn.Module):
    """The toy model with one frozen parameter (pos_embed) and one extra layer
    that only the ranks listed in `used_on` put into the loss."""

    def __init__(self, cfg, seed, used_on=()):
        super().__init__()
        self.toy = ToyTransformer(cfg, seed)
        self.toy.pos_embed.weight.requires_grad_(False)
        self.extra = nn.Linear(cfg.vocab_size, cfg.vocab_size, dtype=cfg.dtype)
        generator = torch.Generator().manual_seed(seed)  # the same weights in every process
        with torch.no_grad():
            for p in self.extra.parameters():
                p.copy_(0.1 * torch.randn(p.shape, generator=generator, dtype=cfg.dtype))
        self.use_extra = False
        self.used_on = tuple(used_on)

    def forward(self, tokens):
        logits = self.toy(tokens)
        return logits + self.extra(logits) if self.use_extra else logits


# -- one process ------------------------------------------------------------------------

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


# -- real ranks -------------------------------------------------------------------------

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
