"""Tensor parallelism (threeaxes.tensor_parallel), proved against one process and
against PyTorch's parallelize_module.

Fast tests, in one process: the shard layout, shard -> gather round trips, the
error messages, and the block's arithmetic redone by hand from the shards.
The numerics run on real gloo ranks, three launches in all, each read by
several tests: the whole toy model with tp=4 on 4 ranks,
`ParallelDims.init(dp=2, tp=2)` on 4 ranks (two independent tp groups, each
training its own data: this proves the collectives stay inside their tp group),
and tp=2 next to parallelize_module on 2 ranks.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from threeaxes import dims as dims_module
from threeaxes.dims import ParallelDims
from threeaxes.tensor_parallel import (
    BLOCK_LAYOUT,
    TPBlock,
    check_tp_layout,
    copy_to_tp_region,
    gather_block_state,
    gather_from_tp_region,
    gather_model_state,
    layout_of,
    reduce_from_tp_region,
    scatter_to_tp_region,
    shard_block_state,
    shard_model_state,
    tensor_parallel_toy,
)
from threeaxes.toy import Block, ToyConfig, ToyTransformer, lm_loss, make_batch, train_steps

# The toy model as every drop uses it (4 heads, 4 layers, width 32), in float64.
CFG = ToyConfig(dtype=torch.float64)
BATCH, STEPS, LR = 2, 2, 0.1
F64 = 8  # bytes per float64


def _batches(offset=0):
    return [make_batch(CFG, BATCH, seed=offset + step) for step in range(STEPS)]


def _sgd_step(model, lr):
    """What torch.optim.SGD (no momentum) does to each parameter: p <- p - lr * grad.

    The ranks use this instead of torch.optim, whose first use in a fresh process
    imports torch._dynamo (seconds per rank); test_sgd_step_is_torch_sgd proves
    the two give identical bits."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


# -- one process ----------------------------------------------------------------------------

def test_layout_errors_say_what_to_change():
    with pytest.raises(ValueError) as err:
        check_tp_layout(3, 4)
    assert str(err.value) == "tp=3 does not divide n_heads=4; choose tp in {1, 2, 4}"
    with pytest.raises(ValueError, match=r"tp=4 does not divide the MLP width d_mlp=6; choose tp in \{1, 2\}"):
        check_tp_layout(4, 4, d_mlp=6)
    with pytest.raises(ValueError, match=r"tp_rank=2 is outside 0\.\.1"):
        check_tp_layout(2, 4, tp_rank=2)
    with pytest.raises(ValueError, match=r"tp=0; it must be a positive integer"):
        check_tp_layout(0, 4)
    with pytest.raises(ValueError, match=r"tp=3 does not divide n_heads=4; choose tp in \{1, 2, 4\}"):
        shard_block_state(Block(CFG).state_dict(), 0, 3, n_heads=4)
    with pytest.raises(ValueError, match=r"tp=3 does not divide n_heads=4"):
        tensor_parallel_toy(ToyTransformer(CFG), ParallelDims(tp=3).at(0))
    # a tp=2 block made from arithmetic alone has no tp group; its first collective says how to get one
    block = TPBlock.from_block(Block(CFG), CFG, ParallelDims(tp=2).at(0))
    with pytest.raises(ValueError, match=r"no process groups.*ParallelDims\.init\(dp=1, tp=2, pp=1\) "
                                         r"inside the launched function"):
        block(torch.zeros(1, CFG.seq_len, CFG.d_model, dtype=CFG.dtype))
    with pytest.raises(KeyError, match=r"shard_model_state"):
        shard_block_state(ToyTransformer(CFG).state_dict(), 0, 2, n_heads=4)


def test_without_a_layout_the_error_says_how_to_make_one(monkeypatch):
    monkeypatch.setattr(dims_module, "_current", [])
    for make in (lambda: TPBlock(CFG), lambda: tensor_parallel_toy(ToyTransformer(CFG)),
                 lambda: copy_to_tp_region(torch.zeros(2))):
        with pytest.raises(RuntimeError, match=r"^no parallel layout in this process; call "
                                               r"threeaxes\.dims\.ParallelDims\.init"):
            make()


