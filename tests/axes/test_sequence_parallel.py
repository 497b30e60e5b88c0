"""Sequence parallelism (threeaxes.tensor_parallel.sequence) and the per-layer trace of
tensor parallelism (threeaxes.tensor_parallel.measure).

Proved against one process and against PyTorch's own SequenceParallel
(parallelize_module with ColwiseParallel / RowwiseParallel(output_layouts=Shard(1)) /
SequenceParallel / PrepareModuleInput on mesh["tp"]), float64, on 2 and 4 ranks.
The collectives of every block, their bytes, the wire bytes and the activation
bytes each rank keeps are checked against counts derived by hand below.

Three launches per tp (ours TP, ours TP+SP, PyTorch TP+SP), shared by every test.
"""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch

from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.dims import ParallelDims
from threeaxes.tensor_parallel import (
    SequenceParallelBlock,
    gather_from_sequence_region,
    gather_model_state,
    reduce_scatter_to_sequence_region,
    scatter_to_sequence_region,
    sequence_parallel_toy,
)
from threeaxes.tensor_parallel.measure import comms_by_layer, comms_outside_layers, tp_step
from threeaxes.tensor_parallel.torch_reference import torch_tp_step
from threeaxes.toy import Block, ToyConfig, ToyTransformer, lm_loss, make_batch

CFG = ToyConfig(dtype=torch.float64)   # b s h below: BATCH x 16 x 32
BATCH, STEPS, LR = 2, 2, 0.1
F64 = 8
S_BYTES = BATCH * CFG.seq_len * CFG.d_model * F64   # one (b, s, h) activation: 8192 bytes
BLOCKS = [f"blocks.{i}" for i in range(CFG.n_layers)]


def _batches():
    return [make_batch(CFG, BATCH, seed=step) for step in range(STEPS)]


# -- one process ----------------------------------------------------------------------------

def test_the_sequence_maps_are_the_identity_on_one_rank():
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    one_rank = ParallelDims().at(0)
    for fn in (gather_from_sequence_region, reduce_scatter_to_sequence_region, scatter_to_sequence_region):
        x.grad = None
        y = fn(x, one_rank)
        assert torch.equal(y, x)
        (3 * y).sum().backward()
        assert torch.equal(x.grad, torch.full_like(x, 3.0)), fn.__name__


def test_bad_layouts_say_what_to_change():
    four = ParallelDims(tp=4).at(0)
    short = ToyConfig(seq_len=6, dtype=torch.float64)
    with pytest.raises(ValueError) as err:
        sequence_parallel_toy(ToyTransformer(short), four)
    assert str(err.value) == ("sequence parallelism cuts seq_len=6 over tp=4 ranks, which does not "
                              "divide it; choose tp in {1, 2, 3, 6} or a seq_len that is a multiple of 4")
    with pytest.raises(ValueError, match=r"seq_len=6 over tp=4"):
        SequenceParallelBlock.from_block(Block(short), short, four)
    with pytest.raises(ValueError, match=r"tp=3 does not divide n_heads=4; choose tp in \{1, 2, 4\}"):
        sequence_parallel_toy(ToyTransformer(CFG), ParallelDims(tp=3).at(0))
    with pytest.raises(ValueError, match=r"grad='all_reduce'; choose 'reduce_scatter' when tensor-parallel"):
        gather_from_sequence_region(torch.zeros(1, 4, 2), ParallelDims().at(0), grad="all_reduce")


