"""What a student's kernel needs for the nbgrader test cells: plain values (`as_number`, ...), runs
on fresh ranks (`check_on_ranks`), the visible checks (`visible.py`, `visible_config.py`: stored
cases, no reference answer) and the kernel's side of the grader's protocol (`wire/`). Its rules:
CONTRIBUTING.md, "Graded cells". Every failure is an `AssertionError` whose message says what to
change."""
from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from threeaxes.grading.ranks import check_on_ranks  # noqa: F401  (rule 2, in ranks.py)

if TYPE_CHECKING:  # for the hints only: each function imports torch where it uses it
    import torch

# The plain value a check compares for a call the exercise asks to refuse: the student's
# function raised ValueError, as the rule says (drops 4 and 12 store it among their cases).
REFUSED = "raises ValueError"


def _unwrap(value: Any, name: str) -> Any:
    """0-d tensors and numpy scalars become Python numbers; nothing else changes. Only torch's
    and numpy's own types are asked for `.item()`: a class that claims their module is not."""
    import numpy
    import torch

    if type(value) in (torch.Tensor, numpy.ndarray) or (isinstance(value, numpy.generic)
                                                         and type(value).__module__ == "numpy"):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            raise AssertionError(f"{name} should be a single number, got an array of shape "
                                 f"{tuple(getattr(value, 'shape', ()))}") from None
    return value


def as_number(value: Any, name: str = "answer") -> float:
    """A plain float from an int/float answer; anything else fails with a hint."""
    value = _unwrap(value, name)
    if type(value) not in (int, float):  # exact types: no bool, no subclass with a rigged __eq__
        raise AssertionError(f"{name} should be a number (int or float), got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise AssertionError(f"{name} is {value}; it should be a finite number")
    return value


def as_int(value: Any, name: str = "answer") -> int:
    value = _unwrap(value, name)
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise AssertionError(f"{name} should be a whole number (int), got {type(value).__name__} {value!r}")
    return value


def as_choice(value: Any, choices: Collection[str], name: str = "answer") -> str:
    """A plain lower-case string that must be one of `choices`."""
    if type(value) is not str:
        raise AssertionError(f"{name} should be a string, one of {sorted(choices)}; "
                             f"got {type(value).__name__}")
    text = value.strip().lower()
    if text not in choices:
        raise AssertionError(f"{name}={value!r} is not one of {sorted(choices)}")
    return text


def as_int_tuple(value: Any, length: int | None = None, name: str = "answer") -> tuple[int, ...]:
    if type(value) not in (tuple, list):
        raise AssertionError(f"{name} should be a tuple of ints, got {type(value).__name__}")
    items = tuple(as_int(v, f"{name}[{i}]") for i, v in enumerate(value))
    if length is not None and len(items) != length:
        raise AssertionError(f"{name} should have {length} entries, got {len(items)}")
    return items


def ask_student(fn: Callable[..., Any], call: str, *args: Any) -> Any:
    """`fn(*args)`, a function of the notebook; an error it raises becomes an AssertionError
    that names the call (`call`, e.g. "gb_per_gpu(4096, 2)"), so the input a hidden test
    drew at grading time is in the message."""
    try:
        return fn(*args)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the student's error, reported with its input
        raise AssertionError(f"{call} raised {type(exc).__name__}: {exc}") from None


def plain_tensor(value: object) -> str | dict[str, list[Any]]:
    """A tensor a rank sends back, as plain values: {"shape", "values" (flattened
    float64)}; anything else as its type name. `tensor_of` turns it back."""
    import torch

    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return {"shape": list(value.shape), "values": value.detach().to(torch.float64).reshape(-1).tolist()}


def tensor_of(value: object) -> torch.Tensor | None:
    """What `plain_tensor` sent, as a float64 tensor again; None where it is not one
    (a type name) or is malformed."""
    import torch

    if (type(value) is not dict or type(value.get("shape")) is not list or type(value.get("values")) is not list
            or any(type(v) is not float for v in value["values"])):
        return None
    try:
        return torch.tensor(value["values"], dtype=torch.float64).reshape(value["shape"])
    except (RuntimeError, TypeError, ValueError):
        return None


def same_as_reference(got: object, want: torch.Tensor) -> bool:
    """A rank's tensor against the grader's one-process float64 reference: same shape, and
    equal up to rounding (the same sums taken in another order). Drops 2-5 judge with it."""
    import torch

    return (isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want.shape)
            and torch.allclose(got.to(torch.float64), want, rtol=1e-10, atol=1e-12))


def assert_close(answer: Any, expected: float, *, rel: float = 1e-6, name: str = "answer", hint: str = "") -> None:
    """Compare a plain number with a reference to a relative tolerance."""
    got = as_number(answer, name)
    if not math.isclose(got, float(expected), rel_tol=rel, abs_tol=1e-12):
        raise AssertionError(f"{name}={got:g} is not right. {hint}".strip())
