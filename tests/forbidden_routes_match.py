"""Whether a value a package function returned is an exercise's answer, or holds it
(tests/forbidden_routes.py): compared as plain values, as the visible checks compare."""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction


def plain(value):
    """Plain JSON-like values of `value`, or None where it has none."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, Fraction):
        return float(value)
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "_asdict"):
        value = value._asdict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    try:
        import torch
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return value.item()
    except ImportError:
        pass
    return None


def answers(value, want, form: str, args=()) -> bool:
    """Whether `value` is the answer `want`, or holds it: the answer's keys of a dict or
    record, or, for a number, one field of it that is not one of the arguments handed back."""
    from threeaxes.grading.visible import same

    if isinstance(want, str) and want.startswith("raises"):
        return isinstance(value, ValueError)
    if isinstance(value, BaseException):
        return False
    got = plain(value)
    if got is None and want is not None:
        return False
    if form in ("number", "int") and isinstance(want, (int, float)) and not isinstance(want, bool):
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            return same(float(got), float(want)) if math.isfinite(got) else False
        if isinstance(got, dict):
            echoed = any(isinstance(a, (int, float)) and same(float(a), float(want)) for a in args)
            return not echoed and any(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and same(float(v), float(want)) for v in got.values())
        return False
    if isinstance(want, dict) and isinstance(got, dict):
        return set(want) <= set(got) and all(_same_loose(got[k], want[k]) for k in want)
    if form == "text" and isinstance(got, str) and isinstance(want, str):
        return got.strip().lower() == want.strip().lower()
    return _same_loose(got, want)


def _same_loose(got, want) -> bool:
    from threeaxes.grading.visible import same

    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float)):
        return same(float(got), float(want))
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_same_loose(g, w) for g, w in zip(got, want))
    return same(got, want)
