"""What a kernel's reply may hold, as the grader rebuilds it (`threeaxes.grading.wire`)."""
from __future__ import annotations

import dataclasses
import importlib
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # for the hints only: torch is imported where a tensor is built
    import torch

MAX_REPLY_CHARS = 16_000_000     # the JSON text of one reply; a longer one is refused unread
MAX_TENSOR_VALUES = 500_000      # values of one tensor (about 12 MB of JSON at most)
MAX_DEPTH = 40                   # nesting of one reply

# torch dtypes a tensor or a dtype answer may name (numpy's names for the same are equal)
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64")

# The course's result types that cross the wire, and why. Both directions use it: the
# arguments and results of a withheld function (autograder/judging/borrowed.py: the kernel's stub
# asks the grader's oracle) and a test cell's answers, which the hidden tests read as
# numbers, strings, dicts, lists and tensors only (autograder/references, source/*/).
RECORDS = {
    "threeaxes.cost.presets:Model": "the model plan, search, judge and stage_memory take",
    "threeaxes.cost.presets:Cluster": "the cluster plan, search, judge and group_link take",
    "threeaxes.cost.memory:ModelStateBytes": "what model_state_bytes and rank_state_bytes return",
    "threeaxes.cost.memory:MemoryBreakdown": "what stage_memory returns; a PlanResult's memory",
    "threeaxes.cost.activations:ActivationBytes": "what activation_bytes returns",
    "threeaxes.cost.evaluate:TimeBreakdown": "a PlanResult's time",
    "threeaxes.cost.evaluate:PlanResult": "what plan, search and best_configuration return",
    "threeaxes.cost.verdict:Verdict": "what judge returns",
    "threeaxes.cost.constraints:Violation": "a Verdict's broken rules",
    "threeaxes.cost.network:Link": "what group_link returns",
    "threeaxes.toy:ToyConfig": "the toy's shape drop03.tp_block_collectives takes",
    "threeaxes.dims:ParallelDims": "the layout ParallelDims.all_groups is a method of (no mesh)",
    "threeaxes.pipeline.schedules:Action": "a Plan's slots",
    "threeaxes.pipeline.schedules:Plan": "what the schedules return; bubble_fraction, simulate and "
                                         "peak_in_flight take it (its constructor checks every slot)",
    "threeaxes.pipeline.simulate:Simulation": "what simulate returns",
    "threeaxes.trace:Event": "a Simulation's events",
}
# The fields of a record that is neither a dataclass nor a NamedTuple: its constructor's
# parameters, each read back from the object as an attribute of the same name.
CONSTRUCTOR_FIELDS = {"threeaxes.pipeline.schedules:Plan": ("slots", "name")}
# Sizes a record's whole-number fields may not pass before its constructor sees them: a toy
# is small, and ToyConfig's error for a bad n_heads lists every divisor of d_model; a plan's
# checks walk every (stage, microbatch) up to the largest.
MAX_FIELD_INT = {"threeaxes.toy:ToyConfig": 1 << 16, "threeaxes.pipeline.schedules:Action": 1 << 16}
# Fields that must be of one type before the constructor sees them (a plan's name is printed).
FIELD_TYPES = {"threeaxes.pipeline.schedules:Plan": {"name": str}}


class Opaque:
    """A value the kernel could not send as data, or sent malformed. Any use of it as
    a value (a comparison, arithmetic, truth, iteration, a call) fails saying why."""

    def __init__(self, why: str = "it is not plain data") -> None:
        self.__dict__["why"] = why

    def _fail(self, *args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"{type(self).__name__} from the notebook cannot be checked: {self.why}")

    __bool__ = __len__ = __iter__ = __contains__ = __call__ = __getitem__ = _fail
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _fail
    __float__ = __int__ = __index__ = __complex__ = __round__ = __neg__ = __abs__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __pow__ = _fail
    __hash__ = object.__hash__   # by identity: it may sit in a set or be a dict's key

    def __getattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} from the notebook has no {name!r}: {self.why}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("an Opaque placeholder cannot be changed")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} from the notebook: {self.why}>"


_OPAQUE_TYPES: dict[str, type[Opaque]] = {}


def opaque(type_name: str, why: str | None = None) -> Opaque:
    """An Opaque whose type carries the notebook value's type name (for messages such as
    "should be a number, got ToyTransformer"); a bounded number of such names is kept."""
    name = str(type_name)[:80]
    if not name.isidentifier():
        name = "Opaque"
    kind = _OPAQUE_TYPES.get(name)
    if kind is None:
        kind = Opaque
        if len(_OPAQUE_TYPES) < 256:
            kind = _OPAQUE_TYPES[name] = type(name, (Opaque,), {"__module__": __name__})
    return kind(why or f"a {name} is not plain data (numbers, strings, lists, dicts, tensors)")


