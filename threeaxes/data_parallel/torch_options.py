"""PyTorch's keyword arguments, met by the course's wrappers: taken where they mean what
the course does, refused with what to do instead where they do not."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["DDP_OPTIONS", "check_options", "group_of_mesh"]


def _same(value: object, accepted: Iterable[object]) -> bool:
    # `is` for None, True and False, so 0 does not pass for False nor 1 for True
    if value is accepted:
        return True
    return type(value) is type(accepted) and not isinstance(value, bool) and value == accepted


def check_options(owner: str, given: dict, table: dict) -> None:
    """Refuse, saying what to use, every option in `given` that does not behave here as
    in PyTorch (its value not among the table's); a name the table lacks is a TypeError.

    Code written for `DistributedDataParallel`, `ZeroRedundancyOptimizer` or FSDP2's
    `fully_shard` often passes their options by name. `check_options` runs each through
    a table `name -> (values that behave as here, what to do instead)`: a value in the
    table passes, any other is a ValueError that says why and what to use, and a name
    PyTorch does not have either is the usual TypeError. `DDP_OPTIONS` is
    `DataParallel`'s table; ZeRO's and FSDP2's sit beside their classes in
    `threeaxes.sharding`. `group_of_mesh` turns PyTorch's one-axis `DeviceMesh`
    argument into its process group, for `threeaxes.dims.dp_layout`.
    """
    for name, value in given.items():
        if name not in table:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        accepted, instead = table[name]
        if not any(_same(value, a) for a in accepted):
            raise ValueError(f"{owner}: {name}={value!r} (PyTorch's) is not taken here: {instead}")


def group_of_mesh(mesh: DeviceMesh | None, owner: str) -> ProcessGroup | None:
    """The process group of a one-axis DeviceMesh (PyTorch's `device_mesh=` / `mesh=`)."""
    if mesh is None:
        return None
    if getattr(mesh, "ndim", None) != 1:
        raise ValueError(f"{owner}: a mesh of {getattr(mesh, 'ndim', '?')} axes; pass the one axis "
                         f"to run over (dims.mesh['dp']), or dims= the whole layout")
    return mesh.get_group()


_THE_DEVICE = ("the wrapped module runs where it is, one device per rank as launch gives each "
               "rank: move it there before wrapping (module.to(device)) and leave this out")
_BUFFERS = ("the first replica's buffers are copied to every rank once, when wrapping, never "
            "at each forward (a buffer changed by forward, like BatchNorm's, drifts between "
            "ranks); leave it out")

# DistributedDataParallel's options (PyTorch 2.13) -> (values that behave as DataParallel
# does, what to do instead). process_group, device_mesh and bucket_cap_mb are
# DataParallel's own arguments, taken as DDP takes them.
DDP_OPTIONS = {
    "device_ids": ((None,), _THE_DEVICE),
    "output_device": ((None,), _THE_DEVICE),
    "dim": ((0,), "the batch is split by shard_batch on dim 0; leave dim out"),
    "broadcast_buffers": ((None,), _BUFFERS),
    "forward_sync_buffers": ((None,), _BUFFERS),
    "init_sync": ((True,), "the first replica's parameters and buffers are always copied to "
                           "every rank when wrapping; leave init_sync out"),
    # both behave as DDP's True: an unused parameter counts as a zero gradient
    "find_unused_parameters": ((False, True), "pass True or False: either way a parameter "
                                              "unused in a step counts as a zero gradient"),
    # a promise about the model that changes no number here: the buckets are fixed anyway
    "static_graph": ((False, True), "pass True or False"),
    "check_reduction": ((False,), "deprecated in PyTorch; leave it out"),
    "gradient_as_bucket_view": ((False,), "the gradients stay their own tensors; the buckets "
                                          "are copies, written back by "
                                          "finish_gradient_synchronization(); leave it out"),
    "skip_all_reduce_unused_params": ((False,), "an unused parameter counts as zeros in its "
                                                "bucket, and every bucket is reduced; leave it out"),
    "delay_all_reduce_named_params": ((None,), "every bucket starts from its own gradient "
                                               "hooks; to change how a bucket is reduced pass "
                                               "launch_bucket="),
    "param_to_hook_all_reduce": ((None,), "every bucket starts from its own gradient hooks; to "
                                          "change how a bucket is reduced pass launch_bucket="),
    "bucket_cap_mb_list": ((None,), "one size for every bucket: pass bucket_bytes= or "
                                    "bucket_cap_mb="),
    "batched_grad_copy": ((False,), "gradients are copied bucket by bucket; leave it out"),
    "mixed_precision": ((None,), "gradients are reduced in their own dtype: cast the model "
                                 "yourself (model.to(dtype)) and leave it out"),
}
