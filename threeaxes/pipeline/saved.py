"""Activation memory, counted: the bytes autograd saves for backward.

`SavedActivations` counts them live with PyTorch's
`torch.autograd.graph.saved_tensors_hooks`; `one_microbatch_saved_bytes`
measures one microbatch through one stage in this process;
`predicted_peak_bytes` walks a plan to predict a rank's peak from those.
"""
from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn as nn

from ..toy import lm_loss, make_batch
from .schedules import Plan
from .stages import StageModule

__all__ = ["SavedActivations", "one_microbatch_saved_bytes", "predicted_peak_bytes"]


class _Saved:
    """What autograd stores instead of a saved tensor while `SavedActivations`
    is on; when autograd lets go of it (its backward ran), the bytes are released."""
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedActivations:
    """Count the bytes autograd saves for backward: live now (`current`) and at
    most (`peak`), while the block runs.

        with SavedActivations(exclude=model) as saved:
            loss = model(x).sum()      # saved.current grows as ops save their inputs
            loss.backward()            # ... and falls back to 0 as backward frees them
        saved.peak

    Bytes are counted by the memory they cover, not by tensor: a saved tensor
    covers the bytes of its storage from its first to its last element. A tensor
    saved twice, or several views of one memory (q, k and v reshaped, a
    transpose), count once; a microbatch that is a slice of the batch counts only
    its slice. Tensors held by the modules in `exclude` (their parameters and
    buffers, e.g. a weight a matmul saves) are weights, not activations, and are
    left out. A saved tensor counts from the moment autograd saves it until
    autograd releases it, normally when the backward that needed it has run.
    """

    def __init__(self, exclude: nn.Module | Iterable[nn.Module] = ()) -> None:
        modules = [exclude] if isinstance(exclude, nn.Module) else list(exclude)
        self._weights = {t.untyped_storage().data_ptr() for mod in modules
                         for t in (*mod.parameters(), *mod.buffers())}
        self._live: Counter = Counter()       # (storage address, first byte, end byte) -> count
        self.current = self.peak = 0
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    def _extent(self, t: torch.Tensor) -> tuple | None:
        if t.numel() == 0 or t.layout != torch.strided:
            return None
        address = t.untyped_storage().data_ptr()
        if address in self._weights:
            return None
        size = t.element_size()
        last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return address, t.storage_offset() * size, (last + 1) * size

    def _count(self) -> int:
        """Bytes covered by the live saved tensors, overlaps counted once."""
        total = 0
        by_storage: dict[int, list[tuple[int, int]]] = {}
        for address, lo, hi in self._live:
            by_storage.setdefault(address, []).append((lo, hi))
        for spans in by_storage.values():
            end = -1
            for lo, hi in sorted(spans):
                if hi > end:
                    total += hi - max(lo, end)
                    end = hi
        return total

    def _release(self, key: tuple) -> None:
        self._live[key] -= 1
        if not self._live[key]:
            del self._live[key]
            self.current = self._count()

    def _pack(self, t: torch.Tensor) -> torch.Tensor | _Saved:
        key = self._extent(t)
        if key is None:
            return t
        handle = _Saved(t)
        self._live[key] += 1
        weakref.finalize(handle, self._release, key)
        self.current = self._count()
        self.peak = max(self.peak, self.current)
        return handle

    @staticmethod
    def _unpack(handle: torch.Tensor | _Saved) -> torch.Tensor:
        return handle.tensor if isinstance(handle, _Saved) else handle

    def reset_peak(self) -> None:
        self.peak = self.current

    def __enter__(self) -> SavedActivations:
        hooks = self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._hooks.__exit__(*exc)  # type: ignore[union-attr]  # set by __enter__
        return False


def one_microbatch_saved_bytes(stage: StageModule, micro_batch: int, *, seed: int = 0) -> int:
    """Bytes `stage` saves for backward for one microbatch of `micro_batch`
    sequences, measured in this process: the forward (and, on the last stage,
    the loss) exactly as `run_plan` runs it, counted by `SavedActivations`."""
    cfg = stage.cfg
    tokens, labels = make_batch(cfg, micro_batch, seed=seed)
    if stage.is_first:
        x = tokens
    else:   # what the previous stage would send: (micro_batch, seq, d_model)
        x = torch.randn(micro_batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, requires_grad=True)
    with SavedActivations(exclude=stage) as saved:
        y = stage(x)
        if stage.is_last:
            y = lm_loss(y, labels)
        held = saved.current
        y.backward(None if stage.is_last else torch.ones_like(y))
    if saved.current:
        raise RuntimeError(f"{saved.current} saved bytes outlived the backward pass")
    return held


def predicted_peak_bytes(plan: Plan, rank: int, stage_bytes: dict) -> int:
    """Most saved bytes `rank` holds at once under `plan`: walk its actions, a
    forward of stage s adding `stage_bytes[s]` (one microbatch through s), the
    backward taking them away. With one stage per rank this is
    `peak_in_flight(plan, rank) * stage_bytes[rank]`; with several (interleaved)
    it weighs each chunk by its own bytes. A split backward (zero-bubble)
    frees them at its W, which still reads the saved inputs."""
    held = peak = 0
    for action in plan.actions(rank):
        if action.kind == "I":
            continue
        held += stage_bytes[action.stage] if action.kind == "F" else -stage_bytes[action.stage]
        peak = max(peak, held)
    return peak