def tensor(body: Any) -> torch.Tensor | Opaque:
    """A new tensor from a reply's {"dtype", "shape", "data"}: the values checked, flat,
    against the shape; anything else an Opaque."""
    import torch

    if type(body) is not dict or set(body) != {"dtype", "shape", "data"}:
        return opaque("Tensor", "a tensor sent without its dtype, shape and values")
    dtype, shape, data = body["dtype"], body["shape"], body["data"]
    if dtype not in DTYPES:
        return opaque("Tensor", f"a tensor of dtype {str(dtype)[:40]!r}, not one of {', '.join(DTYPES)}")
    if type(shape) is not list or len(shape) > 16 or any(type(s) is not int or s < 0 for s in shape):
        return opaque("Tensor", "a tensor whose shape is not a list of sizes")
    numel = 1
    for s in shape:
        numel *= s
    if numel > MAX_TENSOR_VALUES or type(data) is not list or len(data) != numel:
        return opaque("Tensor", f"a tensor of shape {tuple(shape)} sent with "
                                f"{len(data) if type(data) is list else 'no'} values")
    kinds = (bool,) if dtype == "bool" else (bool, int) if "int" in dtype else (bool, int, float)
    if any(type(v) not in kinds for v in data):
        return opaque("Tensor", f"a {dtype} tensor holding values that are not {dtype} numbers")
    try:
        return torch.tensor(data, dtype=getattr(torch, dtype)).reshape(shape)
    except (RuntimeError, OverflowError, TypeError, ValueError) as exc:
        return opaque("Tensor", f"a tensor torch could not build: {str(exc)[:200]}")


def dtype_named(name: object) -> torch.dtype | Opaque:
    """A torch dtype by one of the names in `DTYPES`."""
    import torch

    if name in DTYPES:
        return getattr(torch, name)
    return opaque("dtype", f"dtype {str(name)[:40]!r} is not one of {', '.join(DTYPES)}")


def fraction(body: Any) -> Fraction | Opaque:
    if type(body) is list and len(body) == 2 and all(type(v) is int for v in body) and body[1] != 0:
        return Fraction(*body)
    return opaque("Fraction", "a Fraction that is not two whole numbers")


def record_class(path: str) -> type:
    """The class `RECORDS` names by `path`, from the grader's own package."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def record_fields(cls: Any) -> tuple[str, ...]:   # a NamedTuple class, a dataclass or a constructor
    """The declared fields of a record: of a NamedTuple or a dataclass, in order, else its
    constructor's (`CONSTRUCTOR_FIELDS`)."""
    declared = CONSTRUCTOR_FIELDS.get(f"{cls.__module__}:{cls.__qualname__}")
    if declared is not None:
        return declared
    if issubclass(cls, tuple):
        return tuple(cls._fields)
    return tuple(f.name for f in dataclasses.fields(cls))


def record(path: object, fields: dict[str, Any]) -> Any:
    """The record `path` names, built by its constructor from `fields` (already decoded);
    an Opaque when the name is not in `RECORDS`, the fields are not exactly its own, a
    value is not data, or the constructor refuses them."""
    if type(path) is not str or path not in RECORDS:
        return opaque(str(path).rpartition(":")[2][:80] or "Opaque",
                      f"{str(path)[:80]!r} is not one of the course's result types")
    cls = record_class(path)
    declared = record_fields(cls)
    if set(fields) != set(declared):
        return opaque(cls.__name__, f"a {cls.__name__} must have exactly the fields {', '.join(declared)}")
    bad = next((name for name in declared if not is_data(fields[name])), None)
    if bad is not None:
        return opaque(cls.__name__, f"{cls.__name__}.{bad} is not plain data")
    limit = MAX_FIELD_INT.get(path)
    big = next((name for name in declared
                if limit and type(fields[name]) is int and abs(fields[name]) > limit), None)
    if big is not None:
        return opaque(cls.__name__, f"{cls.__name__}.{big}={fields[big]} is over {limit}")
    wrong = next((name for name, kind in FIELD_TYPES.get(path, {}).items() if type(fields[name]) is not kind), None)
    if wrong is not None:
        return opaque(cls.__name__, f"{cls.__name__}.{wrong} must be a {FIELD_TYPES[path][wrong].__name__}")
    try:
        return cls(**fields)
    except Exception as exc:  # noqa: BLE001 - its own checks refused the values
        return opaque(cls.__name__, f"{cls.__name__}(...) refused its fields: {str(exc)[:200]}")


def is_data(value: Any, depth: int = 0) -> bool:
    """True for what the decoder builds as data: no Opaque, no Remote, no callable.

    A reply is JSON written by code the student controls, so the grader reads it as
    data and builds every value with its own code: JSON's numbers, strings, lists and
    None; tuples, sets and dicts (any hashable keys); tensors from their values
    (`tensor`); Fractions; torch dtypes by a name of `DTYPES`; and the course's own
    result types of `RECORDS`, each built by its own constructor from exactly its
    declared fields, whose values are data themselves (`record`). No name the reply
    spells is looked up in a module: a record's name is a key of `RECORDS`, whose
    classes are named here. Anything else becomes an `Opaque` placeholder, which
    fails the first check that uses it and says why.
    """
    import torch

    if depth > MAX_DEPTH:
        return False
    kind = type(value)
    if kind in (type(None), bool, int, float, str, Fraction, torch.dtype, torch.Tensor):
        return True
    if kind in (list, tuple, set, frozenset):
        return all(is_data(v, depth + 1) for v in value)
    if kind is dict:
        return all(is_data(k, depth + 1) and is_data(v, depth + 1) for k, v in value.items())
    path = f"{kind.__module__}:{kind.__qualname__}"
    if path in RECORDS and kind is record_class(path):   # built by `record`, its fields checked
        return all(is_data(getattr(value, f), depth + 1) for f in record_fields(kind))
    return False
