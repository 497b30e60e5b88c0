"""Tensor parallelism (threeaxes.tensor_parallel) in one process: the shard layout, shard ->
gather round trips, the error messages, and the block's arithmetic redone by hand from the
shards; on one rank, the block and the conjugate maps are exactly the toy's."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensor_parallel_helpers import BATCH, CFG, LR, sgd_step, toy_batches

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
from threeaxes.toy import Block, ToyTransformer, lm_loss, train_steps


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


def test_sgd_step_is_torch_sgd():
    ours, theirs = ToyTransformer(CFG, seed=3), ToyTransformer(CFG, seed=3)
    batches = toy_batches()
    for inputs, targets in batches:
        ours.zero_grad()
        lm_loss(ours(inputs), targets).backward()
        sgd_step(ours, LR)
    train_steps(theirs, batches, lr=LR, optimizer="sgd")
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(p, q), name