def test_layout_names_every_tensor_of_the_block():
    assert sorted(BLOCK_LAYOUT) == sorted(Block(CFG).state_dict())
    assert layout_of("blocks.3.attn.q.weight") == 0 and layout_of("blocks.0.mlp.fc2.weight") == 1
    assert layout_of("attn.proj.bias") is None and layout_of("tok_embed.weight") is None
    with pytest.raises(KeyError, match="not a tensor of the toy block"):
        layout_of("blocks.0.attn.qkv.weight")


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shards_have_the_megatron_shapes(tp):
    h, d_mlp = CFG.d_model, CFG.d_mlp
    # Written out by hand. nn.Linear.weight is (out, in): column-parallel cuts
    # dim 0 (outputs), row-parallel cuts dim 1 (inputs); row biases stay whole.
    expected = {
        "ln1.weight": (h,), "ln1.bias": (h,), "ln2.weight": (h,), "ln2.bias": (h,),
        "attn.q.weight": (h // tp, h), "attn.q.bias": (h // tp,),
        "attn.k.weight": (h // tp, h), "attn.k.bias": (h // tp,),
        "attn.v.weight": (h // tp, h), "attn.v.bias": (h // tp,),
        "attn.proj.weight": (h, h // tp), "attn.proj.bias": (h,),
        "mlp.fc1.weight": (d_mlp // tp, h), "mlp.fc1.bias": (d_mlp // tp,),
        "mlp.fc2.weight": (h, d_mlp // tp), "mlp.fc2.bias": (h,),
    }
    full = Block(CFG).state_dict()
    for rank in range(tp):
        shard = shard_block_state(full, rank, tp, n_heads=CFG.n_heads)
        assert {k: tuple(v.shape) for k, v in shard.items()} == expected
    # rank 1 of 2 holds heads 2 and 3: rows 16..31 of q's weight
    if tp == 2:
        torch.testing.assert_close(shard_block_state(full, 1, 2, n_heads=4)["attn.q.weight"],
                                   full["attn.q.weight"][16:32], rtol=0, atol=0)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shard_then_gather_gives_back_exactly_the_full_state(tp):
    model = ToyTransformer(CFG, seed=5)
    full = model.state_dict()
    back = gather_model_state([shard_model_state(full, r, tp, n_heads=CFG.n_heads) for r in range(tp)])
    assert list(back) == list(full)
    for name in full:
        assert torch.equal(back[name], full[name]), name
    block = model.blocks[2].state_dict()
    back = gather_block_state([shard_block_state(block, r, tp, n_heads=CFG.n_heads) for r in range(tp)])
    assert all(torch.equal(back[k], block[k]) for k in block)


def test_gather_refuses_replicas_that_drifted_apart():
    full = Block(CFG).state_dict()
    shards = [shard_block_state(full, r, 2, n_heads=4) for r in range(2)]
    shards[1]["ln2.weight"] = shards[1]["ln2.weight"] + 1e-12
    with pytest.raises(ValueError, match=r"ln2.weight is replicated but tp rank 1 holds a different copy"):
        gather_block_state(shards)
    del shards[1]["ln2.weight"]
    with pytest.raises(ValueError, match=r"tp rank 1's shard holds different tensors"):
        gather_block_state(shards)


@pytest.mark.parametrize("tp", [2, 4])
def test_summing_the_shards_partial_outputs_gives_the_full_block(tp):
    """The block's arithmetic redone by hand from the shards, no ranks: each
    shard runs its own heads (and MLP features) to a partial output; the sum of
    the partials plus the bias, added once, is the full block's output."""
    block = ToyTransformer(CFG, seed=1).blocks[1]
    full = block.state_dict()
    shards = [shard_block_state(full, r, tp, n_heads=CFG.n_heads) for r in range(tp)]
    b, s, h, hd = BATCH, CFG.seq_len, CFG.d_model, CFG.head_dim
    x = torch.randn(b, s, h, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    a = F.layer_norm(x, (h,), full["ln1.weight"], full["ln1.bias"])
    partials = []
    for shard in shards:
        q, k, v = (F.linear(a, shard[f"attn.{n}.weight"], shard[f"attn.{n}.bias"])
                   .view(b, s, -1, hd).transpose(1, 2) for n in "qkv")
        assert q.shape == (b, CFG.n_heads // tp, s, hd)  # this shard's heads only
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        partials.append(F.linear(y, shard["attn.proj.weight"]))
    attn = sum(partials) + full["attn.proj.bias"]
    torch.testing.assert_close(attn, block.attn(block.ln1(x)), rtol=1e-12, atol=1e-14)

    m = F.layer_norm(x, (h,), full["ln2.weight"], full["ln2.bias"])
    mlp = sum(F.linear(F.gelu(F.linear(m, sh["mlp.fc1.weight"], sh["mlp.fc1.bias"])), sh["mlp.fc2.weight"])
              for sh in shards) + full["mlp.fc2.bias"]
    torch.testing.assert_close(mlp, block.mlp(block.ln2(x)), rtol=1e-12, atol=1e-14)


def test_a_single_tp_rank_is_exactly_the_toy_block():
    block = ToyTransformer(CFG, seed=2).blocks[0]
    tp_block = TPBlock.from_block(block, CFG, ParallelDims().at(0))  # tp=1 in a plain process
    x = torch.randn(BATCH, CFG.seq_len, CFG.d_model, dtype=torch.float64, requires_grad=True)
    x_tp = x.detach().clone().requires_grad_()
    y, y_tp = block(x), tp_block(x_tp)
    assert torch.equal(y, y_tp)
    y.square().sum().backward()
    y_tp.square().sum().backward()
    assert torch.equal(x.grad, x_tp.grad)
    for (name, p), p_tp in zip(block.named_parameters(), tp_block.parameters()):
        assert torch.equal(p.grad, p_tp.grad), name


def test_the_maps_are_the_identity_on_one_rank():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    one_rank = ParallelDims().at(0)
    for fn in (copy_to_tp_region, reduce_from_tp_region, gather_from_tp_region, scatter_to_tp_region):
        x.grad = None
        y = fn(x, one_rank)
        assert torch.equal(y, x)
        (2 * y).sum().backward()
        assert torch.equal(x.grad, torch.full_like(x, 2.0)), fn.__name__


def test_colwise_parallel_hands_back_plain_local_tensors_by_default():
    """The toy's attention reads its local head count from q's output width, which
    works under parallelize_module only if ColwiseParallel returns the local
    torch.Tensor, not a DTensor (use_local_output=True)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    assert ColwiseParallel().use_local_output is True
    assert RowwiseParallel().use_local_output is True


def test_sgd_step_is_torch_sgd():
    ours, theirs = ToyTransformer(CFG, seed=3), ToyTransformer(CFG, seed=3)
    batches = _batches()
    for inputs, targets in batches:
        ours.zero_grad()
        lm_loss(ours(inputs), targets).backward()
        _sgd_step(ours, LR)
    train_steps(theirs, batches, lr=LR, optimizer="sgd")
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(p, q), name


# -- real ranks -------------------------------------------------------------------------------

def _tp_training(rank, world_size, dp, tp, cfg, steps, batch, lr):
    """One rank of a dp x tp run: every block tensor-parallel over this rank's tp
    group, dp replicas training on different batches (no dp gradient sync: each
    replica is its own single-process run). Also traces one block alone, and
    runs the stand-alone layers against nn.Linear."""
    from threeaxes import trace
    from threeaxes.dims import ParallelDims
    from threeaxes.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    dims = ParallelDims.init(dp=dp, tp=tp)
    coords = dims.coords(rank)
    model = tensor_parallel_toy(ToyTransformer(cfg, seed=0), dims)

    def seen(recorded):
        return [(e.op, e.axis, e.bytes, e.group) for e in recorded.comms()]

    out = {"coords": coords, "losses": [], "step_events": []}
    for step in range(steps):
        inputs, targets = make_batch(cfg, batch, seed=100 * coords["dp"] + step)
        model.zero_grad()
        with trace.record() as fwd:
            loss = lm_loss(model(inputs), targets)
        with trace.record() as bwd:
            loss.backward()
        _sgd_step(model, lr)
        out["losses"].append(loss.item())
        out["step_events"].append((seen(fwd), seen(bwd)))
    out["state"] = model.state_dict()

    # one block alone, traced
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype,
                    generator=torch.Generator().manual_seed(7), requires_grad=True)
    with trace.record() as fwd:
        y = model.blocks[1](x)
    with trace.record() as bwd:
        y.sum().backward()
    out["block_events"] = (seen(fwd), seen(bwd))

    # the stand-alone layers: column with gather_output, row with a full input
    gen = torch.Generator().manual_seed(11)
    dense = nn.Linear(cfg.d_model, 2 * cfg.d_model, dtype=cfg.dtype)
    col = ColumnParallelLinear(cfg.d_model, 2 * cfg.d_model, dims=dims, gather_output=True, dtype=cfg.dtype)
    row = RowParallelLinear(2 * cfg.d_model, cfg.d_model, dims=dims, input_is_parallel=False, dtype=cfg.dtype)
    dense2 = nn.Linear(2 * cfg.d_model, cfg.d_model, dtype=cfg.dtype)
    for layer in (dense, dense2):
        with torch.no_grad():
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen, dtype=cfg.dtype))
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen, dtype=cfg.dtype))
    with torch.no_grad():
        col.weight.copy_(dense.weight.chunk(tp, 0)[coords["tp"]])
        col.bias.copy_(dense.bias.chunk(tp, 0)[coords["tp"]])
        row.weight.copy_(dense2.weight.chunk(tp, 1)[coords["tp"]])
        row.bias.copy_(dense2.bias)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, generator=gen)
    x_ref, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref, y_tp = dense2(dense(x_ref)), row(col(x_tp))
    with trace.record() as layers:
        y_ref.square().sum().backward()
        y_tp.square().sum().backward()
    out["layers"] = {
        "y": (y_ref.detach(), y_tp.detach()),
        "x.grad": (x_ref.grad, x_tp.grad),
        "col.weight.grad": (dense.weight.grad.chunk(tp, 0)[coords["tp"]], col.weight.grad),
        "row.weight.grad": (dense2.weight.grad.chunk(tp, 1)[coords["tp"]], row.weight.grad),
        "row.bias.grad": (dense2.bias.grad, row.bias.grad),
    }
    out["layer_events"] = seen(layers)

    errors = {}
    for name, call in {
        "out_features": lambda: ColumnParallelLinear(cfg.d_model, 2 * tp + 1, dims=dims),
        "n_heads": lambda: TPBlock(ToyConfig(n_heads=1, dtype=cfg.dtype), dims),
        "product": lambda: ParallelDims.init(dp=dp, tp=2 * tp),
        "axis": lambda: dims.group("xp"),
    }.items():
        try:
            call()
        except ValueError as exc:
            errors[name] = str(exc)
    out["errors"] = errors
    return out


def _launch(fn, world_size, *args):
    from threeaxes.launch import launch

    # Send the worker by value, so the ranks need not import this test module (and pytest).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return launch(fn, world_size, *args, timeout=120)


@pytest.fixture(scope="module", params=[(1, 4), (2, 2)], ids=["tp4", "dp2xtp2"])
def tp_run(request):
    dp, tp = request.param
    results = _launch(_tp_training, dp * tp, dp, tp, CFG, STEPS, BATCH, LR)
    references = {}
    for d in range(dp):
        reference = ToyTransformer(CFG, seed=0)
        losses = train_steps(reference, _batches(offset=100 * d), lr=LR, optimizer="sgd")
        references[d] = (reference.state_dict(), losses)
    return dp, tp, results, references


@pytest.mark.slow
def test_every_parameter_after_two_steps_equals_one_process(tp_run):
    dp, tp, results, references = tp_run
    for d in range(dp):
        ranks = [r for r in results if r["coords"]["dp"] == d]
        assert [r["coords"]["tp"] for r in ranks] == list(range(tp))
        full = gather_model_state([r["state"] for r in ranks])  # raises if replicas drifted
        reference, losses = references[d]
        assert list(full) == list(reference)
        for name, value in full.items():
            torch.testing.assert_close(value, reference[name], rtol=1e-12, atol=1e-14,
                                       msg=lambda m: f"dp replica {d}, tp={tp}, {name}: {m}")
        for r in ranks:
            assert r["losses"] == pytest.approx(losses, rel=1e-12, abs=0)


@pytest.mark.slow
def test_replicated_tensors_stay_identical_on_every_tp_rank(tp_run):
    dp, tp, results, _ = tp_run
    for d in range(dp):
        ranks = [r for r in results if r["coords"]["dp"] == d]
        for name, value in ranks[0]["state"].items():
            if layout_of(name) is None:
                assert all(torch.equal(r["state"][name], value) for r in ranks), name


@pytest.mark.slow
def test_each_block_all_reduces_twice_forward_and_twice_backward(tp_run):
    _, tp, results, _ = tp_run
    # Hand count: one all-reduce after attention's proj, one after the MLP's fc2,
    # each of the whole (batch, seq, d_model) activation; the same two backward,
    # from the copy maps at the input of attention and of the MLP. Each runs on the
    # rank's own tp group: with rank = dp * tp + tp_rank, ranks dp * tp .. dp * tp + tp - 1.
    for r in results:
        d = r["coords"]["dp"]
        tp_group = tuple(range(d * tp, (d + 1) * tp))
        one = ("all_reduce", "tp", BATCH * CFG.seq_len * CFG.d_model * F64, tp_group)
        assert r["block_events"] == ([one, one], [one, one])
        for fwd, bwd in r["step_events"]:
            assert fwd == [one] * (2 * CFG.n_layers)
            assert bwd == [one] * (2 * CFG.n_layers)


@pytest.mark.slow
def test_standalone_column_and_row_layers_equal_nn_linear(tp_run):
    _, _, results, _ = tp_run
    for r in results:
        for name, (expected, got) in r["layers"].items():
            # unit-scale random weights and a squared loss: a few gradient entries are
            # small differences of large terms, hence the looser 1e-10
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10,
                                       msg=lambda m: f"rank coords {r['coords']}, {name}: {m}")


@pytest.mark.slow
def test_standalone_layers_gather_and_scatter_inside_the_tp_group(tp_run):
    _, tp, results, _ = tp_run
    for r in results:
        d = r["coords"]["dp"]
        tp_group = tuple(range(d * tp, (d + 1) * tp))
        # backward: the row layer's scatter all-gathers its input gradient, (batch, seq, 2 d_model)
        # in full, then the column layer's copy all-reduces the (batch, seq, d_model) input gradient
        width = BATCH * CFG.seq_len * F64
        assert r["layer_events"] == [("all_gather", "tp", width * 2 * CFG.d_model, tp_group),
                                     ("all_reduce", "tp", width * CFG.d_model, tp_group)]


# The divisors, by hand: 2 * tp + 1 is 5 for tp = 2 and 9 for tp = 4.
OUT_FEATURE_CHOICES = {2: "{1, 5}", 4: "{1, 3, 9}"}


@pytest.mark.slow
def test_layers_on_ranks_name_what_to_change(tp_run):
    dp, tp, results, _ = tp_run
    for r in results:
        errors = r["errors"]
        assert errors["out_features"] == (
            f"tp={tp} does not divide out_features={2 * tp + 1}; choose tp in {OUT_FEATURE_CHOICES[tp]}")
        assert errors["n_heads"] == f"tp={tp} does not divide n_heads=1; choose tp in {{1}}"
        assert errors["product"] == (
            f"dp({dp}) * tp({2 * tp}) * pp(1) = {2 * dp * tp} != world_size({dp * tp}); "
            f"change one axis so the product is {dp * tp}")
        assert errors["axis"] == "axis='xp' does not exist; choose one of 'dp', 'tp', 'pp'"


def _ours_and_torchs(rank, world_size, cfg, steps, batch, lr):
    """One rank: our TP toy next to parallelize_module's (ColwiseParallel on q, k, v,
    fc1; RowwiseParallel on proj, fc2; the rest replicated), same weights."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(tp=world_size)
    mesh = dims.mesh["tp"]  # the layout's DeviceMesh is PyTorch's own: its tp axis feeds parallelize_module
    plan = {}
    for i in range(cfg.n_layers):
        plan.update({f"blocks.{i}.attn.q": ColwiseParallel(), f"blocks.{i}.attn.k": ColwiseParallel(),
                     f"blocks.{i}.attn.v": ColwiseParallel(), f"blocks.{i}.attn.proj": RowwiseParallel(),
                     f"blocks.{i}.mlp.fc1": ColwiseParallel(), f"blocks.{i}.mlp.fc2": RowwiseParallel()})
    theirs = parallelize_module(ToyTransformer(cfg, seed=0), mesh, plan)
    ours = tensor_parallel_toy(ToyTransformer(cfg, seed=0), dims)

    def full(t):  # communication (theirs): all-gather a sharded DTensor to the whole tensor
        return t.full_tensor() if isinstance(t, DTensor) else t.detach().clone()

    out = {}
    # one block, the same input and upstream gradient on both
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, generator=torch.Generator().manual_seed(3))
    upstream = torch.randn(x.shape, dtype=cfg.dtype, generator=torch.Generator().manual_seed(4))
    for who, model in (("ours", ours), ("theirs", theirs)):
        xi = x.clone().requires_grad_()
        y = model.blocks[0](xi)
        assert type(y) is torch.Tensor  # use_local_output=True: plain tensors leave the block
        y.backward(upstream)
        out[who] = {"y": y.detach(), "x.grad": xi.grad,
                    "grads": {n: full(p.grad) for n, p in model.blocks[0].named_parameters()}}
        model.zero_grad()

    out["ours"]["losses"] = train_steps(ours, [make_batch(cfg, batch, seed=s) for s in range(steps)], lr=lr)
    out["theirs"]["losses"] = train_steps(theirs, [make_batch(cfg, batch, seed=s) for s in range(steps)], lr=lr)
    out["ours"]["state"] = ours.state_dict()
    out["theirs"]["state"] = {n: full(p) for n, p in theirs.state_dict().items()}
    return out


@pytest.fixture(scope="module")
def torch_run():
    tp = 2
    results = _launch(_ours_and_torchs, tp, CFG, STEPS, BATCH, LR)
    reference = ToyTransformer(CFG, seed=0)
    losses = train_steps(reference, _batches(), lr=LR, optimizer="sgd")
    return tp, results, reference, losses


@pytest.mark.slow
def test_block_forward_and_gradients_equal_parallelize_modules(torch_run):
    tp, results, reference, _ = torch_run
    # the block's output and input gradient: the same on every rank, for both
    for r in results:
        torch.testing.assert_close(r["ours"]["y"], r["theirs"]["y"], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(r["ours"]["x.grad"], r["theirs"]["x.grad"], rtol=1e-12, atol=1e-14)
    # parameter gradients: our shards gathered, theirs already gathered (full_tensor)
    ours = gather_block_state([r["ours"]["grads"] for r in results])
    for name, value in results[0]["theirs"]["grads"].items():
        torch.testing.assert_close(ours[name], value, rtol=1e-12, atol=1e-14, msg=lambda m: f"{name}: {m}")


@pytest.mark.slow
def test_two_steps_with_parallelize_module_equal_ours_and_one_process(torch_run):
    tp, results, reference, losses = torch_run
    ours = gather_model_state([r["ours"]["state"] for r in results])
    for r in results:
        assert r["ours"]["losses"] == pytest.approx(losses, rel=1e-12, abs=0)
        assert r["theirs"]["losses"] == pytest.approx(losses, rel=1e-12, abs=0)
        for name, value in reference.state_dict().items():
            torch.testing.assert_close(r["theirs"]["state"][name], value, rtol=1e-12, atol=1e-14,
                                       msg=lambda m: f"parallelize_module, {name}: {m}")
            torch.testing.assert_close(ours[name], r["theirs"]["state"][name], rtol=1e-12, atol=1e-14,
                                       msg=lambda m: f"ours vs parallelize_module, {name}: {m}")
