"""ZeRO-3 parameters whole, by their original names, and back into the shards.

    state = gathered_state(model)          # every rank: {name: whole tensor}, like state_dict()
    load_gathered_state(fresh, state)      # every rank: each keeps its range of each unit"""
from __future__ import annotations

import torch
import torch.nn as nn

from threeaxes.sharding.flat import shard_of
from threeaxes.sharding.fsdp import units_of

__all__ = ["gathered_state", "load_gathered_state"]


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _whole_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every parameter that is not a unit's flat shard: the frozen ones."""
    shards = {id(u.shard) for u in units_of(model)}
    return [(n, p) for n, p in model.named_parameters(remove_duplicate=False) if id(p) not in shards]


def gathered_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every original parameter, whole, by its original name: a collective (each unit
    all-gathers), call it on every dp rank. Detached copies; the units end freed as they were.

    `gathered_state` holds every parameter under every name it is registered by
    (a tied parameter under each, as `module.state_dict()` has it), frozen ones
    included, so it loads into the unsharded model with `load_state_dict` too.

    PyTorch's way for FSDP2 is `torch.distributed.checkpoint.state_dict`:
    `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))` and
    `set_model_state_dict`. Here the two are plain functions over the units, so a
    reader sees the all-gather (saving) and the cut into ranges (loading); the
    optimizer's state stays per rank (each rank's `optimizer.state_dict()` of its
    shards), to be loaded on the same dp size.
    """
    state = {}
    for prefix, sub in model.named_modules():
        unit = getattr(sub, "_sharding_unit", None)
        if unit is None or unit.shard is None:
            continue
        was_gathered = unit.gathered is not None
        with torch.no_grad():
            views = unit.layout.views(unit.gather())   # all-gathers over dp unless already whole
            for _, _, name, k in unit.places:
                state[_prefixed(prefix, name)] = views[k].detach().clone()
        if not was_gathered:
            unit.free()
    for name, p in _whole_parameters(model):
        state[name] = p.detach().clone()
    return state


def load_gathered_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put whole parameters (from `gathered_state`, or an unsharded model's state_dict)
    into a sharded model: each rank copies its range of each unit. No communication;
    call it on every dp rank with the same `state`, between steps."""
    missing = []
    with torch.no_grad():
        for prefix, sub in model.named_modules():
            unit = getattr(sub, "_sharding_unit", None)
            if unit is None or unit.shard is None:
                continue
            if unit.gathered is not None:
                raise RuntimeError("load_gathered_state between steps: a unit is gathered now")
            names: dict[int, str] = {}
            for _, _, name, k in unit.places:
                names.setdefault(k, _prefixed(prefix, name))
            missing += [n for n in names.values() if n not in state]
            if not missing:
                whole = [state[names[k]] for k in range(len(names))]
                unit.shard.copy_(shard_of(unit.layout, whole, unit.dims.coord("dp")))
        for name, p in _whole_parameters(model):
            if name in state:
                p.copy_(state[name])
            else:
                missing.append(name)
    if missing:
        raise KeyError(f"the state has no {missing}; pass gathered_state() of the same model")
