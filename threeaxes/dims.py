"""ParallelDims: the (dp, tp, pp) layout of a run, and one process group per axis.

Ranks are laid out with tp fastest, then dp, then pp (as in Megatron-LM), so
the tp ranks of one replica are neighbours, which on a real cluster keeps them
inside one node:

    rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank

Vocabulary: an "axis" is one of dp, tp, pp; a "dim" is a tensor dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

AXES = ("dp", "tp", "pp")


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int
    pp: int
    world_size: int

    def __post_init__(self):
        for axis in AXES:
            size = getattr(self, axis)
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{axis}={size!r}; every axis size must be a positive integer")
        if self.dp * self.tp * self.pp != self.world_size:
            raise ValueError(
                f"dp({self.dp}) * tp({self.tp}) * pp({self.pp}) = "
                f"{self.dp * self.tp * self.pp} != world_size({self.world_size}); "
                f"change one axis so the product is {self.world_size}")

    def coords(self, rank: int) -> dict[str, int]:
        """{'dp': i, 'tp': j, 'pp': k} of a global rank."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank={rank} is outside 0..{self.world_size - 1}")
        return {"tp": rank % self.tp,
                "dp": (rank // self.tp) % self.dp,
                "pp": rank // (self.tp * self.dp)}

    def rank_of(self, dp: int, tp: int, pp: int) -> int:
        return pp * self.dp * self.tp + dp * self.tp + tp

    def axis_ranks(self, axis: str, rank: int) -> list[int]:
        """The global ranks that share every coordinate with `rank` but `axis`:
        the members of `rank`'s process group along that axis, in axis order."""
        if axis not in AXES:
            raise ValueError(f"axis={axis!r}; choose one of {AXES}")
        c = self.coords(rank)
        return [self.rank_of(**{**c, axis: i}) for i in range(getattr(self, axis))]

    def all_groups(self, axis: str) -> list[list[int]]:
        """Every group along `axis`, each a list of global ranks, in a fixed order."""
        seen, groups = set(), []
        for rank in range(self.world_size):
            members = tuple(self.axis_ranks(axis, rank))
            if members not in seen:
                seen.add(members)
                groups.append(list(members))
        return groups

    def new_groups(self, rank: int) -> dict:
        """Create one torch.distributed group per axis; return this rank's.

        Every rank must call this, in the same order, because `new_group` is
        itself collective: each rank takes part in creating every group, even
        those it is not a member of.
        """
        import torch.distributed as dist

        mine = {}
        for axis in AXES:
            for members in self.all_groups(axis):
                group = dist.new_group(members)
                if rank in members:
                    mine[axis] = group
        return mine
