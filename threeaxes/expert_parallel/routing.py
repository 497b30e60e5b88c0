"""The router's choices and the fixed-size buffers they fill: capacity, slots, dispatch, combine."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["expert_capacity", "Routing", "choose_experts", "assign_slots", "route", "dispatch",
           "combine"]


def expert_capacity(tokens: int, n_experts: int, top_k: int = 1, capacity_factor: float = 1.0) -> int:
    """Slots per expert for a group of `tokens` tokens: ceil(k * T * cf / E).

    Switch Transformer (Fedus et al. 2022, Section 2.2, eq. 3) defines the capacity as
    (tokens per batch / number of experts) x capacity factor, for k = 1; with k choices per
    token the even share is k T / E (GShard's 2N/E for top-2, Lepikhin et al. 2020, Section
    2.2). Rounded up, as Megatron-Core's `get_capacity` does, so a factor of 1.0 always leaves
    room for an even split.
    """
    for name, value in (("tokens", tokens), ("n_experts", n_experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}; it must be a positive integer")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or capacity_factor <= 0:
        raise ValueError(f"capacity_factor={capacity_factor!r}; give a positive number "
                         f"(1.0 is each expert's even share)")
    # k T cf / E, computed on integers where it can be, so 1.0 * 8 / 4 is exactly 2
    return math.ceil(round(top_k * tokens * capacity_factor, 9) / n_experts)


@dataclass
class Routing:
    """Where one group's token choices went. Row t, column j is token t's j-th choice."""

    expert: torch.Tensor   # (T, k) long: the expert chosen
    gate: torch.Tensor     # (T, k): the weight of that expert's output (differentiable)
    slot: torch.Tensor     # (T, k) long: the place in the expert's buffer, in arrival order
    kept: torch.Tensor     # (T, k) bool: the slot is below the capacity
    capacity: int
    n_experts: int

    @property
    def tokens(self) -> int:
        return self.expert.shape[0]

    def load(self) -> list[int]:
        """Choices sent to each expert, before any is dropped."""
        return torch.bincount(self.expert.reshape(-1), minlength=self.n_experts).tolist()

    def kept_per_expert(self) -> list[int]:
        return torch.bincount(self.expert[self.kept], minlength=self.n_experts).tolist()

    def dropped(self) -> int:
        """Token choices that found their expert full."""
        return int((~self.kept).sum())

    def _flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        # the kept choices' rows in the flattened (E * C, d) buffer, and their tokens
        rows = (self.expert * self.capacity + self.slot)[self.kept]
        tokens = torch.arange(self.tokens).unsqueeze(1).expand_as(self.expert)[self.kept]
        return rows, tokens


def choose_experts(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert, gate), each (T, k), from router logits (T, E): step 1 above."""
    probs = F.softmax(logits, dim=-1)
    gate, expert = torch.topk(probs, top_k, dim=-1)
    if top_k > 1:
        gate = gate / gate.sum(dim=-1, keepdim=True)   # GShard: the k gates sum to 1
    return expert, gate


def assign_slots(expert: torch.Tensor, n_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot, load): each choice's place in its expert's queue (T, k), and each expert's load (E,).
    GShard's order: all first choices, then all second choices; tokens in order within each."""
    choice_major = expert.t().reshape(-1)                       # (k * T,): choice 0 of every token first
    onehot = F.one_hot(choice_major, n_experts)                 # (k * T, E)
    place = (torch.cumsum(onehot, dim=0) - 1) * onehot           # arrivals before this one, same expert
    slot = place.sum(dim=1).reshape(expert.shape[1], expert.shape[0]).t()
    return slot.contiguous(), onehot.sum(dim=0)


def route(logits: torch.Tensor, top_k: int, capacity: int) -> Routing:
    """Steps 1 to 3 for one group: choose, place, keep what fits in `capacity` slots.

    A group of T tokens (one rank's tokens under expert parallelism: GShard's "local group
    dispatching", Lepikhin et al. 2020, Section 2.2) is routed in four steps:

    1. choose: softmax over the E experts' logits, keep the top k. The gate is the chosen
       expert's probability (Switch Transformer, k = 1: y = p_i(x) E_i(x), Fedus et al. 2022,
       Section 2.1, eq. 2); for k > 1 the k gates are renormalised to sum to 1 (GShard's top-2
       gating, Algorithm 1; Mixtral does the same);
    2. count: each expert has C slots, `expert_capacity` (Switch Transformer, Section 2.2, eq. 3);
    3. place: slots go in GShard's order, every token's first choice before any second choice,
       tokens in order within a choice; a choice that finds its expert full is dropped (its
       token skips the expert; the block's residual connection still carries it);
    4. dispatch/combine: the kept choices fill an (E, C, d_model) buffer, empty slots zero;
       after the experts, each token sums its kept experts' outputs times their gates.

    Everything here is one process and plain tensor ops, so autograd differentiates it; the
    expert-parallel layer (`layer.py`) runs the same four steps on each rank.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity={capacity!r}; every expert needs at least one slot")
    expert, gate = choose_experts(logits, top_k)
    slot, _ = assign_slots(expert, logits.shape[-1])
    return Routing(expert, gate, slot, slot < capacity, capacity, logits.shape[-1])


def dispatch(x: torch.Tensor, routing: Routing) -> torch.Tensor:
    """(T, d) tokens -> (E, C, d): each kept choice's token in its expert's slot, the rest zero."""
    rows, tokens = routing._flat()
    E, C = routing.n_experts, routing.capacity
    # each slot holds at most one choice, so adding into zeros places the token there
    return x.new_zeros(E * C, x.shape[-1]).index_add(0, rows, x[tokens]).view(E, C, x.shape[-1])


def combine(y: torch.Tensor, routing: Routing) -> torch.Tensor:
    """(E, C, d) expert outputs -> (T, d): each token's kept outputs, weighted by their gates.
    A token whose every choice was dropped gets zero (its residual connection carries it)."""
    rows, tokens = routing._flat()
    weighted = y.reshape(-1, y.shape[-1])[rows] * routing.gate[routing.kept].unsqueeze(1)
    return y.new_zeros(routing.tokens, y.shape[-1]).index_add(0, tokens, weighted)
