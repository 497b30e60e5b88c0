"""Beyond the three axes: context parallelism (cp) and expert parallelism (ep), each as a
one-axis layout, next to `threeaxes.dims`'s `world_layout` (the whole world as dp)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["EXTRA_AXES", "AxisLayout", "axis_layout"]

EXTRA_AXES = ("cp", "ep")  # cp: the sequence split; ep: the experts split


@dataclass(frozen=True)
class AxisLayout:
    """One axis ("cp" or "ep") holding every rank of one process group, the whole world by
    default. It answers what comms asks a layout (`rank`, `size`, `coord`, `ranks`, `group`)
    for its own axis only; any other axis is refused with a message that says so.

        cp = AxisLayout("cp", n_ranks=4)                # pure arithmetic: ring neighbours
        cp = axis_layout("cp")                            # on launched ranks: the whole world
        comms.all_to_all(x, "cp", dims=cp)
    """

    axis: str
    n_ranks: int = 1                 # ranks on the axis
    rank: int | None = None          # this process's global rank, when bound to one
    # the group's global ranks, in axis order (default 0..size-1); __post_init__ fills in None
    members: tuple[int, ...] = None  # type: ignore[assignment]
    mesh: DeviceMesh | None = field(default=None, compare=False, repr=False)  # 1-D, on ranks

    def __post_init__(self) -> None:
        if self.axis not in EXTRA_AXES:
            raise ValueError(f"axis={self.axis!r}: a one-axis layout is for 'cp' or 'ep'; the "
                             f"three axes 'dp', 'tp', 'pp' use ParallelDims")
        if type(self.n_ranks) is not int or self.n_ranks < 1:
            raise ValueError(f"{self.axis}={self.n_ranks!r}; the axis size must be a positive integer")
        members = tuple(range(self.n_ranks)) if self.members is None else tuple(self.members)
        if len(members) != self.n_ranks:
            raise ValueError(f"{len(members)} members {list(members)} for {self.axis}={self.n_ranks}")
        object.__setattr__(self, "members", members)
        if self.rank is not None and self.rank not in members:
            raise ValueError(f"rank={self.rank!r} is not in this {self.axis} group {list(members)}")

    @property
    def world_size(self) -> int:
        return self.n_ranks

    def check_axis(self, axis: str) -> str:
        if axis != self.axis:
            raise ValueError(f"axis={axis!r} is not this layout's axis; this one-axis layout "
                             f"runs only on {self.axis!r}")
        return axis

    def at(self, rank: int) -> AxisLayout:
        return dataclasses.replace(self, rank=rank)

    def _me(self) -> int:
        if self.rank is None:
            raise ValueError(f"this {self.axis} layout is not bound to a rank; use .at(rank), or "
                             f"axis_layout({self.axis!r}) on launched ranks")
        return self.rank

    def size(self, axis: str) -> int:
        self.check_axis(axis)
        return self.n_ranks

    def coord(self, axis: str) -> int:
        """This rank's place on the axis (0..size-1)."""
        self.check_axis(axis)
        return self.members.index(self._me())

    def ranks(self, axis: str) -> list[int]:
        """The global ranks of the axis group, in axis order."""
        self.check_axis(axis)
        self._me()
        return list(self.members)

    def ring_neighbours(self) -> tuple[int, int]:
        """(previous, next) global rank around the ring of this axis (it wraps)."""
        i, n = self.coord(self.axis), self.n_ranks
        return self.members[(i - 1) % n], self.members[(i + 1) % n]

    def group(self, axis: str) -> ProcessGroup:
        """PyTorch's process group of the axis (from the 1-D DeviceMesh)."""
        self.check_axis(axis)
        if self.mesh is None:
            raise ValueError(f"no process group: this {self.axis} layout was not built on ranks; "
                             f"call axis_layout({self.axis!r}) inside the launched function")
        return self.mesh.get_group(axis)


def axis_layout(axis: str, process_group: ProcessGroup | None = None) -> AxisLayout:
    """On launched ranks: `axis` ("cp" or "ep") over every rank of `process_group` (the default
    group, the whole world, when None). Like `world_layout`, it makes no process group: its
    mesh wraps the group given, so nothing needs freeing.

    Context parallelism (drop 15) and expert parallelism (drop 16) run on their own: the whole
    world, or one process group, is the cp (or the ep) group. They do not enter `ParallelDims`
    or its (pp, dp, tp) mesh, so nothing the three axes do changes; `threeaxes.comms` takes an
    `AxisLayout` as `dims=` and runs on its axis as on any other, traced the same way:

        cp = axis_layout("cp")                                   # on launched ranks
        comms.all_to_all(x, "cp", dims=cp)
        comms.send(kv, dst=cp.ring_neighbours()[1], axis="cp", dims=cp)
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if axis not in EXTRA_AXES:
        raise ValueError(f"axis={axis!r}: axis_layout is for 'cp' or 'ep'; the three axes use "
                         f"ParallelDims.init(dp=..., tp=..., pp=...)")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"torch.distributed is not running; call axis_layout({axis!r}) inside "
                           f"a launched function: threeaxes.launch.launch(fn, n)")
    group = dist.group.WORLD if process_group is None else process_group
    # WORLD is a group once torch.distributed is running (checked above)
    members = tuple(dist.get_process_group_ranks(group))
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    mesh = DeviceMesh.from_group(group, device, mesh_dim_names=(axis,))  # type: ignore[arg-type]
    return AxisLayout(axis, len(members), dist.get_rank(), members, mesh)
