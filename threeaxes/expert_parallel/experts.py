"""The mixture-of-experts toy in one process: the reference every expert-parallel run equals.

    model = MoEToy(ToyConfig(dtype=torch.float64), MoEConfig(n_experts=4, top_k=1))
    model.set_groups(ep)   # route in ep groups, as ep ranks do (each its own tokens)"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from threeaxes.expert_parallel.config import MoEConfig
from threeaxes.expert_parallel.routing import Routing, assign_slots, combine, dispatch, expert_capacity, route
from threeaxes.toy import ToyConfig, ToyTransformer, init_weights

__all__ = ["Experts", "MoELayer", "MoEToy", "group_capacity", "skew_router_", "moe_layers"]


class Experts(nn.Module):
    """`n` feed-forward experts, d_model -> d_mlp -> d_model with GELU, run as batched matmuls
    on an (n, tokens, d_model) input: expert i sees row i only."""

    def __init__(self, n: int, d_model: int, d_mlp: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.w_in = nn.Parameter(torch.empty(n, d_model, d_mlp, dtype=dtype))
        self.in_bias = nn.Parameter(torch.zeros(n, 1, d_mlp, dtype=dtype))
        self.w_out = nn.Parameter(torch.empty(n, d_mlp, d_model, dtype=dtype))
        self.out_bias = nn.Parameter(torch.zeros(n, 1, d_model, dtype=dtype))

    @property
    def count(self) -> int:
        return self.w_in.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (n, tokens, d_model) -> (n, tokens, d_model)
        hidden = F.gelu(torch.baddbmm(self.in_bias, x, self.w_in))   # (n, tokens, d_mlp)
        return torch.baddbmm(self.out_bias, hidden, self.w_out)

    def rows(self, start: int, stop: int) -> Experts:
        """A new Experts holding copies of experts [start, stop)."""
        part = Experts(stop - start, self.w_in.shape[1], self.w_in.shape[2], self.w_in.dtype)
        with torch.no_grad():
            for name, p in part.named_parameters():
                p.copy_(getattr(self, name)[start:stop])
        return part


def group_capacity(moe: MoEConfig, tokens: int, busiest: int) -> int:
    """The slots per expert for a group of `tokens` tokens: the capacity factor's
    (`expert_capacity`), or with none the `busiest` expert's load (at least one slot)."""
    if moe.capacity_factor is None:
        return max(int(busiest), 1)
    return expert_capacity(tokens, moe.n_experts, moe.top_k, moe.capacity_factor)


class MoELayer(nn.Module):
    """Router + E experts, routed in `groups` groups. After a forward, `routings` holds each
    group's `Routing` (which expert each token chose, which choices were dropped)."""

    def __init__(self, cfg: ToyConfig, moe: MoEConfig) -> None:
        super().__init__()
        self.moe = moe
        self.groups = 1
        self.router = nn.Linear(cfg.d_model, moe.n_experts, dtype=cfg.dtype)
        self.experts = Experts(moe.n_experts, cfg.d_model, cfg.d_mlp, cfg.dtype)
        self.routings: list[Routing] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, seq, d_model)
        b, s, d = x.shape
        if (b * s) % self.groups:
            raise ValueError(f"{b * s} tokens do not split into groups={self.groups}; give a batch "
                             f"whose size is a multiple of the number of ep ranks")
        tokens = x.reshape(self.groups, -1, d)                    # (groups, T, d)
        logits = self.router(tokens)                              # (groups, T, E)
        k, E = self.moe.top_k, self.moe.n_experts
        # with no capacity factor every group pads to the busiest expert of any group,
        # as the expert-parallel ranks agree on with an all-reduce of the maximum
        busiest = max(int(assign_slots(torch.topk(g, k, dim=-1).indices, E)[1].max()) for g in logits)
        capacity = group_capacity(self.moe, tokens.shape[1], busiest)
        self.routings = [route(g, k, capacity) for g in logits]
        buffers = torch.stack([dispatch(t, r) for t, r in zip(tokens, self.routings)])  # (groups, E, C, d)
        # every expert runs on its slots of every group at once: (E, groups * C, d)
        out = self.experts(buffers.transpose(0, 1).reshape(E, -1, d))
        out = out.view(E, self.groups, capacity, d).transpose(0, 1)   # (groups, E, C, d)
        y = torch.stack([combine(o, r) for o, r in zip(out, self.routings)])
        return y.reshape(b, s, d)


class MoEToy(ToyTransformer):
    """The toy transformer with every block's MLP an `MoELayer`; the same seed gives the same
    weights in every process (the toy's `init_weights`, over this model's parameters).

    It is the dense toy with each block's MLP replaced by an `MoELayer`: a router
    (Linear(d_model, E), its bias zero at init) and E experts, each the toy's MLP shape
    (d_model -> d_mlp -> d_model) with its own weights, stacked in `Experts` so that a rank
    holding experts [i, j) holds rows [i, j) of every weight.

    Groups: with a capacity, which choices are dropped depends on which tokens compete for the
    slots. Under expert parallelism each rank routes its own tokens (GShard's local groups,
    Lepikhin et al. 2020, Section 2.2), so the reference routes the batch in the same groups:
    `set_groups(n)` splits the flattened (batch * seq) tokens into n equal groups in order,
    which are the batch rows each of n ranks holds.
    """

    def __init__(self, cfg: ToyConfig = ToyConfig(), moe: MoEConfig = MoEConfig(), seed: int = 0) -> None:
        super().__init__(cfg, seed)
        self.moe = moe
        for block in self.blocks:
            block.mlp = MoELayer(cfg, moe)
        init_weights(self, seed)

    def set_groups(self, groups: int) -> MoEToy:
        for layer in moe_layers(self):
            layer.groups = groups
        return self


def moe_layers(model: ToyTransformer) -> list[MoELayer]:
    """Each block's MoE layer, first block first."""
    return [cast(MoELayer, block.mlp) for block in model.blocks]


def skew_router_(model: ToyTransformer, expert: int = 0, strength: float = 1.0) -> ToyTransformer:
    """Tilt every router toward `expert`: add `strength` to its logit for every token (in place).
    A router that learned to prefer one expert looks like this; the load goes with it."""
    with torch.no_grad():
        for layer in moe_layers(model):
            n = layer.router.bias.shape[0]
            if not 0 <= expert < n:
                raise ValueError(f"expert={expert!r}; choose one of 0..{n - 1}")
            layer.router.bias[expert] += strength
    return model
