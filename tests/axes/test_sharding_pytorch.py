"""threeaxes.sharding's ZeRO-1 and ZeRO-2 take what ZeroRedundancyOptimizer takes, and their
state moves like it.

On 2 and 4 gloo ranks, float64, with no ParallelDims layout (the default
process group is the dp axis, as in PyTorch), for AdamW and for SGD with
momentum, on a small language model with and without a tied embedding (two
launches per world size run every case; each test reads its case):

* parameter groups with their own learning rates, a frozen parameter inside a
  group, a group whose parameters never get a gradient, and a group added with
  `add_param_group` after the first step;
* after 3 steps ZeRO-1 and ZeRO-2 equal `ZeroRedundancyOptimizer` and one
  process with the plain optimizer to 1e-12;
* ZeRO-1's `consolidate_state_dict(to=0)` + `state_dict()` after step 2 is
  ZeroRedundancyOptimizer's, key for key and tensor for tensor; loaded into
  fresh ranks (`load_state_dict` on every rank) it gives step 3 exactly, and
  so does ZeroRedundancyOptimizer's dict, and ours loads into it; ZeRO-2's own
  consolidated dict resumes it exactly too.

ZeRO-3 against FSDP2 is tests/axes/test_sharding_fsdp2.py.
"""
from __future__ import annotations

import copy
import sys

import cloudpickle
import pytest
import torch
import torch.nn as nn
from sharding_pytorch_helpers import (
    CASES,
    LRS,
    OPTIMIZERS,
    TinyLM,
    added_group,
    assert_params_close,
    average_gradients,
    batches,
    case_id,
    groups,
    launch_each,
    loss_of,
    my_slice,
    params_of,
)

from threeaxes.launch import launch


# -- on the ranks ----------------------------------------------------------------------
def _make(variant, model, kind):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from threeaxes import sharding

    cls, kwargs = OPTIMIZERS[kind]
    if variant == "zero1":
        return sharding.ZeroOptimizer(groups(model), cls, bucket_bytes=256, **kwargs)
    if variant == "zero2":
        # ZeRO-2 reduces every bucket from backward, a wholly unused one as zeros (as
        # DataParallel does), so the unused layer is left out of its optimizer here
        return sharding.Zero2Optimizer(groups(model, unused=False), cls, bucket_bytes=256, **kwargs)
    return ZeroRedundancyOptimizer(groups(model), optimizer_class=cls, **kwargs)


def _step(variant, model, opt, inputs, targets):
    opt.zero_grad()
    loss_of(model, *my_slice(inputs, targets)).backward()
    if variant != "zero2":
        average_gradients(model)
    opt.step()


def _train_zero(rank, world_size, kind, tied, data):
    """Every variant for 3 steps; each one's consolidated state and the parameters after
    step 2; the parameters after step 3."""
    out = {}
    for variant in ("zero1", "zero2", "zero_ro"):
        model = TinyLM(tied)
        opt = _make(variant, model, kind)
        for step, (inputs, targets) in enumerate(data):
            if step == 2:
                out[f"{variant}_params2"] = params_of(model)
                opt.consolidate_state_dict(to=0)
                # a copy: ZeroRedundancyOptimizer's dict holds rank 0's live CPU state tensors
                out[f"{variant}_state2"] = copy.deepcopy(opt.state_dict()) if rank == 0 else None
            _step(variant, model, opt, inputs, targets)
            if step == 0:
                opt.add_param_group(added_group(model))
        out[variant] = params_of(model)
    return out


def _resume(rank, world_size, kind, tied, inputs, targets, states):
    """Fresh ranks: the parameters after step 2, each state dict loaded, one more step."""
    out = {}
    for label, (variant, params2, state) in states.items():
        model = TinyLM(tied)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params2[name])
        opt = _make(variant, model, kind)
        opt.add_param_group(added_group(model))
        opt.load_state_dict(copy.deepcopy(state))   # ZeroRedundancyOptimizer edits what it loads
        _step(variant, model, opt, inputs, targets)
        out[label] = params_of(model)
    return out


# -- one process: the reference -----------------------------------------------------------
def _reference(kind, tied, data, unused=True):
    cls, kwargs = OPTIMIZERS[kind]
    model = TinyLM(tied)
    opt = cls(groups(model, unused), **kwargs)
    for step, (inputs, targets) in enumerate(data):
        opt.zero_grad()
        loss_of(model, inputs, targets).backward()
        opt.step()
        if step == 0:
            opt.add_param_group(added_group(model))
    return params_of(model)


def _assert_same_state_dict(got, want, label):
    assert [g["params"] for g in got["param_groups"]] == [g["params"] for g in want["param_groups"]]
    for g, w in zip(got["param_groups"], want["param_groups"]):
        assert {k: v for k, v in g.items() if k != "params"} == \
            {k: v for k, v in w.items() if k != "params"}, label
    assert list(got["state"]) == list(want["state"]), label
    for index, state in want["state"].items():
        assert list(got["state"][index]) == list(state), (label, index)
        for key, value in state.items():
            torch.testing.assert_close(got["state"][index][key], value, rtol=1e-12, atol=1e-12,
                                       msg=lambda m: f"{label}, state {index} {key}: {m}")


_LAUNCHED = {}   # world size -> every case's results: two launches per world size


