"""Drops 2-4 grade a student's rank code in two steps: the ranks (in the student's
kernel) send back raw results, the grader compares them with a reference it
computes itself. Here each verdict gets results built by hand in this test (the
right ones, each typical mistake, a forged approval) and must name what is
wrong; the slow tests run the rank half on real ranks."""
import sys

import cloudpickle
import pytest
import torch

from autograder.references import drop02, drop03, drop04
from threeaxes.grading import check_on_ranks, plain_tensor
from threeaxes.toy import ToyTransformer, lm_loss, make_batch, train_steps

FORGED = {"ok": True, "message": "looks fine", "max_abs_diff": 0.0}


# ---------------------------------------------------------------- drop 2 ----

def _grads(rows, batch):
    """Gradients of drop 2's check model on batch[rows], by plain autograd."""
    inputs, targets = batch
    model = ToyTransformer(drop02.CHECK_CONFIG, seed=0)
    lm_loss(model(inputs[rows]), targets[rows]).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _dp_results(grads_of_rank, n=3):
    """What the ranks send back: each gradient flattened to floats, and its shape."""
    def plain(grads):
        return {"grads": {k: None if v is None else v.reshape(-1).tolist() for k, v in grads.items()},
                "shapes": {k: None if v is None else list(v.shape) for k, v in grads.items()}}
    return [{"rank": r, "error": None, **plain(grads_of_rank(r))} for r in range(n)]


@pytest.fixture(scope="module")
def dp3():
    """3 ranks, 2 examples each, batch seed 11: the whole batch's and each rank's gradients."""
    batch = make_batch(drop02.CHECK_CONFIG, 6, seed=11)
    whole = _grads(slice(None), batch)
    local = [_grads(slice(2 * r, 2 * r + 2), batch) for r in range(3)]
    return whole, local


def test_dp_verdict_passes_the_whole_batch_gradient_on_every_rank(dp3):
    whole, _ = dp3
    assert drop02.average_gradients_mistake(_dp_results(lambda r: whole), 3, 2, 11) is None


@pytest.mark.parametrize("wrong, phrase", [
    (lambda whole, local, r: {k: 3 * v for k, v in whole.items()}, "3x too large"),
    (lambda whole, local, r: local[r], "still holds its own local gradient"),
    (lambda whole, local, r: {k: v / 3 for k, v in local[r].items()}, "never combined the ranks"),
    (lambda whole, local, r: {k: v + 1e-9 for k, v in whole.items()}, "agree with each other"),
    (lambda whole, local, r: {k: v + 1e-6 * r for k, v in whole.items()}, "different gradients"),
    (lambda whole, local, r: {**whole, "head.weight": None}, "head.weight has no gradient"),
])
def test_dp_verdict_names_each_mistake(dp3, wrong, phrase):
    whole, local = dp3
    results = _dp_results(lambda r: wrong(whole, local, r))
    assert phrase in drop02.average_gradients_mistake(results, 3, 2, 11)


def test_dp_verdict_refuses_a_forged_approval_and_reports_an_error(dp3):
    assert "instead of its gradients" in drop02.average_gradients_mistake([FORGED] * 3, 3, 2, 11)
    raised = [{"rank": r, "error": "KeyError: 'dp'", "grads": {}, "shapes": {}} for r in range(3)]
    assert "raised KeyError: 'dp'" in drop02.average_gradients_mistake(raised, 3, 2, 11)
    assert "one result from each of 3 ranks" in drop02.average_gradients_mistake(FORGED, 3, 2, 11)


# ---------------------------------------------------------------- drop 3 ----

TP, TOKENS, D_IN, D_OUT, SEED = 3, 2, 6, 9, 5


def _column_results(make):
    """Each rank's result, its outputs made by make(x, w, r) from the exercise's x and w."""
    gen = torch.Generator().manual_seed(SEED)                 # exercise_tensors, written out
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64, generator=gen)
    w = torch.randn(D_IN, D_OUT, dtype=torch.float64, generator=gen)
    return [{"rank": r, "error": None, "returned": "tuple", "outputs": [plain_tensor(v) for v in make(x, w, r)],
             "collectives": [["all_gather", "tp", TOKENS * D_OUT * 8]]} for r in range(TP)]


def _by_columns(x, w, r):
    c = D_OUT // TP
    return w[:, r * c:(r + 1) * c], x @ w[:, r * c:(r + 1) * c], x @ w


def test_column_verdict_passes_the_column_split():
    assert drop03.column_split_mistake(_column_results(_by_columns), TP, TOKENS, D_IN, D_OUT, SEED) is None


def _by_rows(x, w, r):
    k = D_IN // TP
    return w[r * k:(r + 1) * k], x[:, r * k:(r + 1) * k] @ w[r * k:(r + 1) * k], x @ w


@pytest.mark.parametrize("make, phrase", [
    (_by_rows, "that is the row split, not the column split"),
    (lambda x, w, r: (_by_columns(x, w, r)[0].T, *_by_columns(x, w, r)[1:]), "transposed"),
    (lambda x, w, r: _by_columns(x, w, (r + 1) % TP), "holds the columns of rank"),
    (lambda x, w, r: (*_by_columns(x, w, r)[:2], (x @ w).T), "side by side"),
    (lambda x, w, r: _by_columns(x, w, r)[:2], "return three tensors"),
    (lambda x, w, r: (*_by_columns(x, w, r)[:2], "y"), "y should be a torch.Tensor, got str"),
])
def test_column_verdict_names_each_mistake(make, phrase):
    assert phrase in drop03.column_split_mistake(_column_results(make), TP, TOKENS, D_IN, D_OUT, SEED)


