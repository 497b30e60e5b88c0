"""threeaxes.sharding takes what PyTorch's sharding takes, and its state moves like PyTorch's.

On 2 and 4 gloo ranks, float64, with no ParallelDims layout (the default
process group is the dp axis, as in PyTorch), for AdamW and for SGD with
momentum, on a small language model with and without a tied embedding (four
launches per world size run every case; each test reads its case):

* parameter groups with their own learning rates, a frozen parameter inside a
  group, a group whose parameters never get a gradient, and a group added with
  `add_param_group` after the first step;
* after 3 steps ZeRO-1 and ZeRO-2 equal `ZeroRedundancyOptimizer` and one
  process with the plain optimizer to 1e-12; ZeRO-3 (`fully_shard`) equals
  FSDP2's `fully_shard` and one process;
* ZeRO-3 runs with the same kinds of groups, by unit: the root's shard and the
  frozen scale, the norm's unit at another rate, the never-run unit, and the mix
  unit added after the first step (FSDP2 and one process: the same modules' parameters);
* ZeRO-1's `consolidate_state_dict(to=0)` + `state_dict()` after step 2 is
  ZeroRedundancyOptimizer's, key for key and tensor for tensor; loaded into
  fresh ranks (`load_state_dict` on every rank) it gives step 3 exactly, and
  so does ZeroRedundancyOptimizer's dict, and ours loads into it; ZeRO-2's own
  consolidated dict resumes it exactly too; ZeRO-3's `gathered_state` loads
  back with `load_gathered_state`, its optimizer's state with PyTorch's own.
"""
from __future__ import annotations

import copy
import sys

import cloudpickle
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from threeaxes.launch import launch

VOCAB, WIDTH, SEQ, BATCH, STEPS = 11, 6, 5, 8, 3
OPTIMIZERS = {"adamw": (torch.optim.AdamW, {"weight_decay": 0.1}),
              "sgd": (torch.optim.SGD, {"momentum": 0.9, "weight_decay": 0.01})}
LRS = (1e-2, 3e-3, 5e-3)   # group 0, group 1, the group added after step 1


class TinyLM(nn.Module):
    """Embedding -> (x frozen scale) -> residual tanh(Linear) -> LayerNorm -> head.
    `tied`: the head's weight is the embedding's. `unused` gets no gradient, ever."""

    def __init__(self, tied: bool):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, WIDTH, dtype=torch.float64)
        self.scale = nn.Parameter(torch.rand(WIDTH, dtype=torch.float64) + 0.5, requires_grad=False)
        self.mix = nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
        self.norm = nn.LayerNorm(WIDTH, dtype=torch.float64)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False, dtype=torch.float64)
        self.unused = nn.Linear(WIDTH, 2, dtype=torch.float64)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens) * self.scale
        h = h + torch.tanh(self.mix(h))
        return self.head(self.norm(h))


def groups(model, unused=True):
    """Two groups (the frozen scale inside the first), the unused layer's own group;
    the head's weight is listed once when it is the embedding's."""
    first = list(dict.fromkeys([model.embed.weight, model.head.weight, model.mix.weight, model.scale]))
    out = [{"params": first, "lr": LRS[0]},
           {"params": [model.norm.weight, model.norm.bias], "lr": LRS[1]}]
    if unused:
        out.append({"params": list(model.unused.parameters())})
    return out


def added_group(model):
    return {"params": [model.mix.bias], "lr": LRS[2]}


def batches():
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=g)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def loss_of(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}


# -- on the ranks ----------------------------------------------------------------------

def _average_gradients(model):
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:   # a parameter nothing used keeps no gradient, as in PyTorch
            # communication: sum this gradient over every rank (the default group)
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def _my_slice(inputs, targets):
    import torch.distributed as dist

    n, r = dist.get_world_size(), dist.get_rank()
    per = inputs.shape[0] // n
    return inputs[r * per:(r + 1) * per], targets[r * per:(r + 1) * per]


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
    loss_of(model, *_my_slice(inputs, targets)).backward()
    if variant != "zero2":
        _average_gradients(model)
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
            loss_of(model, *_my_slice(inputs, targets)).backward()
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
    loss_of(model, *_my_slice(inputs, targets)).backward()
    opt.step()
    return sharding.gathered_state(model)


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


def _assert_close(got, want, label):
    assert got.keys() == want.keys(), label
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12,
                                   msg=lambda m: f"{label}, {name}: {m}")


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


CASES = [(n, kind, tied) for n in (2, 4) for kind in OPTIMIZERS for tied in (False, True)]


