"""ZeRO stage 3 / FSDP: parameters sharded too, gathered only while a unit runs.

    for block in model.blocks:
        fully_shard(block)        # one unit per block
    fully_shard(model)            # the root: embeddings, final norm, head
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)   # sees only the flat shards"""
from __future__ import annotations

import weakref
from collections.abc import Iterable, Set
from typing import Any, cast

import torch
import torch.nn as nn

from threeaxes import comms
from threeaxes.data_parallel.torch_options import check_options, group_of_mesh
from threeaxes.dims import ParallelDims, dp_layout
from threeaxes.sharding.flat import FlatLayout, check_shardable

__all__ = ["fully_shard", "units_of", "ShardedUnit", "GatheredBytes", "GATHERED"]


class GatheredBytes:
    """Bytes of whole (gathered) ZeRO-3 parameters alive now, and the most at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def add(self, nbytes: int) -> None:
        self.now += nbytes
        self.peak = max(self.peak, self.now)

    def remove(self, nbytes: int) -> None:
        self.now -= nbytes

    def reset_peak(self) -> None:
        self.peak = self.now


GATHERED = GatheredBytes()   # this process's count (one rank per process)

_LIVE: dict[int, ShardedUnit] = {}   # storage address of each gathered buffer alive -> its unit


def units_of(model: nn.Module) -> list[ShardedUnit]:
    """The sharded units inside `model` (itself included), outermost first."""
    # set by ShardedUnit; nn.Module types an attribute it does not know as Tensor | Module
    return [cast(ShardedUnit, m._sharding_unit) for m in model.modules() if hasattr(m, "_sharding_unit")]


# -- saved tensors: a view of a gathered buffer is saved as a note, re-gathered on use --------

# what a saved tensor becomes: itself, or (unit, size, stride, storage offset) of a gathered view
_Packed = torch.Tensor | tuple["ShardedUnit", torch.Size, tuple[int, ...], int | torch.SymInt]


def _pack(tensor: torch.Tensor) -> _Packed:
    storage = tensor.untyped_storage()
    unit = _LIVE.get(storage.data_ptr()) if storage.nbytes() else None
    if unit is None:
        return tensor
    return unit, tensor.size(), tensor.stride(), tensor.storage_offset()


def _unpack(packed: _Packed) -> torch.Tensor:
    if isinstance(packed, torch.Tensor):
        return packed
    unit, size, stride, offset = packed
    return unit.gather().as_strided(size, stride, offset)


class _TieToShard(torch.autograd.Function):
    """Forward: the unit's gathered buffer, as a tensor that depends on the shard.
    Backward: the whole gradient reduce-scattered into the shard's gradient."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, unit: ShardedUnit) -> torch.Tensor:
        ctx.unit = unit
        assert unit.gathered is not None   # applied right after the unit's gather
        return unit.gathered.detach()   # (padded_numel,), the same memory

    @staticmethod
    def backward(ctx: Any, grad_whole: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.unit.post_backward(grad_whole), None


class ShardedUnit:
    """One `fully_shard`ed module: its flat shard, gather and free, and its hooks."""

    def __init__(self, module: nn.Module, dims: ParallelDims, prefetch: bool, ignored: Set[int] = frozenset()) -> None:
        self.module, self.dims, self.prefetch = module, dims, prefetch
        n, index = dims.size("dp"), dims.coord("dp")
        self.nested = units_of(module)
        inner = {id(u.shard) for u in self.nested}
        taken = {k: v for u in self.nested for k, v in u.taken.items()}
        # (submodule, name, full name, k) of every place a trainable parameter not already
        # inside a nested unit is registered; k numbers the distinct parameters, so a tied
        # parameter (one tensor registered in two places) is in the flat buffer once
        self.places: list[tuple[nn.Module, str, str, int]] = []
        params: list[nn.Parameter] = []
        for prefix, sub in module.named_modules():
            for name, p in list(sub._parameters.items()):
                if p is None or id(p) in inner or not p.requires_grad or id(p) in ignored:
                    continue   # a frozen or ignored parameter stays whole, a parameter of its module
                full_name = f"{prefix}.{name}" if prefix else name
                if id(p) in taken and taken[id(p)][0]() is p:
                    raise ValueError(f"parameter {full_name} is tied to {taken[id(p)][1]}, which a "
                                     f"nested fully_shard already sharded; apply fully_shard to a "
                                     f"module that holds both places (as FSDP2 requires)")
                k = next((i for i, q in enumerate(params) if q is p), len(params))
                if k == len(params):
                    params.append(p)
                self.places.append((sub, name, full_name, k))
        # what this unit took, so that an outer unit refuses a tie it cannot keep (weak: the
        # originals are freed once sharded, unless registered somewhere else)
        first: dict[int, str] = {}
        for _, _, full_name, k in self.places:
            first.setdefault(k, full_name)
        self.taken: dict[int, tuple[weakref.ref[nn.Parameter], str]] = {
            id(p): (weakref.ref(p), first[k]) for k, p in enumerate(params)}
        if not params and not self.nested and not any(True for _ in module.parameters()):
            raise ValueError(f"{type(module).__name__} has no parameters to shard; "
                             f"apply fully_shard to a module that holds some")
        self.shard: nn.Parameter | None = None
        if params:
            check_shardable(params, what=f"{type(module).__name__}'s parameters")
            self.layout = FlatLayout([p.shape for p in params], n)
            start, stop = self.layout.shard_range(index)
            with torch.no_grad():
                kept = self.layout.flatten(params)[start:stop].clone()  # (shard_numel,)
            self.shard = nn.Parameter(kept)
            for sub, name, _, _ in self.places:
                del sub._parameters[name]
                setattr(sub, name, None)   # only a view of the gathered buffer, while gathered
            module.register_parameter("flat_shard", self.shard)
        self.gathered: torch.Tensor | None = None   # the whole parameters, while gathered
        self._pending: comms.Pending | None = None
        self._saving: torch.autograd.graph.saved_tensors_hooks | None = None
        self.root: ShardedUnit | None = None
        self.order: list[ShardedUnit] = []
        self._recording = False
        for unit in self.nested:
            unit.root = self   # the outermost fully_shard call coordinates the order
        module._sharding_unit = self   # type: ignore[assignment]  # torch types setattr as Tensor | Module; any value is kept
        module.register_forward_pre_hook(self._pre_forward)
        module.register_forward_hook(self._post_forward)

    # -- gather and free ---------------------------------------------------------------
    @property
    def gathered_bytes(self) -> int:
        return self.layout.padded_numel * self.shard.element_size() if self.shard is not None else 0

    def start_gather(self) -> None:
        """Start the all-gather in the background (prefetch); `gather` waits for it."""
        if self.shard is None or self.gathered is not None or self._pending is not None:
            return
        GATHERED.add(self.gathered_bytes)
        # communication: all-gather every rank's range of this unit over dp, ahead of its use
        self._pending = comms.all_gather(self.shard.detach(), "dp", dims=self.dims, async_op=True)

    def gather(self) -> torch.Tensor:
        """The whole flat buffer, all-gathered now unless it already is (or is on its way)."""
        if self.gathered is None:
            if self._pending is None:
                GATHERED.add(self.gathered_bytes)
                assert self.shard is not None   # a unit with nothing sharded is never gathered
                # communication: all-gather every rank's range of this unit over dp
                self.gathered = comms.all_gather(self.shard.detach(), "dp", dims=self.dims)
            else:
                self.gathered, self._pending = self._pending.wait(), None
            _LIVE[self.gathered.untyped_storage().data_ptr()] = self
        return self.gathered

    def free(self) -> None:
        if self.gathered is None:
            return
        del _LIVE[self.gathered.untyped_storage().data_ptr()]
        self.gathered.untyped_storage().resize_(0)   # gone, even where a view still points
        self.gathered = None
        GATHERED.remove(self.gathered_bytes)
        for sub, name, _, _ in self.places:
            setattr(sub, name, None)

    def post_backward(self, grad_whole: torch.Tensor) -> torch.Tensor:
        """Phase: after this unit's backward (every gradient of its parameters is in)."""
        # communication: reduce-scatter the whole gradient over dp; keep the sum of my range
        grad = comms.reduce_scatter(grad_whole.contiguous(), "dp", dims=self.dims)
        self.free()
        return grad.div_(self.dims.size("dp"))   # the mean over the dp ranks, as in DP

    # -- hooks ----------------------------------------------------------------------------
    def _neighbour(self, step: int) -> ShardedUnit | None:
        order = (self.root or self).order
        if self not in order:
            return None
        k = order.index(self) + step
        # backward of the first unit (the root) is followed by the last unit's: wrap around
        return order[k % len(order)] if 0 <= k < len(order) or step < 0 else None

    def _pre_forward(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        # phase: before this unit's forward, gather it (and start the next one's, prefetching)
        root = self.root or self
        if root is self and not self.order:
            self._recording = True   # the first forward fixes the order units run in
        if root._recording:
            root.order.append(self)
        if self.shard is not None:
            gathered = self.gather()
            if torch.is_grad_enabled():
                # backward will not find these buffers: it asks _unpack, which gathers again
                self._saving = torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)
                self._saving.__enter__()
            whole = _TieToShard.apply(self.shard, self) if torch.is_grad_enabled() else gathered
            views = self.layout.views(whole)
            for sub, name, _, k in self.places:
                setattr(sub, name, views[k])   # a tied parameter: the same view in each place
        if self.prefetch and (nxt := self._neighbour(+1)) is not None:
            nxt.start_gather()

    def _post_forward(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # phase: after this unit's forward, free it; its backward starts with a gather
        if self._saving is not None:
            self._saving.__exit__(None, None, None)
            self._saving = None
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(self._pre_backward)
        self.free()
        if self.root is None:
            self._recording = False

    def _pre_backward(self, grad: torch.Tensor) -> None:
        # phase: before this unit's backward (its output's gradient is in), gather it again
        # (and start the gather of the unit whose backward comes next, prefetching)
        if self.shard is not None:
            self.gather()
        if self.prefetch and (prev := self._neighbour(-1)) is not None:
            prev.start_gather()


def _tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in _tensors(item)]
    if isinstance(output, dict):
        return [t for item in output.values() for t in _tensors(item)]
    return []


def fully_shard(module: nn.Module, dims: ParallelDims | None = None, prefetch: bool = False, *, mesh: Any = None,
                ignored_params: Iterable[torch.Tensor] | None = None, **fsdp2_options: Any) -> nn.Module:
    """Shard `module`'s parameters (those not in a nested unit) over the dp ranks; in place.

    Apply it to each block first, then to the root. Returns the module; its
    `parameters()` are now the flat shards (and any frozen parameters), to give
    to any optimizer. With no `dims` and no current layout it shards over the
    default process group, as FSDP2's `fully_shard` does with no mesh; FSDP2's
    one-axis `mesh=` is taken too (dims.mesh["dp"], or a mesh of every rank).

    As FSDP2: a tied parameter (an embedding shared with the output layer) is
    sharded and gathered once, and must sit in one unit (apply fully_shard to
    a module holding every place it is registered); `ignored_params` stay
    whole, unsharded, their gradients not averaged. Where it differs on
    purpose: a frozen parameter (`requires_grad=False`) is not sharded but
    stays whole on every rank, as in plain data parallelism (FSDP2 shards it
    too); a unit's trainable parameters are one flat buffer (FSDP1's flat
    parameter, so one dtype per unit) where FSDP2 shards each parameter; every
    unit, the root too, frees its whole parameters after forward (FSDP2 keeps
    the root's); prefetching is `prefetch=True`, the next unit in the first
    forward's order. FSDP2's other options pass where they mean what happens
    here and are refused, saying what to do, where not (`_fsdp2_options`).

    A unit's parameters live as one flat buffer cut into dp equal ranges
    (`flat.FlatLayout`, padded to a multiple of dp); each rank keeps its range as
    the parameter `flat_shard` of the unit's module, and the original parameters
    are removed. Each step, per unit (Rajbhandari et al. 2020, Section 5.3, P_os+g+p):

    * before its forward (forward pre-hook): all-gather the whole flat buffer and
      set each original parameter as a view of it;
    * after its forward (forward hook): free the whole buffer. What autograd saves
      for backward from it is replaced by a note (saved-tensor hooks), not kept;
    * before its backward (a hook on the gradient of its output): all-gather again;
    * after its backward (the backward of the function that tied the whole buffer
      to the shard): reduce-scatter the whole gradient over dp into the shard's
      gradient, divided by dp, and free the whole buffer.

    With `prefetch=True` a unit also starts the next unit's all-gather (in the
    order the first forward ran them) as its own begins, forward and backward.
    `GATHERED` counts the bytes of whole buffers alive (the gather and free hooks
    update it) and their peak; `accounting.held_bytes` counts what stays.
    """
    if hasattr(module, "_sharding_unit"):
        raise ValueError(f"{type(module).__name__} is already sharded; call fully_shard once "
                         f"per module (blocks first, then the root)")
    if not isinstance(prefetch, bool):
        raise TypeError(f"prefetch={prefetch!r}; pass True or False")
    if fsdp2_options:
        check_options("fully_shard", fsdp2_options, _fsdp2_options())
    dims = dp_layout(dims, group_of_mesh(mesh, "fully_shard"))
    ShardedUnit(module, dims, prefetch, {id(p) for p in ignored_params or ()})
    return module


def _fsdp2_options() -> dict[str, tuple[tuple[Any, ...], str]]:
    """FSDP2's options (PyTorch 2.13) -> (values that behave as here, what to do instead).
    Built when asked: importing torch.distributed.fsdp costs time a notebook need not spend."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy

    return {
        "reshard_after_forward": ((None, True), "a unit here always frees its whole parameters "
                                                "after forward and gathers them again for backward "
                                                "(ZeRO-3); to keep them whole use Zero2Optimizer"),
        "shard_placement_fn": ((None,), "a unit's parameters are one flat buffer cut into equal "
                                        "ranges, with no per-parameter placement; leave it out"),
        "mp_policy": ((MixedPrecisionPolicy(),), "the shards keep the module's dtype: cast the "
                                                 "model yourself (model.to(dtype))"),
        "offload_policy": ((OffloadPolicy(),), "the shards stay on the module's device; leave it out"),
        "dp_mesh_dims": ((None,), "pass mesh= a one-axis mesh, or dims= the layout"),
    }