def test_column_verdict_wants_the_all_gather_and_refuses_a_forged_approval():
    results = _column_results(_by_columns)
    for r in results:
        r["collectives"] = []
    assert "without threeaxes.comms.all_gather" in drop03.column_split_mistake(
        results, TP, TOKENS, D_IN, D_OUT, SEED)
    assert "instead of its tensors" in drop03.column_split_mistake([FORGED] * TP, TP, TOKENS, D_IN, D_OUT, SEED)


# ---------------------------------------------------------------- drop 4 ----

def _trained(n_layers, seed):
    cfg = drop04.check_config(n_layers)
    model = ToyTransformer(cfg, seed=0)
    train_steps(model, [make_batch(cfg, drop04.BATCH, seed=seed)])
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _stage_results(stages, params):
    """Each stage's share of `params`: its blocks, the embeddings on the first, the head on the last."""
    results = []
    for s, layers in enumerate(stages):
        def mine(name):
            if name.startswith("blocks."):
                return int(name.split(".")[1]) in layers
            return name.startswith(("tok_embed", "pos_embed")) if s == 0 else (
                s == len(stages) - 1 and name.startswith(("ln_f", "head")))
        results.append({"rank": s, "error": None, "stages": stages,
                        "params": {k: _plain(v) for k, v in params.items() if mine(k)}})
    return results


def _plain(tensor):
    """A parameter as a rank sends it back: its shape and its values, flattened."""
    return {"shape": list(tensor.shape), "values": tensor.reshape(-1).tolist()}


def test_stage_verdict_passes_one_process_split_by_stage():
    stages = [[0, 1], [2, 3], [4, 5]]
    assert drop04.stage_split_mistake(_stage_results(stages, _trained(6, 3)), 3, 6, 2, 3) is None


def test_stage_verdict_names_each_mistake():
    params = _trained(4, 3)
    off_by_one = [[0, 1, 2], [2, 3, 4]]
    assert "exactly once" in drop04.stage_split_mistake(_stage_results(off_by_one, {}), 2, 4, 2, 3)
    moved = _stage_results([[0, 1], [2, 3]], {**params, "head.weight": params["head.weight"] + 1e-9})
    assert "head.weight after one training step differs" in drop04.stage_split_mistake(moved, 2, 4, 2, 3)
    twice = _stage_results([[0, 1], [2, 3]], params)
    twice[1]["params"]["tok_embed.weight"] = _plain(params["tok_embed.weight"])
    assert "exactly one rank" in drop04.stage_split_mistake(twice, 2, 4, 2, 3)
    assert "instead of its parameters" in drop04.stage_split_mistake([FORGED] * 2, 2, 4, 2, 3)


# -------------------------------------------------------- on real ranks ----

def _average(model, dims):
    from threeaxes import comms

    for p in model.parameters():
        comms.all_reduce(p.grad, "dp", dims=dims)      # communication: sum over the dp ranks
        p.grad /= dims.size("dp")


def _sum_only(model, dims):
    from threeaxes import comms

    for p in model.parameters():
        comms.all_reduce(p.grad, "dp", dims=dims)


def _columns(x, w, dims):
    from threeaxes import comms

    tp, r = dims.size("tp"), dims.coord("tp")
    c = w.shape[1] // tp
    y_local = x @ w[:, r * c:(r + 1) * c]
    return w[:, r * c:(r + 1) * c], y_local, comms.all_gather(y_local, "tp", dims=dims, dim=-1)


def _even_stages(n_layers, pp):
    k = n_layers // pp
    return [list(range(s * k, (s + 1) * k)) for s in range(pp)]


@pytest.fixture(scope="module")
def by_value():
    # the student functions above travel by value, so the ranks need not import this module
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_rank_halves_send_back_what_the_verdicts_pass(by_value):
    results = check_on_ranks(drop02.gradients_after_average, 3, _average, 1, 4)
    assert drop02.average_gradients_mistake(results, 3, 1, 4) is None
    results = check_on_ranks(drop02.gradients_after_average, 2, _sum_only, 1, 4)
    assert "2x too large" in drop02.average_gradients_mistake(results, 2, 1, 4)
    results = check_on_ranks(drop03.column_split_outputs, 3, _columns, 2, 3, 6, 8)
    assert drop03.column_split_mistake(results, 3, 2, 3, 6, 8) is None
    results = check_on_ranks(drop04.stage_split_params, 3, _even_stages, 6, 2, 9)
    assert drop04.stage_split_mistake(results, 3, 6, 2, 9) is None


@pytest.mark.slow
def test_tp_block_collectives_measures_two_all_reduces_each_way_of_the_whole_activation():
    from threeaxes.toy import ToyConfig

    cfg = ToyConfig(d_model=8, n_heads=4, seq_len=3, dtype=torch.float32)
    for forward, backward, sizes in check_on_ranks(drop03.tp_block_collectives, 4, cfg, 2):
        assert (forward, backward, sizes) == (2, 2, [2 * 3 * 8 * 4])   # (batch, seq, d_model) x 4 B