def test_one_rank_sequence_parallel_toy_is_the_toy():
    model = ToyTransformer(CFG, seed=3)
    sp = sequence_parallel_toy(model, ParallelDims().at(0))
    assert list(sp.state_dict()) == list(model.state_dict())
    inputs, targets = make_batch(CFG, BATCH, seed=1)
    lm_loss(model(inputs), targets).backward()
    lm_loss(sp(inputs), targets).backward()
    for (name, p), q in zip(model.named_parameters(), sp.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_an_all_gather_and_a_reduce_scatter_send_what_one_all_reduce_sends():
    # Ring algorithms (Thakur et al. 2005): all-reduce 2(t-1)/t S, all-gather and
    # reduce-scatter (t-1)/t S each. Written out for S = 8192 bytes:
    for t, all_reduce in [(2, 8192), (4, 12288), (8, 14336)]:
        assert bytes_sent_per_gpu("all_reduce", S_BYTES, t) == all_reduce
        assert (bytes_sent_per_gpu("all_gather", S_BYTES, t)
                + bytes_sent_per_gpu("reduce_scatter", S_BYTES, t)) == all_reduce


# -- real ranks -------------------------------------------------------------------------------

def _launch(fn, world_size, *args, **kwargs):
    from threeaxes.launch import launch

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return launch(fn, world_size, *args, timeout=120, **kwargs)


@pytest.fixture(scope="module", params=[2, 4], ids=["tp2", "tp4"])
def runs(request):
    tp, batches = request.param, _batches()
    single = ToyTransformer(CFG, seed=0)
    losses, first_grads = [], None
    for inputs, targets in batches:
        single.zero_grad()
        loss = lm_loss(single(inputs), targets)
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.clone() for n, p in single.named_parameters()}
        with torch.no_grad():
            for p in single.parameters():
                p.add_(p.grad, alpha=-LR)
        losses.append(loss.item())
    return {
        "tp": tp,
        "single": {"losses": losses, "grads": first_grads, "state": single.state_dict()},
        "ours_tp": _launch(tp_step, tp, CFG, batches, lr=LR),
        "ours_sp": _launch(tp_step, tp, CFG, batches, sequence_parallel=True, lr=LR),
        "torch_sp": _launch(torch_tp_step, tp, CFG, batches, sequence_parallel=True, lr=LR),
    }


def _close(got, want, what):
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13, msg=lambda m: f"{what}: {m}")


@pytest.mark.slow
def test_sequence_parallel_equals_one_process(runs):
    single, ours = runs["single"], runs["ours_sp"]
    for r in ours:
        assert r["losses"] == pytest.approx(single["losses"], rel=1e-12, abs=0)
    for key in ("grads", "state"):
        full = gather_model_state([r[key] for r in ours])  # raises if replicated copies differ
        assert sorted(full) == sorted(single[key])
        for name, value in full.items():
            _close(value, single[key][name], f"tp={runs['tp']} {key} {name}")


@pytest.mark.slow
def test_sequence_parallel_equals_pytorch_sequence_parallel(runs):
    for rank, (ours, theirs) in enumerate(zip(runs["ours_sp"], runs["torch_sp"])):
        assert ours["losses"] == pytest.approx(theirs["losses"], rel=1e-12, abs=0)
        for key in ("grads", "state"):
            assert sorted(ours[key]) == sorted(theirs[key])
            for name in ours[key]:
                _close(ours[key][name], theirs[key][name], f"rank {rank} {key} {name}")