def _id(case):
    n, kind, tied = case
    return f"dp{n}-{kind}-{'tied' if tied else 'untied'}"


def _each(rank, world_size, fn, jobs):
    """On the ranks: `fn` for every job, so that one launch serves every case of a world size."""
    return {key: fn(rank, world_size, *args) for key, args in jobs.items()}


def _launch_each(n, fn, jobs):
    per_rank = launch(_each, n, fn, jobs, timeout=120)
    return {key: [out[key] for out in per_rank] for key in jobs}


_LAUNCHED = {}   # world size -> every case's results: four launches per world size


def _launched(n):
    if n not in _LAUNCHED:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        data, cases = batches(), [(kind, tied) for kind in OPTIMIZERS for tied in (False, True)]
        trained = _launch_each(n, _train_zero, {c: (*c, data) for c in cases})
        resume_jobs = {}
        for c in cases:
            first = trained[c][0]
            states = {"ours": ("zero1", first["zero1_params2"], first["zero1_state2"]),
                      "ours_from_theirs": ("zero1", first["zero1_params2"], first["zero_ro_state2"]),
                      "theirs_from_ours": ("zero_ro", first["zero1_params2"], first["zero1_state2"]),
                      "zero2": ("zero2", first["zero2_params2"], first["zero2_state2"])}
            resume_jobs[c] = (*c, *data[2], states)
        zero3 = _launch_each(n, _train_zero3, {c: (*c, data) for c in cases})
        _LAUNCHED[n] = {
            "trained": trained, "resumed": _launch_each(n, _resume, resume_jobs), "zero3": zero3,
            "resumed3": _launch_each(n, _resume_zero3, {
                c: (*c, *data[2], zero3[c][0]["state2"], [r["optim2"] for r in zero3[c]])
                for c in cases})}
    return _LAUNCHED[n]


@pytest.fixture(scope="module", params=CASES, ids=_id)
def runs(request):
    n, kind, tied = request.param
    data, launched = batches(), _launched(n)
    return {**{key: launched[key][(kind, tied)] for key in ("trained", "resumed", "zero3", "resumed3")},
            "reference": _reference(kind, tied, data),
            "reference_zero3": _reference_zero3(kind, tied, data), "start": params_of(TinyLM(tied)),
            "tied": tied}


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


@pytest.mark.slow
def test_zero1_and_zero2_equal_zero_redundancy_optimizer_and_one_process(runs):
    reference, start = runs["reference"], runs["start"]
    for rank, out in enumerate(runs["trained"]):
        for variant in ("zero1", "zero2", "zero_ro"):
            _assert_close(out[variant], reference, f"rank {rank}, {variant}")
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
            _assert_close(resumed[label], out["zero1"], f"rank {rank}, resumed {label}")
        for variant, label in (("zero1", "ours"), ("zero2", "zero2")):
            for name, value in out[variant].items():
                assert torch.equal(resumed[label][name], value), (rank, variant, name)   # bit for bit
        _assert_close(resumed["theirs_from_ours"], out["zero_ro"], f"rank {rank}, ZeRO-RO from ours")


@pytest.mark.slow
def test_zero3_with_groups_tied_and_frozen_parameters_equals_fsdp2_and_loads_back(runs):
    reference, start = runs["reference_zero3"], runs["start"]
    assert (reference["mix.bias"] - start["mix.bias"]).abs().max() > 1e-4   # the added group trained
    for rank, out in enumerate(runs["zero3"]):
        _assert_close(out["zero3"], reference, f"rank {rank}, ZeRO-3")
        _assert_close(out["fsdp2"], reference, f"rank {rank}, FSDP2")
        for name in ("scale", "unused.weight", "unused.bias"):   # frozen; never run
            assert torch.equal(out["zero3"][name], start[name]), (rank, name)
        if runs["tied"]:   # gathered once, under both names
            assert torch.equal(out["zero3"]["head.weight"], out["zero3"]["embed.weight"])
        _assert_close(runs["resumed3"][rank], out["zero3"], f"rank {rank}, ZeRO-3 resumed")


def _partly_used(rank, world_size):
    from threeaxes import sharding

    torch.manual_seed(0)
    used, idle, skipped = (nn.Linear(3, 3, dtype=torch.float64) for _ in range(3))
    before = {name: params_of(layer) for name, layer in (("idle", idle), ("skipped", skipped))}
    opt = sharding.ZeroOptimizer([{"params": [*used.parameters(), *idle.parameters()]},
                                  {"params": list(skipped.parameters())}],
                                 torch.optim.AdamW, lr=0.1, weight_decay=0.5)
    used(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
    _average_gradients(used)
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