def _launched(n):
    if n not in _LAUNCHED:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        data, cases = batches(), [(kind, tied) for kind in OPTIMIZERS for tied in (False, True)]
        trained = launch_each(n, _train_zero, {c: (*c, data) for c in cases})
        resume_jobs = {}
        for c in cases:
            first = trained[c][0]
            states = {"ours": ("zero1", first["zero1_params2"], first["zero1_state2"]),
                      "ours_from_theirs": ("zero1", first["zero1_params2"], first["zero_ro_state2"]),
                      "theirs_from_ours": ("zero_ro", first["zero1_params2"], first["zero1_state2"]),
                      "zero2": ("zero2", first["zero2_params2"], first["zero2_state2"])}
            resume_jobs[c] = (*c, *data[2], states)
        _LAUNCHED[n] = {"trained": trained, "resumed": launch_each(n, _resume, resume_jobs)}
    return _LAUNCHED[n]


@pytest.fixture(scope="module", params=CASES, ids=case_id)
def runs(request):
    n, kind, tied = request.param
    data, launched = batches(), _launched(n)
    return {**{key: launched[key][(kind, tied)] for key in ("trained", "resumed")},
            "reference": _reference(kind, tied, data), "start": params_of(TinyLM(tied)),
            "tied": tied}


@pytest.mark.slow
def test_zero1_and_zero2_equal_zero_redundancy_optimizer_and_one_process(runs):
    reference, start = runs["reference"], runs["start"]
    for rank, out in enumerate(runs["trained"]):
        for variant in ("zero1", "zero2", "zero_ro"):
            assert_params_close(out[variant], reference, f"rank {rank}, {variant}")
        assert torch.equal(out["zero1"]["scale"], start["scale"])              # frozen: never stepped
        assert torch.equal(out["zero1"]["unused.weight"], start["unused.weight"])   # no gradient: skipped
    assert (reference["mix.bias"] - start["mix.bias"]).abs().max() > 1e-4   # the added group trained


@pytest.mark.slow
def test_consolidated_state_dict_is_zero_redundancy_optimizers(runs):
    trained = runs["trained"]
    ours, theirs = trained[0]["zero1_state2"], trained[0]["zero_ro_state2"]
    _assert_same_state_dict(ours, theirs, "ZeRO-1 vs ZeroRedundancyOptimizer after step 2")
    # by hand: four groups, the third (the unused layer's) with torch's default lr for
    # AdamW and SGD, 1e-3; the frozen scale (index 2 when the head is the embedding, else 3)
    # and the unused layer (the next two indices) have no state
    assert [g["lr"] for g in ours["param_groups"]] == [LRS[0], LRS[1], 1e-3, LRS[2]]
    frozen = 2 if runs["tied"] else 3
    assert [len(g["params"]) for g in ours["param_groups"]] == [frozen + 1, 2, 2, 1]
    assert sorted(ours["state"]) == [i for i in range(frozen + 6) if i not in (frozen, frozen + 3, frozen + 4)]
    assert all(trained[r]["zero1_state2"] is None for r in range(1, len(trained)))


@pytest.mark.slow
def test_a_run_resumed_from_a_consolidated_state_dict_continues_exactly(runs):
    for rank, (out, resumed) in enumerate(zip(runs["trained"], runs["resumed"])):
        for label in ("ours", "ours_from_theirs"):
            assert_params_close(resumed[label], out["zero1"], f"rank {rank}, resumed {label}")
        for variant, label in (("zero1", "ours"), ("zero2", "zero2")):
            for name, value in out[variant].items():
                assert torch.equal(resumed[label][name], value), (rank, variant, name)   # bit for bit
        assert_params_close(resumed["theirs_from_ours"], out["zero_ro"], f"rank {rank}, ZeRO-RO from ours")


def _partly_used(rank, world_size):
    from threeaxes import sharding

    torch.manual_seed(0)
    used, idle, skipped = (nn.Linear(3, 3, dtype=torch.float64) for _ in range(3))
    before = {name: params_of(layer) for name, layer in (("idle", idle), ("skipped", skipped))}
    opt = sharding.ZeroOptimizer([{"params": [*used.parameters(), *idle.parameters()]},
                                  {"params": list(skipped.parameters())}],
                                 torch.optim.AdamW, lr=0.1, weight_decay=0.5)
    used(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
    average_gradients(used)
    opt.step()
    opt.consolidate_state_dict(to=0)
    state = opt.state_dict() if rank == 0 else None
    return before, {"idle": params_of(idle), "skipped": params_of(skipped)}, state


@pytest.mark.slow
def test_a_parameter_without_gradient_is_skipped_alone_in_its_bucket_else_zero():
    """The documented difference: `idle` shares a bucket with `used`, so its missing
    gradient counts as zeros and AdamW's decoupled weight decay still shrinks it, by
    (1 - lr * weight_decay) = 1 - 0.1 * 0.5 = 0.95 (its moments stay zero, so no other
    update); `skipped` is alone in its group's bucket, which is skipped as PyTorch skips it."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for before, after, state in launch(_partly_used, 2, timeout=120):
        for name, value in after["idle"].items():
            assert torch.equal(value, before["idle"][name] * (1 - 0.1 * 0.5)), name
        for name, value in after["skipped"].items():
            assert torch.equal(value, before["skipped"][name]), name
        if state is not None:   # by hand: used and idle are indices 0-3, skipped 4-5
            assert sorted(state["state"]) == [0, 1, 2, 3]
            assert torch.equal(state["state"][2]["exp_avg"], torch.zeros(3, 3, dtype=torch.float64))