@pytest.mark.slow
def test_pytorch_layernorm_really_ran_on_a_sequence_shard(runs):
    tp = runs["tp"]
    for theirs in runs["torch_sp"]:
        assert theirs["ln1_local_input"] == (BATCH, CFG.seq_len // tp, CFG.d_model)


@pytest.mark.slow
def test_tp_block_all_reduces_twice_forward_and_twice_backward_in_its_own_span(runs):
    # By hand (Megatron's g and f): forward, g after attention's proj and after fc2;
    # backward, f at the input of attention and of the MLP. Each is one (b, s, h).
    tp = runs["tp"]
    for rank, r in enumerate(runs["ours_tp"]):
        for t in r["traces"]:
            rows = comms_by_layer(t, rank, BLOCKS)
            assert [(row["layer"], row["pass"]) for row in rows] == (
                [(b, "forward") for b in BLOCKS] + [(b, "backward") for b in reversed(BLOCKS)])
            for row in rows:
                assert row["collectives"] == ["all_reduce", "all_reduce"]
                assert row["bytes"] == 2 * S_BYTES
                assert row["wire_bytes"] == 2 * (2 * (tp - 1) / tp * S_BYTES)
                assert row["compute_seconds"] >= 0 and row["comm_seconds"] > 0
            assert comms_outside_layers(t, rank, BLOCKS) == []  # every tp collective sits in a block
            assert t.count("all_reduce", "tp") == 4 * CFG.n_layers


@pytest.mark.slow
def test_sp_block_all_gathers_and_reduce_scatters_the_same_wire_bytes(runs):
    # By hand: forward, per sublayer an all-gather before the column-parallel layer and a
    # reduce-scatter after the row-parallel one; backward, their conjugates, MLP first:
    # fc2's reduce-scatter -> all-gather, the input gather -> reduce-scatter, then attention.
    tp = runs["tp"]
    per_pass = ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    for rank, (sp, plain) in enumerate(zip(runs["ours_sp"], runs["ours_tp"])):
        for t, t_plain in zip(sp["traces"], plain["traces"]):
            rows = comms_by_layer(t, rank, BLOCKS)
            for row, row_plain in zip(rows, comms_by_layer(t_plain, rank, BLOCKS)):
                assert row["collectives"] == per_pass
                assert row["bytes"] == 4 * S_BYTES  # each collective is about a whole (b, s, h)
                assert row["wire_bytes"] == 4 * ((tp - 1) / tp * S_BYTES) == row_plain["wire_bytes"]
            # outside the blocks: the gather before ln_f, the embeddings' gradient gather,
            # and one all-reduce of the partial LayerNorm and row-bias gradients:
            # per block ln1, ln2 (2 x 2h) and proj.bias, fc2.bias (2 x h) = 6h values
            outside = [(c.op, c.bytes) for c in comms_outside_layers(t, rank, BLOCKS)]
            assert outside == [("all_gather", S_BYTES), ("all_gather", S_BYTES),
                               ("all_reduce", CFG.n_layers * 6 * CFG.d_model * F64)]


@pytest.mark.slow
def test_activations_between_blocks_and_in_layernorms_are_divided_by_tp(runs):
    tp = runs["tp"]
    b, s, h = BATCH, CFG.seq_len, CFG.d_model
    for sp, plain in zip(runs["ours_sp"], runs["ours_tp"]):
        for block in BLOCKS:
            # the block's input: (b, s, h) under TP, (b, s/t, h) under SP
            assert plain["activations"][block]["input"] == S_BYTES
            assert sp["activations"][block]["input"] == S_BYTES // tp
            for ln in ("ln1", "ln2"):
                # LayerNorm keeps its input and one mean and one 1/std per position
                assert plain["activations"][f"{block}.{ln}"]["saved"] == (b * s * h + 2 * b * s) * F64
                assert sp["activations"][f"{block}.{ln}"]["saved"] * tp == (b * s * h + 2 * b * s) * F64
            # attention and the MLP keep the same under both: their column-parallel
            # layers save the all-gathered (b, s, h) input (Megatron would re-gather it)
            for part in ("attn", "mlp"):
                assert (sp["activations"][f"{block}.{part}"]["saved"]
                        == plain["activations"][f"{block}.{part}"]["saved"])


# -- drop 6's grading reference -----------------------------------------------------------------

@pytest.mark.slow
def test_drop06_reference_wire_bytes_equal_the_trace(runs):
    from autograder.references import drop06

    tp = runs["tp"]
    for key, sp in (("ours_tp", False), ("ours_sp", True)):
        for rank, r in enumerate(runs[key]):
            for block in BLOCKS:
                measured = sum(row["wire_bytes"] for row in comms_by_layer(r["traces"][-1], rank, [block]))
                assert drop06.expected_wire_bytes(BATCH, CFG.seq_len, CFG.d_model, tp, F64, sp) == measured


def test_drop06_names_the_usual_byte_counting_mistakes():
    from autograder.references import drop06

    s = 2 * 16 * 32 * 8  # S = b s h bytes = 8192; by hand for t = 4, per block and step:
    # TP: 4 all-reduces x 2(3/4) S = 6 S; TP + SP: 8 (all-gathers, reduce-scatters) x (3/4) S = 6 S
    args = (2, 16, 32, 4, 8)
    assert drop06.wire_bytes_mistake(6 * s, *args, False) is None
    assert drop06.wire_bytes_mistake(6 * s, *args, True) is None
    assert "only the forward" in drop06.wire_bytes_mistake(3 * s, *args, False)
    assert "tensor size S" in drop06.wire_bytes_mistake(4 * s, *args, False)
    assert "tensor size S" in drop06.wire_bytes_mistake(8 * s, *args, True)
    assert "forgot the (t-1)/t" in drop06.wire_bytes_mistake(8 * s, *args, False)
    assert "counted each as an all-reduce" in drop06.wire_bytes_mistake(12 * s, *args, True)
    assert "nothing is sent" in drop06.wire_bytes_mistake(4 * s, 2, 16, 32, 1, 8, False)
    with pytest.raises(AssertionError, match="should be a number"):
        drop06.wire_bytes_mistake("49152", *args, False)
