"""Expert parallelism: the experts spread over the ep ranks, tokens sent to them and back."""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from threeaxes import comms
from threeaxes.expert_parallel.exchange import all_to_all_ep
from threeaxes.expert_parallel.experts import MoELayer, MoEToy, group_capacity, moe_layers
from threeaxes.expert_parallel.routing import Routing, assign_slots, combine, dispatch, route
from threeaxes.extra_axes import AxisLayout

__all__ = ["ExpertParallelMoE", "expert_parallel_toy", "local_experts", "sum_replicated_grads",
           "shard_batch_ep"]


def local_experts(n_experts: int, ep_size: int, ep_rank: int) -> range:
    """The experts ep rank `ep_rank` of `ep_size` holds: E/ep consecutive ones."""
    per_rank = n_experts // ep_size
    return range(ep_rank * per_rank, (ep_rank + 1) * per_rank)


class ExpertParallelMoE(nn.Module):
    """One `MoELayer` over the ep ranks: the router copied, the experts split (`local_experts`).

    Each of the ep ranks holds E/ep whole experts (rank r: experts r*E/ep .. (r+1)*E/ep - 1),
    a copy of the router, and its own tokens (its share of the batch). One MoE layer, forward:

        route      this rank's tokens choose experts, fill (E, C, d) slots   (routing.py)
        dispatch   all-to-all: rank r's slots for rank j's experts go to j   (E/ep, C, d) each way
        experts    each local expert runs on the ep * C slots it received
        combine    all-to-all back: the outputs return to their tokens' rank
                   each token sums its experts' outputs times their gates

    Backward runs the two all-to-alls again, in reverse (exchange.py). With no capacity factor,
    the ranks first agree on the busiest expert's load (an all-reduce of the maximum), since an
    all-to-all sends chunks of one size.

    The router and every weight outside the experts are copies on each rank, which sees only
    its own tokens: their gradients are summed over ep after backward (`sum_replicated_grads`),
    as data parallelism would; the expert weights need no sum, every token that used them
    sent its gradient home through the backward all-to-all.
    """

    def __init__(self, layer: MoELayer, ep: AxisLayout) -> None:
        super().__init__()
        self.moe, self.ep = layer.moe.check_ep(ep.size("ep")), ep
        self.router = copy.deepcopy(layer.router)
        mine = local_experts(self.moe.n_experts, ep.size("ep"), ep.coord("ep"))
        self.experts = layer.experts.rows(mine.start, mine.stop)
        self.routing: Routing | None = None   # this rank's Routing after a forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch here, seq, d_model)
        b, s, d = x.shape
        n, E, k = self.ep.size("ep"), self.moe.n_experts, self.moe.top_k
        tokens = x.reshape(-1, d)                                  # (T, d), this rank's tokens
        logits = self.router(tokens)                               # (T, E)
        busiest = torch.zeros((), dtype=torch.int64)
        if self.moe.capacity_factor is None:
            busiest += assign_slots(torch.topk(logits, k, dim=-1).indices, E)[1].max()
            # communication: agree on the busiest expert's load over the ep ranks (chunks of one size)
            comms.all_reduce(busiest, "ep", dims=self.ep, op=torch.distributed.ReduceOp.MAX)
        capacity = group_capacity(self.moe, tokens.shape[0], int(busiest))
        self.routing = routing = route(logits, k, capacity)
        slots = dispatch(tokens, routing)                     # (E, C, d), experts in order
        # communication: dispatch; rank j gets every rank's slots for its E/ep experts
        arrived = all_to_all_ep(slots, self.ep)                    # (n * E/ep, C, d), by source rank
        local = self.experts.count
        per_expert = arrived.view(n, local, capacity, d).transpose(0, 1).reshape(local, n * capacity, d)
        out = self.experts(per_expert)                             # (E/ep, n * C, d)
        out = out.view(local, n, capacity, d).transpose(0, 1).reshape(n * local, capacity, d)
        # communication: combine; each rank's slots come home, experts in order again
        back = all_to_all_ep(out, self.ep)                         # (E, C, d)
        return combine(back, routing).view(b, s, d)


def expert_parallel_toy(model: MoEToy, ep: AxisLayout) -> MoEToy:
    """A copy of `model` whose MoE layers are expert-parallel over `ep` (made on every rank,
    from the same model: the same seed gives every rank the same weights)."""
    model.moe.check_ep(ep.size("ep"))
    parallel = copy.deepcopy(model)
    for block, layer in zip(parallel.blocks, moe_layers(model)):
        block.mlp = ExpertParallelMoE(layer, ep)
    return parallel


def shard_batch_ep(tensor: torch.Tensor, ep: AxisLayout) -> torch.Tensor:
    """This ep rank's rows of a batch (the same rows as the reference's groups)."""
    n, r = ep.size("ep"), ep.coord("ep")
    if tensor.shape[0] % n:
        raise ValueError(f"batch of {tensor.shape[0]} does not split over ep={n} ranks; "
                         f"give a batch size that is a multiple of {n}")
    return tensor.chunk(n, dim=0)[r]


def sum_replicated_grads(model: nn.Module, ep: AxisLayout) -> None:
    """Sum, over the ep ranks, the gradients of every weight that is not an expert's."""
    for name, p in model.named_parameters():
        if ".experts." not in name and p.grad is not None:
            # communication: a copied weight's gradient from every rank's tokens
            comms.all_reduce(p.grad, "ep", dims=ep)
