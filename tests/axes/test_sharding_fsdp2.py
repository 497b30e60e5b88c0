"""threeaxes.sharding's ZeRO-3 (`fully_shard`) equals FSDP2's `fully_shard`, and its state
loads back.

On 2 and 4 gloo ranks, float64, for AdamW and for SGD with momentum, on the small
language model of sharding_pytorch_helpers with and without a tied embedding (two launches
per world size run every case; each test reads its case), with the same kinds of groups
as ZeRO-1 and ZeRO-2 (tests/axes/test_sharding_pytorch.py), by unit: the root's shard and
the frozen scale, the norm's unit at another rate, the never-run unit, and the mix unit
added after the first step. After 3 steps ZeRO-3 equals FSDP2 and one process (the same
modules' parameters) to 1e-12; its `gathered_state` loads back with `load_gathered_state`,
its optimizer's state with PyTorch's own, and step 3 comes out the same.
"""
from __future__ import annotations

import copy
import sys

import cloudpickle
import pytest
import torch
from sharding_pytorch_helpers import (
    CASES,
    LRS,
    OPTIMIZERS,
    TinyLM,
    assert_params_close,
    batches,
    case_id,
    launch_each,
    loss_of,
    my_slice,
    params_of,
)

# -- on the ranks ----------------------------------------------------------------------
UNITS = ("mix", "norm", "unused")   # each its own unit (unused: one that never runs), then the root


def zero3_groups(model):
    """By unit, the same modules' parameters whether sharded (ours: each unit's flat
    shard; FSDP2: DTensors) or not: the root's (tied head and embedding, the frozen scale),
    the norm's at another rate, the never-run unit's; the mix unit's come later."""
    inner = {id(p) for name in UNITS for p in getattr(model, name).parameters()}
    return [{"params": [p for p in model.parameters() if id(p) not in inner], "lr": LRS[0]},
            {"params": list(model.norm.parameters()), "lr": LRS[1]},
            {"params": list(model.unused.parameters())}]


def added_zero3_group(model):
    return {"params": list(model.mix.parameters()), "lr": LRS[2]}


def _sharded(tied, shard):
    model = TinyLM(tied)
    for name in UNITS:
        shard(getattr(model, name))
    shard(model)
    return model


def _train_zero3(rank, world_size, kind, tied, data):
    """ZeRO-3 and FSDP2 with zero3_groups; ZeRO-3's whole parameters and optimizer state
    after step 2."""
    from torch.distributed.fsdp import fully_shard as fsdp2_fully_shard

    from threeaxes import sharding

    cls, kwargs = OPTIMIZERS[kind]
    out = {}
    for variant, shard in (("zero3", sharding.fully_shard), ("fsdp2", fsdp2_fully_shard)):
        model = _sharded(tied, shard)
        opt = cls(zero3_groups(model), **kwargs)
        for step, (inputs, targets) in enumerate(data):
            if step == 2 and variant == "zero3":
                out["state2"] = sharding.gathered_state(model)
                out["optim2"] = copy.deepcopy(opt.state_dict())
            opt.zero_grad()
            loss_of(model, *my_slice(inputs, targets)).backward()
            opt.step()
            if step == 0:
                opt.add_param_group(added_zero3_group(model))
        if variant == "zero3":
            out[variant] = sharding.gathered_state(model)
        else:
            out[variant] = {n: p.full_tensor().detach().clone()
                            for n, p in model.named_parameters(remove_duplicate=False)}
    return out


def _resume_zero3(rank, world_size, kind, tied, inputs, targets, state2, optim2):
    from threeaxes import sharding

    cls, kwargs = OPTIMIZERS[kind]
    model = _sharded(tied, sharding.fully_shard)
    sharding.load_gathered_state(model, state2)
    opt = cls(zero3_groups(model), **kwargs)
    opt.add_param_group(added_zero3_group(model))
    opt.load_state_dict(optim2[rank])   # each rank its own shard's state
    opt.zero_grad()
    loss_of(model, *my_slice(inputs, targets)).backward()
    opt.step()
    return sharding.gathered_state(model)


# -- one process: the reference -----------------------------------------------------------
def _reference_zero3(kind, tied, data):
    cls, kwargs = OPTIMIZERS[kind]
    model = TinyLM(tied)
    opt = cls(zero3_groups(model), **kwargs)
    for step, (inputs, targets) in enumerate(data):
        opt.zero_grad()
        loss_of(model, inputs, targets).backward()
        opt.step()
        if step == 0:
            opt.add_param_group(added_zero3_group(model))
    return params_of(model)


_LAUNCHED = {}   # world size -> every case's results: two launches per world size


def _launched(n):
    if n not in _LAUNCHED:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        data, cases = batches(), [(kind, tied) for kind in OPTIMIZERS for tied in (False, True)]
        zero3 = launch_each(n, _train_zero3, {c: (*c, data) for c in cases})
        _LAUNCHED[n] = {"zero3": zero3, "resumed3": launch_each(n, _resume_zero3, {
            c: (*c, *data[2], zero3[c][0]["state2"], [r["optim2"] for r in zero3[c]]) for c in cases})}
    return _LAUNCHED[n]


@pytest.fixture(scope="module", params=CASES, ids=case_id)
def runs(request):
    n, kind, tied = request.param
    data, launched = batches(), _launched(n)
    return {**{key: launched[key][(kind, tied)] for key in ("zero3", "resumed3")},
            "reference_zero3": _reference_zero3(kind, tied, data), "start": params_of(TinyLM(tied)),
            "tied": tied}


@pytest.mark.slow
def test_zero3_with_groups_tied_and_frozen_parameters_equals_fsdp2_and_loads_back(runs):
    reference, start = runs["reference_zero3"], runs["start"]
    assert (reference["mix.bias"] - start["mix.bias"]).abs().max() > 1e-4   # the added group trained
    for rank, out in enumerate(runs["zero3"]):
        assert_params_close(out["zero3"], reference, f"rank {rank}, ZeRO-3")
        assert_params_close(out["fsdp2"], reference, f"rank {rank}, FSDP2")
        for name in ("scale", "unused.weight", "unused.bias"):   # frozen; never run
            assert torch.equal(out["zero3"][name], start[name]), (rank, name)
        if runs["tied"]:   # gathered once, under both names
            assert torch.equal(out["zero3"]["head.weight"], out["zero3"]["embed.weight"])
        assert_params_close(runs["resumed3"][rank], out["zero3"], f"rank {rank}, ZeRO-3 resumed")
