"""Mixture of experts: the description, its parameters, the all-to-all bytes, the rules."""
from __future__ import annotations

from dataclasses import dataclass

from .network import Link, all_to_all_time

__all__ = ["MoE", "expert_params", "active_params", "expert_all_to_all_bytes",
           "expert_all_to_all_time", "expert_violations"]


def _positive(name: str, value: float) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


@dataclass(frozen=True)
class MoE:
    """The experts of every MoE layer: ``n_experts`` MLPs of width
    ``expert_hidden`` (SwiGLU when ``gated``: three h x f matrices each, as
    Mixtral's), ``top_k`` of them per token; ``moe_layers`` of the model's
    layers have them (None: all), the others a dense MLP. ``shared_experts``
    run on every token (DeepSeekMoE, Dai et al. 2024), held like dense weights.

    A mixture-of-experts layer replaces the MLP by E expert MLPs and a router
    that sends each token to its top k of them (Shazeer et al. 2017; Fedus et
    al. 2022, "Switch Transformers", Section 2.1, k = 1; Mixtral, Jiang et al.
    2024, Section 2.1, E = 8, k = 2). Expert parallelism puts E/ep experts on each
    of ep ranks (Lepikhin et al. 2021, "GShard", Section 2.3): every token's
    hidden state travels to the ranks that hold its experts (the dispatch
    all-to-all) and its outputs come back (the combine all-to-all). Backward the
    gradients make the same two trips in reverse: four all-to-alls per MoE layer
    and micro-batch, two forward and two backward.

    Megatron Core's layout (MoE parallel folding, Liu et al. 2025, arXiv
    2504.14960, Section 3; Megatron Core >= 0.10): the expert layers have their
    own tensor-parallel size etp (default: the attention's tp) and expert-parallel
    size ep, folded over the same ranks as the attention's tp x cp x dp: etp * ep
    must divide tp * cp * dp, and the rest, edp = tp * cp * dp / (etp * ep), is the
    experts' data-parallel size, over which their gradients are reduced.
    """
    n_experts: int
    top_k: int
    expert_hidden: int
    gated: bool = True
    moe_layers: int | None = None
    shared_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("n_experts", "top_k", "expert_hidden"):
            _positive(name, getattr(self, name))
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} is more than n_experts={self.n_experts}; "
                             f"choose top_k <= {self.n_experts}")
        if self.moe_layers is not None:
            _positive("moe_layers", self.moe_layers)
        if isinstance(self.shared_experts, bool) or self.shared_experts < 0:
            raise ValueError(f"shared_experts={self.shared_experts!r} must be >= 0")

    def layers(self, n_layers: int) -> int:
        return n_layers if self.moe_layers is None else min(self.moe_layers, n_layers)

    def per_expert(self, d_model: int) -> int:
        """Parameters of one expert MLP: (3 if gated else 2) h f (no biases)."""
        return (3 if self.gated else 2) * d_model * self.expert_hidden


def expert_params(moe: MoE, d_model: int, n_layers: int) -> int:
    """Parameters in the routed experts of every MoE layer (what ep splits), plus the
    router's h x E per layer, which every rank holds whole and is left out here."""
    return moe.layers(n_layers) * moe.n_experts * moe.per_expert(d_model)


def active_params(n_params: int, moe: MoE, d_model: int, n_layers: int) -> int:
    """Parameters one token meets: the whole model less the routed experts it is
    not sent to, (E - k) experts per MoE layer. 6 x this per token is the
    training FLOPs of Kaplan et al. 2020 / Chowdhery et al. 2022, App. B applied to
    the active weights, as MoE papers count them (Fedus et al. 2022, Section 2)."""
    return int(n_params - moe.layers(n_layers) * (moe.n_experts - moe.top_k)
               * moe.per_expert(d_model))


def expert_all_to_all_bytes(tokens: int, d_model: int, top_k: int, ep: int, *,
                            dtype_bytes: float = 2) -> float:
    """Bytes one rank sends in ONE all-to-all of an MoE layer (dispatch or combine)
    over an expert-parallel group of ``ep``.

    The rank holds ``tokens`` tokens (b s / (cp tp) with sequence parallelism),
    each going to ``top_k`` experts: tokens * k hidden states of h numbers. With
    the router spreading them evenly over the experts, 1/ep of them stay on the
    rank and (ep - 1)/ep leave (Lepikhin et al. 2021, Section 2.3): tokens * k * h *
    d * (ep - 1)/ep. An MoE layer runs four of these per micro-batch: dispatch and
    combine forward, their gradients backward. A skewed router sends more to some
    ranks and less to others; this is the balanced count."""
    t, h, k, e = (_positive("tokens", tokens), _positive("d_model", d_model),
                  _positive("top_k", top_k), _positive("ep", ep))
    return (e - 1) / e * t * k * h * dtype_bytes


def expert_all_to_all_time(tokens: int, d_model: int, top_k: int, ep: int, link: Link, *,
                           dtype_bytes: float = 2) -> float:
    """Seconds of the four all-to-alls of one MoE layer and one micro-batch (dispatch
    and combine, forward and backward; none overlapped) over ``link``."""
    if _positive("ep", ep) == 1:
        return 0.0
    buffer = tokens * top_k * d_model * dtype_bytes        # this rank's routed copies
    # communication: dispatch and combine forward, their gradients backward
    return 4 * all_to_all_time(buffer, ep, link.bandwidth, link.latency).total


def expert_violations(moe: MoE | None, *, ep: int, etp: int, tp: int, cp: int, dp: int) -> list:
    """What is wrong with splitting the experts ``ep`` ways, as (rule, message) pairs.

    - "ep_moe": ep > 1 (or etp != tp) needs a mixture-of-experts model.
    - "ep_experts": each rank holds whole experts, E/ep of them: ep divides E.
    - "ep_fold": Megatron Core's folding (Liu et al. 2025, Section 3): etp * ep
      divides tp * cp * dp, the ranks that hold one copy of the attention's
      pipeline stage.
    """
    ep, etp = _positive("ep", ep), _positive("etp", etp)
    if moe is None:
        if ep > 1 or etp != tp:
            return [("ep_moe", f"ep={ep} (etp={etp}) needs a mixture-of-experts model; this one "
                               "is dense: use ep=1 or give the model a MoE(...)")]
        return []
    found = []
    if moe.n_experts % ep:
        ok = [d for d in range(1, moe.n_experts + 1) if moe.n_experts % d == 0]
        found.append(("ep_experts", f"ep={ep} does not divide n_experts={moe.n_experts}; "
                                    f"choose ep in {{{', '.join(map(str, ok))}}}"))
    ranks = tp * cp * dp
    if ranks % (etp * ep):
        found.append(("ep_fold", f"etp({etp}) * ep({ep}) = {etp * ep} does not divide "
                                 f"tp({tp}) * cp({cp}) * dp({dp}) = {ranks}, the ranks the experts "
                                 "are folded over (Megatron Core's MoE parallel folding); choose "
                                 f"etp * ep dividing {ranks}"))
    return found
