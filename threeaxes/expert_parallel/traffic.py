"""What one MoE layer's all-to-alls cost each ep rank, by formula (the trace measures the same)."""
from __future__ import annotations

from threeaxes.expert_parallel.routing import expert_capacity

__all__ = ["ALL_TO_ALLS_PER_LAYER", "moe_all_to_all_bytes"]

ALL_TO_ALLS_PER_LAYER = 4   # forward: dispatch, combine; backward: the same two again


def moe_all_to_all_bytes(tokens_per_rank: int, d_model: int, n_experts: int, ep: int, *,
                         top_k: int = 1, capacity_factor: float = 1.0, bytes_per_element: int = 4,
                         capacity: int | None = None) -> dict:
    """The all-to-all bytes of one MoE layer per training step, per ep rank, as named terms:

    capacity        C, slots per expert (given, or from `expert_capacity`)
    size            S = E * C * d_model * bytes: one all-to-all's whole input (comms' bytes)
    sent_each       (ep - 1)/ep * S: what one all-to-all puts on the wire from this rank
    all_to_alls     4 (dispatch and combine, forward and backward)
    sent_per_layer  4 * sent_each: the layer's bytes per rank per step

    Per MoE layer and training step, each rank runs four all-to-alls of one (E, C, d_model)
    buffer: dispatch and combine forward, then both again backward (their gradients). Under
    `threeaxes.comms`'s convention an all-to-all's size S is the rank's whole input,

        S = E * C * d_model * bytes_per_element        C = ceil(k * T * cf / E)

    (T: this rank's tokens; C: `routing.expert_capacity`, Switch Transformer's eq. 3 with k
    choices per token). Of its ep chunks, one is for the rank's own experts and never leaves it,
    so each all-to-all sends (ep - 1)/ep * S per rank (Thakur et al. 2005's pairwise exchange;
    `threeaxes.cost.network.bytes_sent_per_gpu("all_to_all", S, ep)`). The slots are padded, so
    the bytes do not depend on where the tokens went: a skewed router costs dropped tokens at a
    fixed capacity factor, or, with none (padding to the busiest expert), a larger C for every rank.
    """
    for name, value in (("tokens_per_rank", tokens_per_rank), ("d_model", d_model),
                        ("n_experts", n_experts), ("ep", ep), ("bytes_per_element", bytes_per_element)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}; it must be a positive integer")
    if n_experts % ep:
        raise ValueError(f"ep={ep} does not divide n_experts={n_experts}; every rank holds "
                         f"E/ep whole experts")
    if capacity is None:
        capacity = expert_capacity(tokens_per_rank, n_experts, top_k, capacity_factor)
    size = n_experts * capacity * d_model * bytes_per_element
    sent_each = size * (ep - 1) // ep        # exact: E, so S, is a multiple of ep
    return {"capacity": capacity, "size": size, "sent_each": sent_each,
            "all_to_alls": ALL_TO_ALLS_PER_LAYER, "sent_per_layer": ALL_TO_ALLS_PER_LAYER * sent_each}
