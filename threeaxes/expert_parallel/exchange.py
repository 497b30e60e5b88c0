"""The all-to-all that carries tokens to their experts' ranks and back, as an autograd map.

Forward, chunk j of this rank's (E, C, d) buffer (the slots of the experts rank j holds)
goes to rank j. Backward, the gradient of what arrived goes back the way it came: chunk i
of the received gradient returns to rank i, which is the same all-to-all again (an equal-chunk
all-to-all undoes itself). Both run through `threeaxes.comms`, so both land in the trace.
"""
from __future__ import annotations

from typing import Any

import torch

from threeaxes import comms
from threeaxes.extra_axes import AxisLayout

__all__ = ["all_to_all_ep"]


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ep: AxisLayout) -> torch.Tensor:
        ctx.ep = ep
        # communication: chunk j of dim 0 to the j-th ep rank, chunk i from the i-th
        return comms.all_to_all(x, "ep", dims=ep, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # communication (backward): each chunk's gradient back to the rank that sent the chunk
        return comms.all_to_all(grad.contiguous(), "ep", dims=ctx.ep, dim=0), None


def all_to_all_ep(x: torch.Tensor, ep: AxisLayout) -> torch.Tensor:
    """All-to-all over the ep axis (`ep`: `threeaxes.extra_axes.axis_layout("ep")`) along dim 0,
    differentiable: its backward is the same all-to-all of the gradient."""
    return _AllToAll.apply(x, ep)
