"""ParallelDims: the (dp, tp, pp) layout of a run, the one answer to "my group,
coordinate, size and neighbour along this axis"."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

AXES = ("pp", "dp", "tp")  # mesh order: tp fastest

__all__ = ["AXES", "ParallelDims", "current", "dp_layout", "release", "resolve", "world_layout"]


def _divisors(n: int) -> str:
    return "{" + ", ".join(str(d) for d in range(1, n + 1) if n % d == 0) + "}"


def check_axis(axis: str) -> str:
    if axis not in AXES:
        raise ValueError(f"axis={axis!r} does not exist; choose one of 'dp', 'tp', 'pp'")
    return axis


@dataclass(frozen=True)
class ParallelDims:
    """Ranks are laid out on a DeviceMesh of shape (pp, dp, tp), tp fastest (as in
    Megatron-LM), so the tp ranks of one replica are neighbours, which on a real
    cluster keeps them inside one node:

        rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank

    Two ways to hold a layout:

    * pure arithmetic, no processes: `ParallelDims(dp=2, tp=2, pp=2)` answers
      `coords(rank)`, `axis_ranks(axis, rank)`, `all_groups(axis)`; `.at(rank)`
      answers the same for one rank as `coord(axis)`, `ranks(axis)`, `prev_rank`;
    * on launched ranks: `ParallelDims.init(dp=2, tp=2, pp=2)` builds the mesh
      with `torch.distributed.device_mesh.init_device_mesh` (PyTorch's own groups,
      so `dims.mesh["tp"]` also feeds `parallelize_module`), and makes it the
      run's current layout: modules given no `dims` use `current()`. The next
      `init` of another layout frees the groups of the one it replaces
      (`release()`); `init` of the same layout again returns the current one;
    * with no layout at all, on launched ranks: `dp_layout()` is the whole world as
      one dp axis on the default process group (`world_layout()`), the group
      PyTorch's DDP, ZeroRedundancyOptimizer and fully_shard use when given none.
      The data-parallel helpers and the sharding classes ask `dp_layout(dims)`;
    * beyond the three axes: `threeaxes.extra_axes.axis_layout("cp")` (or "ep") is
      the whole world (or one process group) as a single context- or expert-parallel
      axis, which comms takes as `dims=`; ParallelDims never holds cp or ep.

    Vocabulary: an "axis" is one of dp, tp, pp; a "dim" is a tensor dimension.
    """
    dp: int = 1
    tp: int = 1
    pp: int = 1
    world_size: int | None = None   # defaults to dp * tp * pp
    rank: int | None = None         # this process's global rank, when the layout is bound to one
    mesh: DeviceMesh | None = field(default=None, compare=False, repr=False)  # on ranks

    def __post_init__(self) -> None:
        for axis in ("dp", "tp", "pp"):
            size = getattr(self, axis)
            if type(size) is not int or size < 1:
                raise ValueError(f"{axis}={size!r}; every axis size must be a positive integer")
        product = self.dp * self.tp * self.pp
        if self.world_size is None:
            object.__setattr__(self, "world_size", product)
        if product != self.world_size:
            raise ValueError(
                f"dp({self.dp}) * tp({self.tp}) * pp({self.pp}) = {product} != "
                f"world_size({self.world_size}); change one axis so the product is {self.world_size}")
        if self.rank is not None:
            self._check_rank(self.rank)

    # -- checks against a model ---------------------------------------------------
    def check_model(self, cfg: Any, v: int = 1) -> ParallelDims:
        """Raise a ValueError that says what to change unless this layout splits `cfg`:
        tp must divide the heads and the MLP width, pp * v stages must not exceed the layers."""
        if cfg.n_heads % self.tp:
            raise ValueError(f"tp={self.tp} does not divide n_heads={cfg.n_heads}; "
                             f"choose tp in {_divisors(cfg.n_heads)}")
        if cfg.d_mlp % self.tp:
            raise ValueError(f"tp={self.tp} does not divide d_mlp={cfg.d_mlp}; "
                             f"choose tp in {_divisors(cfg.d_mlp)}")
        stages = self.pp * v
        if stages > cfg.n_layers:
            raise ValueError(f"pp={self.pp}" + (f" x v={v}" if v > 1 else "")
                             + f" = {stages} stages > n_layers={cfg.n_layers}: every stage "
                             f"needs a layer; choose pp in {_divisors(cfg.n_layers)}")
        return self

    # -- pure arithmetic: any rank ---------------------------------------------------
    def _check_rank(self, rank: int) -> None:
        world_size = self.dp * self.tp * self.pp   # == self.world_size, checked when made
        if type(rank) is not int or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank!r} is outside 0..{world_size - 1}")

    def coords(self, rank: int) -> dict[str, int]:
        """{'dp': i, 'tp': j, 'pp': k} of a global rank."""
        self._check_rank(rank)
        return {"dp": (rank // self.tp) % self.dp, "tp": rank % self.tp,
                "pp": rank // (self.tp * self.dp)}

    def rank_of(self, dp: int = 0, tp: int = 0, pp: int = 0) -> int:
        return pp * self.dp * self.tp + dp * self.tp + tp

    def axis_ranks(self, axis: str, rank: int) -> list[int]:
        """The global ranks that share every coordinate with `rank` but `axis`:
        the members of `rank`'s group along that axis, in axis order."""
        c, axis = self.coords(rank), check_axis(axis)
        return [self.rank_of(**{**c, axis: i}) for i in range(getattr(self, axis))]

    def all_groups(self, axis: str) -> list[list[int]]:
        """Every group along `axis`, each a list of global ranks, lowest first."""
        return [list(g) for g in sorted({tuple(self.axis_ranks(axis, r)) for r in range(self.dp * self.tp * self.pp)})]

    def pp_neighbours(self, rank: int) -> tuple[int | None, int | None]:
        """(previous, next) global rank in `rank`'s pipeline; None past either end."""
        ring, k = self.axis_ranks("pp", rank), self.coords(rank)["pp"]
        return (ring[k - 1] if k > 0 else None, ring[k + 1] if k + 1 < self.pp else None)

    # -- one rank's view ------------------------------------------------------------
    def at(self, rank: int) -> ParallelDims:
        """This layout seen from global rank `rank` (no processes needed)."""
        return dataclasses.replace(self, rank=rank)

    def _me(self) -> int:
        if self.rank is None:
            raise ValueError("this layout is not bound to a rank; use dims.at(rank), or "
                             "ParallelDims.init(...) on launched ranks")
        return self.rank

    def size(self, axis: str) -> int:
        return getattr(self, check_axis(axis))

    def coord(self, axis: str) -> int:
        """This rank's coordinate along `axis` (its rank inside that axis group)."""
        return self.coords(self._me())[check_axis(axis)]

    def ranks(self, axis: str) -> list[int]:
        """The global ranks of this rank's group along `axis`."""
        return self.axis_ranks(axis, self._me())

    @property
    def prev_rank(self) -> int | None:
        """The global rank of the previous pipeline stage; None on the first."""
        return self.pp_neighbours(self._me())[0]

    @property
    def next_rank(self) -> int | None:
        """The global rank of the next pipeline stage; None on the last."""
        return self.pp_neighbours(self._me())[1]

    @property
    def is_first_stage(self) -> bool:
        return self.coord("pp") == 0

    @property
    def is_last_stage(self) -> bool:
        return self.coord("pp") == self.pp - 1

    def group(self, axis: str) -> ProcessGroup:
        """PyTorch's process group along `axis` for this rank (from the DeviceMesh)."""
        check_axis(axis)
        if self.mesh is None:
            raise ValueError(f"no process groups: this layout was not built on ranks; call "
                             f"ParallelDims.init(dp={self.dp}, tp={self.tp}, pp={self.pp}) "
                             f"inside the launched function")
        if getattr(self.mesh, "_threeaxes_released", False):
            raise RuntimeError("this layout's process groups were freed when a later "
                               "ParallelDims.init replaced it; use the layout that call returned")
        return self.mesh.get_group(axis)

    # -- on launched ranks ------------------------------------------------------------
    @classmethod
    def init(cls, dp: int = 1, tp: int = 1, pp: int = 1) -> ParallelDims:
        """Build the layout's DeviceMesh on every rank of the running group and make it
        the current layout. Collective: every rank must call it, with the same sizes.
        The same sizes as the current layout return it, groups and all; other sizes
        first free the current layout's groups (`release`), so using that old layout
        afterwards raises a RuntimeError that says so."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("torch.distributed is not running; call ParallelDims.init inside "
                               "a launched function: threeaxes.launch.launch(fn, dp * tp * pp)")
        dims = cls(dp, tp, pp, dist.get_world_size(), dist.get_rank())   # checked before freeing
        if _current and _current[0] == dims and _groups_alive(_current[0].mesh):
            return _current[0]   # the same layout again: keep its groups (old references stay valid)
        release()   # the groups of the layout this one replaces
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        mesh = init_device_mesh(device, (pp, dp, tp), mesh_dim_names=AXES)
        dims = dataclasses.replace(dims, mesh=mesh)
        set_current(dims)
        return dims


_current: list[ParallelDims] = []


def set_current(dims: ParallelDims | None) -> None:
    """Make `dims` the layout that modules given no `dims` use (None forgets it)."""
    _current[:] = [] if dims is None else [dims]


def release() -> None:
    """Forget the current layout and destroy the process groups its mesh made (not the
    default group, which the launcher frees when the run ends). Collective: every rank
    calls it; `ParallelDims.init` does, before it builds the next mesh, so that repeated
    layouts in one run do not pile up groups (each holds sockets and threads)."""
    import torch.distributed as dist

    mesh = _current[0].mesh if _current else None
    set_current(None)
    if mesh is None or getattr(mesh, "_threeaxes_released", False) or not dist.is_initialized():
        return
    mesh._threeaxes_released = True   # type: ignore[attr-defined]  # the course's mark on PyTorch's mesh
    default = dist.distributed_c10d._get_default_group()
    made = {id(g): g for g in mesh.get_all_groups() if g is not default}
    for group in made.values():
        if group in dist.distributed_c10d._world.pg_map:   # not already destroyed
            dist.destroy_process_group(group)
    # gloo's threads and sockets go only with the last reference to a group, and the mesh
    # keeps one (PyTorch 2.13: a private registry): drop it, so an old layout still held
    # somewhere (by a model, an optimizer) does not keep its groups alive
    registry = getattr(mesh, "_pg_registry", None)
    if isinstance(registry, dict):
        registry.clear()


def _groups_alive(mesh: DeviceMesh | None) -> bool:
    import torch.distributed as dist

    if mesh is None or getattr(mesh, "_threeaxes_released", False):
        return False
    try:
        return all(g in dist.distributed_c10d._world.pg_map for g in mesh.get_all_groups())
    except (RuntimeError, ValueError, KeyError):   # a group destroyed behind our back
        return False


def current() -> ParallelDims:
    """The run's current layout, or a RuntimeError that says how to make one."""
    if not _current:
        raise RuntimeError("no parallel layout in this process; call "
                           "threeaxes.dims.ParallelDims.init(dp=..., tp=..., pp=...) on every "
                           "rank first, or pass dims=")
    return _current[0]


