"""Giving every pipeline stage a known duration: `DelayedStage`, a teaching device."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from .stages import StageModule

__all__ = ["DelayedStage"]


def _wait_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


class _Clock:
    """When one microbatch's backward through a stage began."""
    __slots__ = ("backward_start",)


class _BackwardStarts(torch.autograd.Function):
    """Identity on the stage's output; its backward runs first in the stage's
    backward and notes the time. Saves no tensor."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, clock: _Clock) -> torch.Tensor:
        ctx.clock = clock
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.clock.backward_start = time.perf_counter()
        return grad, None


class _BackwardEnds(torch.autograd.Function):
    """Identity on the first block's input; its backward runs once every block's
    backward has run, and waits until the backward has lasted `backward_s`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, clock: _Clock, backward_s: float) -> torch.Tensor:
        ctx.clock, ctx.backward_s = clock, backward_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        _wait_until(ctx.clock.backward_start + ctx.backward_s)
        return grad, None, None


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
        raise ValueError(f"{name}={value!r}; give a duration in seconds between 0 and 10 "
                         f"(e.g. 0.005 for 5 ms)")
    return float(value)


class DelayedStage(nn.Module):
    """A pipeline stage whose forward lasts at least `forward_s` seconds and
    whose backward at least `backward_s` (a teaching device, see
    below): when the stage's own compute finishes sooner, it sleeps for the
    rest. The backward is timed from the gradient reaching the stage's output
    to the gradient leaving its first block's input (the embedding's backward,
    on the first stage, comes after and is not padded).

    Everything `run_plan` reads from a stage (`cfg`, parameters, `is_first`,
    `is_last`, `layers`) is the wrapped stage's; outputs and gradients are
    exactly the wrapped stage's.

    The toy stages take well under a millisecond, and 4 ranks share 2 CPU cores,
    so their real compute time is mostly process scheduling: a measured timeline
    would show noise, not the schedule. `DelayedStage` wraps a stage so that each
    forward lasts a fixed `forward_s` seconds and each backward `backward_s`: it
    sleeps for whatever the stage's own compute left of that time. It changes no
    number the stage computes. Sleeping stands in for a GPU kernel: the host waits
    while the device works, and the CPU stays free for the other ranks, so four
    "busy" ranks fit on two cores.
    """

    def __init__(self, stage: StageModule, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.stage = stage
        self.forward_s = _check_seconds("forward_s", forward_s)
        self.backward_s = _check_seconds("backward_s", backward_s)
        self.cfg, self.layers = stage.cfg, stage.layers
        self.is_first, self.is_last = stage.is_first, stage.is_last
        self._clock: _Clock | None = None
        first_block = next(iter(stage.blocks.values()))
        first_block.register_forward_pre_hook(self._mark_backward_end)

    def _mark_backward_end(self, _module: nn.Module, args: tuple) -> tuple | None:
        if self._clock is None:      # the wrapped stage called on its own: no delay
            return None
        return (_BackwardEnds.apply(args[0], self._clock, self.backward_s), *args[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start, clock = time.perf_counter(), _Clock()
        self._clock = clock          # the first block's pre-hook reads it
        try:
            y = _BackwardStarts.apply(self.stage(x), clock)
        finally:
            self._clock = None
        _wait_until(start + self.forward_s)
        return y

    def extra_repr(self) -> str:
        return (f"forward lasts >= {self.forward_s * 1e3:g} ms, "
                f"backward >= {self.backward_s * 1e3:g} ms")
