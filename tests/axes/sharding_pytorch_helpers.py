"""Shared by the tests of threeaxes.sharding against PyTorch's: a small language model in
float64 (with and without a tied embedding), its parameter groups and batches, the gradient
average and data slice each rank takes, the cases (world size, optimizer, tied), and one
launch that runs every case of a world size.

Pickled by value: the ranks never import it."""
from __future__ import annotations

import sys

import cloudpickle
import torch
import torch.nn as nn
import torch.nn.functional as F

from threeaxes.launch import launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


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
def average_gradients(model):
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:   # a parameter nothing used keeps no gradient, as in PyTorch
            # communication: sum this gradient over every rank (the default group)
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def my_slice(inputs, targets):
    import torch.distributed as dist

    n, r = dist.get_world_size(), dist.get_rank()
    per = inputs.shape[0] // n
    return inputs[r * per:(r + 1) * per], targets[r * per:(r + 1) * per]


# -- the checks, the cases, and one launch for every case of a world size -----------------
def assert_params_close(got, want, label):
    assert got.keys() == want.keys(), label
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12,
                                   msg=lambda m: f"{label}, {name}: {m}")


CASES = [(n, kind, tied) for n in (2, 4) for kind in OPTIMIZERS for tied in (False, True)]


def case_id(case):
    n, kind, tied = case
    return f"dp{n}-{kind}-{'tied' if tied else 'untied'}"


def each_job(rank, world_size, fn, jobs):
    """On the ranks: `fn` for every job, so that one launch serves every case of a world size."""
    return {key: fn(rank, world_size, *args) for key, args in jobs.items()}


def launch_each(n, fn, jobs):
    per_rank = launch(each_job, n, fn, jobs, timeout=120)
    return {key: [out[key] for out in per_rank] for key in jobs}