def resolve(dims: ParallelDims | None) -> ParallelDims:
    """`dims` if given, else the current layout."""
    if dims is None:
        return current()
    if not isinstance(dims, ParallelDims):
        group = " (a process group: pass it as process_group=)" if \
            type(dims).__name__ == "ProcessGroup" else ""
        raise TypeError(f"dims must be a threeaxes.dims.ParallelDims, got {type(dims).__name__}{group}")
    return dims


# -- with no layout: the default process group as the dp axis, as PyTorch does ---------------
# DistributedDataParallel, ZeroRedundancyOptimizer and FSDP2's fully_shard use the default
# group when given none; the data-parallel helpers and the sharding classes do the same when
# given no dims and no layout is current. Only then: with a current layout its dp axis is used,
# so a 3D run never averages or shards over the whole world by accident.

def world_layout(process_group: ProcessGroup | None = None) -> ParallelDims:
    """Every rank as one data-parallel axis (dp = world size), on the default process group
    or on `process_group` when that holds every rank. Its "dp" group is that group itself
    (a DeviceMesh wrapped around it), so no process group is made and nothing needs freeing."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("no parallel layout and torch.distributed is not running; run this "
                           "inside a launched function (threeaxes.launch.launch(fn, n)), where "
                           "every rank is one data-parallel axis (or make a layout there: "
                           "ParallelDims.init(dp=..., tp=..., pp=...))")
    group = dist.group.WORLD if process_group is None else process_group
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    # WORLD is a group once torch.distributed is running (checked above)
    mesh = DeviceMesh.from_group(group, device, mesh_dim_names=("dp",))  # type: ignore[arg-type]
    return ParallelDims(dp=dist.get_world_size(), rank=dist.get_rank(), mesh=mesh)


def dp_layout(dims: ParallelDims | None = None, process_group: ProcessGroup | None = None) -> ParallelDims:
    """The layout whose dp axis the data-parallel helpers and the sharding classes use:
    `dims` if given; else PyTorch's `process_group` if given (the default group, a group
    of every rank, or the current layout's dp group); else the current layout; else
    `world_layout()`."""
    if dims is not None and process_group is not None:
        raise ValueError("pass dims= (the course's layout) or process_group= (PyTorch's), not both")
    if process_group is not None:
        return _layout_of_group(process_group)
    if dims is not None:
        return resolve(dims)
    return _current[0] if _current else world_layout()


def _layout_of_group(group: ProcessGroup) -> ParallelDims:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("process_group= given but torch.distributed is not running; call this "
                           "inside a launched function (threeaxes.launch.launch(fn, n))")
    if _current and _current[0].mesh is not None and _groups_alive(_current[0].mesh) \
            and _current[0].group("dp") is group:
        return _current[0]
    ranks = dist.get_process_group_ranks(group)
    if ranks == list(range(dist.get_world_size())):
        return world_layout(group)
    raise ValueError(f"process_group holds ranks {ranks}: neither every rank nor the current "
                     f"layout's dp group. The course names groups by axis: make a layout on "
                     f"every rank, dims = ParallelDims.init(dp=..., tp=..., pp=...), and pass "
                     f"dims= (its dp group is dims.group('dp'))")
