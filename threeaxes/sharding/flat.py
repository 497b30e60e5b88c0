"""Flat buffers: many tensors laid end to end in one 1-D buffer, cut into n shards."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

__all__ = ["FlatLayout", "check_shardable", "shard_of"]


def check_shardable(tensors: Sequence[torch.Tensor], what: str = "parameter group") -> None:
    """Raise a ValueError (TypeError for a non-tensor) that says what to change unless
    `tensors` can live in one trained flat buffer: at least one, all trainable, all
    floating point, one dtype, one device."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"the {what} holds no tensors; give it at least one parameter")
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"the {what} holds a {type(t).__name__}, not a tensor; "
                            f"pass model.parameters() or a list of parameter tensors")
    dtypes = sorted({str(t.dtype) for t in tensors})
    if len(dtypes) > 1:
        raise ValueError(f"the {what} mixes dtypes {dtypes}; one flat buffer holds one dtype, "
                         f"so convert the model to one (e.g. model.double()) or put each dtype "
                         f"in its own parameter group")
    if not tensors[0].is_floating_point():
        raise ValueError(f"the {what} has dtype {dtypes[0]}; only floating-point parameters "
                         f"are trained and sharded")
    frozen = sum(not t.requires_grad for t in tensors)
    if 0 < frozen:
        raise ValueError(f"the {what} holds {frozen} parameter(s) with requires_grad=False; "
                         f"a shard is trained as one tensor, so leave frozen parameters out "
                         f"(e.g. [p for p in model.parameters() if p.requires_grad])")
    devices = sorted({str(t.device) for t in tensors})
    if len(devices) > 1:
        raise ValueError(f"the {what} spans devices {devices}; move the model to one device first")


class FlatLayout:
    """Where each of some tensors sits in a flat buffer padded to a multiple of n.

        layout = FlatLayout([(3, 2), (5,)], n=4)   # 11 numbers, padded to 12
        layout.shard_range(1)                       # (3, 6): rank 1's numbers

    Every ZeRO stage here shards the same way (ZeRO's "partition", DeepSpeed's and
    FSDP1's flat parameter): the tensors of a group are concatenated in a fixed
    order into one flat buffer of `numel` numbers, zero-padded at the end to
    `padded_numel`, the next multiple of n, and dp rank i owns the i-th equal
    slice of `shard_numel = padded_numel / n` numbers. A shard may start or end in
    the middle of a tensor; an elementwise optimizer (SGD, Adam) does not care.

    `FlatLayout` is pure arithmetic (no processes), so it is checked in one process.
    """

    def __init__(self, shapes: Iterable[torch.Size | tuple[int, ...]], n: int) -> None:
        if type(n) is not int or n < 1:
            raise ValueError(f"n={n!r}; the number of shards must be a positive integer")
        self.shapes = [torch.Size(s) for s in shapes]
        self.numels = [math.prod(s) for s in self.shapes]
        self.offsets = [sum(self.numels[:i]) for i in range(len(self.numels))]
        self.n = n
        self.numel = sum(self.numels)
        self.padded_numel = -(-self.numel // n) * n   # round up to a multiple of n
        self.shard_numel = self.padded_numel // n

    def shard_range(self, index: int) -> tuple[int, int]:
        """[start, stop) of shard `index` (the dp coordinate) in the padded buffer."""
        if not 0 <= index < self.n:
            raise ValueError(f"shard {index} does not exist; choose 0..{self.n - 1}")
        return index * self.shard_numel, (index + 1) * self.shard_numel

    def flatten(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """A new padded flat buffer holding `tensors` (detached) end to end, zeros after."""
        tensors = list(tensors)
        if [t.shape for t in tensors] != self.shapes:
            raise ValueError(f"got shapes {[tuple(t.shape) for t in tensors]}, "
                             f"the layout holds {[tuple(s) for s in self.shapes]}")
        flat = tensors[0].new_zeros(self.padded_numel)  # (padded_numel,)
        for t, offset, numel in zip(tensors, self.offsets, self.numels):
            flat[offset:offset + numel].copy_(t.detach().reshape(-1))
        return flat

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each tensor as a view into the (padded) flat buffer, in layout order."""
        if flat.numel() != self.padded_numel:
            raise ValueError(f"the flat buffer holds {flat.numel()} numbers, "
                             f"the layout {self.padded_numel}")
        pieces = flat[:self.numel].split(self.numels)
        return [piece.view(shape) for piece, shape in zip(pieces, self.shapes)]

    def __repr__(self) -> str:
        return (f"FlatLayout({len(self.shapes)} tensors, numel={self.numel}, "
                f"padded_numel={self.padded_numel}, n={self.n})")


def shard_of(layout: FlatLayout, tensors: Sequence[torch.Tensor | None], index: int) -> torch.Tensor:
    """Shard `index` of the flat buffer `layout.flatten(tensors)` would make, built
    without making the whole buffer: only the pieces of the tensors that fall inside
    it are copied (the padding stays zero). A tensor given as None counts as zeros."""
    start, stop = layout.shard_range(index)
    like = next(t for t in tensors if t is not None)
    out = like.new_zeros(layout.shard_numel)  # (shard_numel,)
    for t, offset, numel in zip(tensors, layout.offsets, layout.numels):
        lo, hi = max(start, offset), min(stop, offset + numel)
        if t is None or lo >= hi:
            continue
        out[lo - start:hi - start].copy_(t.detach().reshape(-1)[lo - offset:hi - offset])
    return out
