"""The mixture-of-experts toy's extra sizes: how many experts, how many per token, how much room."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MoEConfig"]


@dataclass(frozen=True)
class MoEConfig:
    """Checked when made; each error says what to change.

    The dense toy (`threeaxes.toy.ToyConfig`) stays as drops 1 to 14 use it; an MoE toy is that
    same config plus this one, which says what replaces each block's MLP:

        MoEConfig(n_experts=4, top_k=1, capacity_factor=1.0)

    * `n_experts` (E): each expert is the toy's MLP (d_model -> d_mlp -> d_model), its own weights;
    * `top_k` (k): how many experts each token visits (Switch Transformer: 1; GShard, Mixtral: 2);
    * `capacity_factor`: the room each expert has, as a multiple of its even share of a group's
      token choices (`routing.expert_capacity`); tokens past it are dropped. None pads every
      expert to the busiest one's load instead, so no token is dropped (DeepSpeed's
      `drop_tokens=False`): the buffers, and the bytes, then grow with the imbalance.
    """

    n_experts: int = 4
    top_k: int = 1
    capacity_factor: float | None = 1.0

    def __post_init__(self) -> None:
        if type(self.n_experts) is not int or self.n_experts < 1:
            raise ValueError(f"n_experts={self.n_experts!r}; it must be a positive integer")
        if type(self.top_k) is not int or not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k={self.top_k!r}; choose top_k in 1..n_experts={self.n_experts}")
        cf = self.capacity_factor
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float)) or cf <= 0):
            raise ValueError(f"capacity_factor={cf!r}; give a positive number (1.0 is each expert's "
                             f"even share), or None to pad to the busiest expert and drop nothing")

    def check_ep(self, ep: int) -> MoEConfig:
        """Raise a ValueError unless `ep` ranks can share the experts evenly."""
        if type(ep) is not int or ep < 1 or self.n_experts % ep:
            options = [d for d in range(1, self.n_experts + 1) if self.n_experts % d == 0]
            raise ValueError(f"ep={ep!r} does not divide n_experts={self.n_experts}: every rank "
                             f"holds the same number of whole experts; choose ep in {set(options)}")
        return self
