"""threeaxes.sharding in one process: the flat layout, the accounting, the errors.

The numerics (every ZeRO stage against one process, plain DP and PyTorch's
own ZeroRedundancyOptimizer and fully_shard) run on real ranks in
tests/test_sharding_ranks.py.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from threeaxes.dims import ParallelDims
from threeaxes.sharding import (
    FlatLayout, Zero2Optimizer, ZeroOptimizer, check_shardable, fully_shard, held_bytes, shard_of,
)
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

CFG = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, dtype=torch.float64)
RANK0_OF_TWO = ParallelDims(dp=2).at(0)   # a layout by arithmetic: enough to build, not to step


# -- the flat layout -------------------------------------------------------------------

def test_a_layout_pads_to_a_multiple_of_n_and_cuts_equal_ranges():
    layout = FlatLayout([(3, 2), (5,)], n=4)
    # by hand: 6 + 5 = 11 numbers, padded to 12, four ranges of 3
    assert (layout.numel, layout.padded_numel, layout.shard_numel) == (11, 12, 3)
    assert [layout.shard_range(i) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 12)]
    a, b = torch.arange(6.0).view(3, 2), torch.arange(10.0, 15.0)
    flat = layout.flatten([a, b])
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 0]
    # rank 1's range starts in a and ends in b; a missing tensor counts as zeros
    assert shard_of(layout, [a, b], 1).tolist() == [3, 4, 5]
    assert shard_of(layout, [a, b], 2).tolist() == [10, 11, 12]
    assert shard_of(layout, [None, b], 3).tolist() == [13, 14, 0]
    views = layout.views(flat)
    views[1][0] = 99.0   # a view writes into the flat buffer
    assert flat[6] == 99.0


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), n=st.integers(1, 5))
def test_layout_rules(sizes, n):
    layout = FlatLayout([(s,) for s in sizes], n)
    assert layout.padded_numel % n == 0 and 0 <= layout.padded_numel - layout.numel < n
    ranges = [layout.shard_range(i) for i in range(n)]
    assert ranges[0][0] == 0 and ranges[-1][1] == layout.padded_numel
    assert all(stop == start for (_, stop), (start, _) in zip(ranges, ranges[1:]))  # no gap, no overlap
    tensors = [torch.randn(s, dtype=torch.float64) for s in sizes]
    flat = layout.flatten(tensors)
    for t, view in zip(tensors, layout.views(flat)):
        assert torch.equal(t, view)
    for i, (start, stop) in enumerate(ranges):
        assert torch.equal(shard_of(layout, tensors, i), flat[start:stop])


def test_a_layout_refuses_a_shard_that_does_not_exist():
    with pytest.raises(ValueError, match=r"^shard 4 does not exist; choose 0\.\.3$"):
        FlatLayout([(5,)], 4).shard_range(4)
    with pytest.raises(ValueError, match=r"^n=0; the number of shards must be a positive integer$"):
        FlatLayout([(5,)], 0)


# -- what cannot be sharded ---------------------------------------------------------------

def test_groups_that_cannot_be_one_flat_buffer_say_what_to_change():
    f32 = torch.nn.Parameter(torch.zeros(3))
    f64 = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    frozen = torch.zeros(3, requires_grad=False)
    with pytest.raises(ValueError, match=r"mixes dtypes \['torch\.float32', 'torch\.float64'\]; .*"
                                         r"model\.double\(\)\) or put each dtype in its own "
                                         r"parameter group"):
        check_shardable([f32, f64])
    with pytest.raises(ValueError, match=r"holds 1 parameter\(s\) with requires_grad=False; .*"
                                         r"\[p for p in model\.parameters\(\) if p\.requires_grad\]"):
        check_shardable([f32, frozen])
    with pytest.raises(ValueError, match=r"has dtype torch\.int64; only floating-point"):
        check_shardable([torch.zeros(3, dtype=torch.int64)])
    with pytest.raises(ValueError, match=r"holds no tensors"):
        check_shardable([])
    with pytest.raises(TypeError, match=r"holds a str, not a tensor"):
        check_shardable(["weight"])


@pytest.mark.parametrize("make", [ZeroOptimizer, Zero2Optimizer])
def test_zero_optimizers_refuse_what_they_cannot_shard(make):
    model = ToyTransformer(CFG)
    for not_a_class in (torch.optim.Adam(model.parameters()), "adam", dict):
        with pytest.raises(TypeError, match=r"is not a torch\.optim\.Optimizer subclass; pass the "
                                            r"class itself, e\.g\. torch\.optim\.Adam"):
            make(model.parameters(), not_a_class, RANK0_OF_TWO, lr=0.1)
    mixed = [{"params": [torch.nn.Parameter(torch.zeros(3))]},
             {"params": [torch.nn.Parameter(torch.zeros(2)),
                         torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))]}]
    with pytest.raises(ValueError, match=r"^the parameter group 1 mixes dtypes"):
        make(mixed, torch.optim.Adam, RANK0_OF_TWO, lr=0.1)


def test_a_zero_optimizer_keeps_one_range_and_states_it_cannot_save_the_whole():
    model = ToyTransformer(CFG)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = ZeroOptimizer(model.parameters(), torch.optim.Adam, RANK0_OF_TWO, lr=0.1)
    # the parameters are unchanged, now views into one flat buffer (1,208 numbers, 25 MiB bucket)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    (bucket,) = opt.buckets
    assert bucket.layout.numel == 1208 and bucket.shard.numel() == 604
    assert {p.untyped_storage().data_ptr() for p in model.parameters()} == {
        bucket.flat.untyped_storage().data_ptr()}
    assert opt.optim.param_groups[0]["params"][0] is bucket.shard
    with pytest.raises(NotImplementedError, match=r"each rank holds only its shard"):
        opt.state_dict()
    with pytest.raises(NotImplementedError, match=r"make a new ZeroOptimizer"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})


def test_fully_shard_refuses_twice_an_empty_module_and_a_bad_prefetch():
    model = ToyTransformer(CFG)
    fully_shard(model.blocks[0], RANK0_OF_TWO)
    with pytest.raises(ValueError, match=r"^Block is already sharded; call fully_shard once per "
                                         r"module \(blocks first, then the root\)$"):
        fully_shard(model.blocks[0], RANK0_OF_TWO)
    with pytest.raises(ValueError, match=r"^GELU has no parameters to shard"):
        fully_shard(torch.nn.GELU(), RANK0_OF_TWO)
    with pytest.raises(TypeError, match=r"^prefetch='yes'; pass True or False$"):
        fully_shard(model, RANK0_OF_TWO, prefetch="yes")
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^the Sequential's parameters mixes dtypes"):
        fully_shard(mixed, RANK0_OF_TWO)
    tied = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    with pytest.raises(ValueError, match=r"^parameter 1\.weight is also registered elsewhere "
                                         r"\(tied weights\); .*untie them$"):
        fully_shard(tied, RANK0_OF_TWO)
    assert len(list(tied.parameters())) == 3   # refused before anything was changed


def test_fully_shard_leaves_only_the_flat_shards_as_parameters():
    model = ToyTransformer(CFG)
    fully_shard(model.blocks[0], RANK0_OF_TWO)
    fully_shard(model, RANK0_OF_TWO)
    # by hand, rank 0 of 2: the block's 12h^2 + 13h = 872 numbers, half each;
    # the root's (16 + 8) * 8 + 2 * 8 + 16 * 8 = 336 numbers, half each
    assert {n: p.numel() for n, p in model.named_parameters()} == {
        "flat_shard": 168, "blocks.0.flat_shard": 436}
    assert model.blocks[0].attn.q.weight is None   # only a view while gathered


# -- counting what a rank holds ----------------------------------------------------------------

def test_held_bytes_of_plain_adam_is_four_copies_of_the_model():
    model = ToyTransformer(CFG)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    lm_loss(model(make_batch(CFG, 2)[0]), make_batch(CFG, 2)[1]).backward()
    opt.step()
    held = held_bytes(model, opt)
    # by hand: 1,208 float64 numbers each in params, grads, exp_avg, exp_avg_sq; one
    # float32 step counter per parameter tensor (21 of them)
    assert held == (1208 * 8, 1208 * 8, 2 * 1208 * 8 + 21 * 4, 4 * 1208 * 8 + 21 * 4)
    # a view of a tensor already counted is not counted again
    model.tok_embed.weight.grad = model.head.weight.grad.view(16, 8)
    assert held_bytes(model, opt).grads == (1208 - 128) * 8
