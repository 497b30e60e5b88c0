"""Tensor parallelism (threeaxes.tensor_parallel) on real gloo ranks, proved against one
process: the whole toy model with tp=4 on 4 ranks, and `ParallelDims.init(dp=2, tp=2)` on
4 ranks (two independent tp groups, each training its own data: this proves the collectives
stay inside their tp group). One launch each, read by every test here."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from tensor_parallel_helpers import BATCH, CFG, F64, LR, STEPS, launch_by_value, sgd_step, toy_batches

from threeaxes.tensor_parallel import TPBlock, gather_model_state, layout_of, tensor_parallel_toy
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch, train_steps


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
        sgd_step(model, lr)
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


@pytest.fixture(scope="module", params=[(1, 4), (2, 2)], ids=["tp4", "dp2xtp2"])
def tp_run(request):
    dp, tp = request.param
    results = launch_by_value(_tp_training, dp * tp, dp, tp, CFG, STEPS, BATCH, LR)
    references = {}
    for d in range(dp):
        reference = ToyTransformer(CFG, seed=0)
        losses = train_steps(reference, toy_batches(offset=100 * d), lr=LR, optimizer="sgd")
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
