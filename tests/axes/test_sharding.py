"""threeaxes.sharding in one process: the flat layout, the accounting, the errors.

The numerics (every ZeRO stage against one process, plain DP and PyTorch's
own ZeroRedundancyOptimizer and fully_shard) run on real ranks in
tests/axes/test_sharding_ranks.py.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from threeaxes.dims import ParallelDims
from threeaxes.sharding import (
    FlatLayout,
    Zero2Optimizer,
    ZeroOptimizer,
    check_shardable,
    fully_shard,
    held_bytes,
    shard_of,
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


def test_a_zero_optimizer_keeps_one_range_and_asks_for_consolidation_before_state_dict():
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
    # the outer groups show the inner optimizer's hyperparameters, as ZeroRedundancyOptimizer's do
    assert opt.param_groups[0]["betas"] == (0.9, 0.999) and opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(RuntimeError, match=r"not been consolidated on this rank; call "
                                           r"consolidate_state_dict\(to=0\) on every dp rank"):
        opt.state_dict()
    with pytest.raises(ValueError, match=r"^to=2; choose a dp rank 0\.\.1$"):
        opt.consolidate_state_dict(to=2)


@pytest.mark.parametrize("make", [ZeroOptimizer, Zero2Optimizer])
def test_zero_optimizers_take_groups_frozen_parameters_and_groups_added_later(make):
    model = ToyTransformer(CFG)
    model.tok_embed.weight.requires_grad_(False)   # frozen: in a group, in no bucket
    blocks = list(model.blocks.parameters())
    rest = [p for p in model.parameters() if all(p is not q for q in blocks)]
    opt = make([{"params": rest[:-1], "lr": 0.1}, {"params": blocks, "lr": 0.01}],
               torch.optim.SGD, RANK0_OF_TWO, momentum=0.9)
    assert [g["lr"] for g in opt.optim.param_groups] == [0.1, 0.01]
    assert opt.frozen == [model.tok_embed.weight]
    assert all(p is not model.tok_embed.weight for b in opt.buckets for p in b.params)
    # by hand (h = 8, V = 16, s = 8): the root less tok_embed and the head's weight:
    # pos_embed 64 + ln_f 16 = 80 numbers; the block 872
    assert [b.layout.numel for b in opt.buckets] == [80, 872]
    opt.add_param_group({"params": [model.head.weight], "lr": 0.5})
    assert [b.layout.numel for b in opt.buckets] == [80, 872, 128]
    assert opt.optim.param_groups[-1]["params"] == [opt.buckets[-1].shard]
    assert opt.optim.param_groups[-1]["lr"] == 0.5 and opt.param_groups[-1]["momentum"] == 0.9
    model.tok_embed.weight.requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"1 parameter\(s\) were frozen .* make a new optimizer"):
        opt.step()


def test_with_no_layout_and_no_process_group_the_error_says_where_to_shard(monkeypatch):
    from threeaxes import dims as dims_module

    monkeypatch.setattr(dims_module, "_current", [])
    model = ToyTransformer(CFG)
    for make in (lambda: ZeroOptimizer(model.parameters(), torch.optim.Adam, lr=0.1),
                 lambda: fully_shard(model.blocks[0])):
        with pytest.raises(RuntimeError, match=r"^no parallel layout and torch\.distributed is not "
                                               r"running; run this inside a launched function"):
            make()


@pytest.mark.parametrize("make", [ZeroOptimizer, Zero2Optimizer])
def test_zero_redundancy_optimizers_options_pass_where_they_mean_ours_else_say_what_to_use(make):
    model = ToyTransformer(CFG)
    # as ZeroRedundancyOptimizer's: the parameters are views of the buckets; no DDP hook
    opt = make(model.parameters(), torch.optim.SGD, RANK0_OF_TWO, lr=0.1,
               parameters_as_bucket_view=True, overlap_with_ddp=False)
    assert "parameters_as_bucket_view" not in opt.optim.defaults   # not the inner optimizer's
    name = make.__name__
    with pytest.raises(ValueError, match=rf"^{name}: parameters_as_bucket_view=False \(PyTorch's\) "
                                         r"is not taken here: the parameters here are always views"):
        make(ToyTransformer(CFG).parameters(), torch.optim.SGD, RANK0_OF_TWO, lr=0.1,
             parameters_as_bucket_view=False)
    with pytest.raises(ValueError, match=r"overlap_with_ddp=True .* Zero2Optimizer is the stage whose "
                                         r"gradient communication overlaps backward"):
        make(ToyTransformer(CFG).parameters(), torch.optim.SGD, RANK0_OF_TWO, lr=0.1,
             overlap_with_ddp=True)
    with pytest.raises(ValueError, match=r"^pass dims= \(the course's layout\) or process_group= "
                                         r"\(PyTorch's\), not both$"):
        make(ToyTransformer(CFG).parameters(), torch.optim.SGD, RANK0_OF_TWO, lr=0.1,
             process_group=object())


def test_fully_shard_takes_ignored_params_and_fsdp2_options_that_mean_ours():
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    ignored = model[1].weight
    fully_shard(model, RANK0_OF_TWO, ignored_params={ignored}, reshard_after_forward=True,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy())
    # by hand: 6 + 3 + 2 = 11 numbers sharded, padded to 12, 6 on each of 2 ranks; the ignored
    # weight (6 numbers) stays whole, a parameter of its module
    assert model._sharding_unit.layout.numel == 11
    assert {n: p.numel() for n, p in model.named_parameters()} == {"1.weight": 6, "flat_shard": 6}
    assert model[1].weight is ignored
    for option, instead in (({"reshard_after_forward": False}, r"always frees its whole parameters"),
                            ({"mp_policy": MixedPrecisionPolicy(param_dtype=torch.float32)},
                             r"cast the model yourself"),
                            ({"offload_policy": CPUOffloadPolicy()}, r"stay on the module's device"),
                            ({"shard_placement_fn": print}, r"no per-parameter placement")):
        with pytest.raises(ValueError, match=rf"^fully_shard: {next(iter(option))}=.* \(PyTorch's\) "
                                             rf"is not taken here: .*{instead}"):
            fully_shard(torch.nn.Linear(2, 2), RANK0_OF_TWO, **option)
    with pytest.raises(TypeError, match=r"fully_shard\(\) got an unexpected keyword argument 'meshes'"):
        fully_shard(torch.nn.Linear(2, 2), RANK0_OF_TWO, meshes=None)


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
    fully_shard(tied[1], RANK0_OF_TWO)
    with pytest.raises(ValueError, match=r"^parameter 0\.weight is tied to weight, which a nested "
                                         r"fully_shard already sharded; apply fully_shard to a "
                                         r"module that holds both places"):
        fully_shard(tied, RANK0_OF_TWO)


def test_fully_shard_keeps_a_tied_parameter_once_and_a_frozen_one_whole():
    tied = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2, bias=False),
                               torch.nn.Linear(2, 3))
    tied[2].weight = tied[0].weight
    tied[1].weight.requires_grad_(False)
    frozen = tied[1].weight
    fully_shard(tied, RANK0_OF_TWO)
    # by hand: weight 6 + two biases of 3 = 12 numbers, the tied weight once; 6 each of 2 ranks
    assert tied._sharding_unit.layout.numel == 12
    assert {n: p.numel() for n, p in tied.named_parameters()} == {"1.weight": 6, "flat_shard": 6}
    assert tied[1].weight is frozen and tied[0].weight is None and tied[2].weight is None


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
