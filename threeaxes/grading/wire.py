"""How a test cell reads a student's answers from outside the student's kernel.

When a submission is graded (`autograder/judge.py`), its test cells do not run
in the student's kernel: code there can rewrite later cells, patch `threeaxes`,
builtins or IPython, and so decide its own grade. They run in the grader's own
process, where each name the cell uses is asked of the kernel:

    grader                                        student's kernel (sandboxed)
    Answers.get(["all_reduce_sizes", "cfg"])  ->  reply(): encode each value
    Remote("all_reduce_sizes")([4, 4, 8], 8)  ->  reply(): call it, encode the result
    check_on_ranks(check, 4, Remote(...))     ->  reply(): run the check on ranks there

Only JSON comes back (`encode`): numbers, strings, lists, tuples, dicts, sets,
tensors as their values, dataclasses as their fields, and for a library
function or class its import path. The grader rebuilds values from it
(`decode`) with its own copy of the library; a function of the student's
becomes a `Remote` that calls back into the kernel; anything else becomes an
`Opaque` placeholder that fails the first check it meets. Nothing the kernel
sends is ever executed or unpickled by the grader, so the worst a tampered
kernel can do is send wrong answers.

The same path also runs inside one process (`LocalKernel`, for the tests of the
wire itself); `python -m autograder.judge_check` runs a notebook the real way.
"""
from __future__ import annotations

import base64
import builtins
import contextlib
import dataclasses
import functools
import importlib
import io
import json
import pickle
import secrets
import types

from threeaxes.grading.ranks import is_remote

# Packages the grader will import a function, class or dataclass from by name.
TRUSTED_PACKAGES = {"threeaxes", "torch", "numpy", "math", "fractions", "statistics", "collections",
                    "dataclasses", "functools", "itertools", "operator", "random"}
MAX_TENSOR_VALUES = 4_000_000


# -- inside the student's kernel ------------------------------------------------------------
_handles: list = []   # objects the grader holds a Remote of, by index


def encode(value, depth: int = 0):
    """A JSON-able description of `value` (see the module docstring)."""
    if depth > 20:
        return {"__opaque__": "a structure nested over 20 deep"}
    kind = type(value)
    if kind in (type(None), bool, int, float, str):
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"__tuple__": [encode(v, depth + 1) for v in value]}
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):   # a NamedTuple: its class and values
        return {"__namedtuple__": _import_path(kind), "values": [encode(v, depth + 1) for v in value]}
    if kind in (set, frozenset):
        return {"__set__": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"__dict__": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, types.ModuleType):
        return {"__module__": value.__name__}
    module = kind.__module__
    if module == "fractions" and kind.__name__ == "Fraction":   # exact bubbles of the schedules
        return {"__fraction__": [value.numerator, value.denominator]}
    if module == "torch" and kind.__name__ == "dtype":
        return {"__dtype__": str(value).removeprefix("torch.")}
    # tensors, numpy arrays and numpy scalars (shape ()): their values, flat, and the shape
    if module.startswith(("torch", "numpy")) and hasattr(value, "tolist") and hasattr(value, "shape"):
        if _numel(value) > MAX_TENSOR_VALUES:
            return {"__opaque__": f"{kind.__name__} of shape {tuple(value.shape)}"}
        dtype = str(value.dtype).removeprefix("torch.")
        return {"__tensor__": {"dtype": dtype, "shape": list(value.shape),
                               "data": _flat(value.tolist())}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dataclass__": _import_path(kind),
                "fields": {f.name: encode(getattr(value, f.name), depth + 1)
                           for f in dataclasses.fields(value)}}
    if isinstance(value, type) or isinstance(value, (types.FunctionType, types.BuiltinFunctionType,
                                                      types.MethodType, functools.partial)):
        path = _import_path(value)
        if path and _importable(path):
            return {"__import__": path}
        if isinstance(value, type):
            return {"__opaque__": value.__name__}
        _handles.append(value)
        return {"__remote__": len(_handles) - 1, "name": getattr(value, "__name__", kind.__name__)}
    return {"__opaque__": kind.__name__}


def _numel(value) -> int:
    n = 1
    for s in value.shape:
        n *= int(s)
    return n


def _flat(values):
    if not isinstance(values, list):
        return [values]
    out = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, list) else [v])
    return out


def _import_path(obj) -> str | None:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _importable(path: str) -> bool:
    """True if `path` names a trusted package's object that the grader can import as is."""
    module = path.split(":")[0]
    return module.split(".")[0] in TRUSTED_PACKAGES and module != "__main__"


def reply(namespace: dict, request: str, nonce: str) -> None:
    """Answer one request from the grader; prints `nonce JSON nonce`."""
    req = json.loads(request)
    try:
        if req["op"] == "get":
            answer = {name: encode(namespace[name]) if name in namespace else {"__missing__": name}
                      for name in req["names"]}
        elif req["op"] == "call":
            args, kwargs = _unpickle_args(req["args"])
            answer = encode(_handles[req["handle"]](*args, **kwargs))
        elif req["op"] == "on_ranks":
            from threeaxes.grading import check_on_ranks

            module, name = req["check"].split(":")
            check = getattr(importlib.import_module(module), name)
            args, _ = _unpickle_args(req["args"])
            answer = encode(check_on_ranks(check, req["world_size"], *args, timeout=req["timeout"]))
        else:
            answer = {"__raised__": [["ValueError"], f"unknown request {req['op']!r}"]}
    except BaseException as exc:  # the grader decides what a failure means
        answer = {"__raised__": [[c.__name__ for c in type(exc).__mro__], str(exc)[:2000]]}
    print(f"{nonce}{json.dumps(answer)}{nonce}")


def _unpickle_args(text: str):
    """Arguments the grader sent (pickled by the grader, so safe to load here); a
    `Remote` among them is the kernel's own object again."""
    class Loader(pickle.Unpickler):
        def persistent_load(self, pid):
            return _handles[pid]
    return Loader(io.BytesIO(base64.b64decode(text))).load()


# -- in the grader ---------------------------------------------------------------------------
class KernelGone(AssertionError):
    """The student's kernel did not answer (it exited, hung or garbled its reply)."""


class Opaque:
    """A value the kernel could not send as data: any check on it fails."""

    def __repr__(self):
        return f"<{type(self).__name__} from the notebook>"


class Remote:
    """A function of the student's, called in the student's kernel."""

    is_remote = True   # what `is_remote` looks for: the class itself changes when a
                       # test cell imports threeaxes afresh

    def __init__(self, answers: "Answers", handle: int, name: str):
        self._answers, self._handle, self.__name__ = answers, handle, name
        self.__qualname__, self.__module__ = name, "__main__"

    def __call__(self, *args, **kwargs):
        return self._answers.request({"op": "call", "handle": self._handle,
                                      "args": self._answers.pickle_args(args, kwargs)})

    def __repr__(self):
        return f"<student function {self.__name__}>"


class Answers:
    """The grader's side of the wire to one kernel. `run_code(code, timeout)` runs
    code there and returns what it printed (None if the kernel is gone)."""

    def __init__(self, run_code, timeout: float = 90.0):
        self.run_code, self.timeout = run_code, timeout

    def get(self, names) -> dict:
        return self.request({"op": "get", "names": list(names)}, raw=True)

    def on_ranks(self, check, world_size: int, args: tuple, timeout: float):
        return self.request({"op": "on_ranks", "check": f"{check.__module__}:{check.__name__}",
                             "world_size": world_size, "args": self.pickle_args(args, {}),
                             "timeout": timeout}, timeout=timeout + 30)

    def request(self, req: dict, raw: bool = False, timeout: float | None = None):
        nonce = secrets.token_hex(8)
        code = ("import threeaxes.grading.wire as __threeaxes_wire\n"
                f"__threeaxes_wire.reply(globals(), {json.dumps(json.dumps(req))}, {nonce!r})")
        printed = self.run_code(code, timeout or self.timeout)
        if printed is None:
            raise KernelGone("the notebook's kernel stopped answering (did a cell exit, "
                             "hang or crash the kernel?)")
        parts = printed.split(nonce)
        try:
            data = json.loads(parts[1])
        except (IndexError, ValueError):
            raise KernelGone("the notebook's kernel sent no readable answer") from None
        if raw:   # names the notebook does not define are left out
            return {name: self.decode(v) for name, v in data.items()
                    if not (type(v) is dict and "__missing__" in v)}
        return self.decode(data)

    def pickle_args(self, args, kwargs) -> str:
        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                return obj._handle if is_remote(obj) else None
        buf = io.BytesIO()
        Pickler(buf).dump((tuple(args), dict(kwargs)))
        return base64.b64encode(buf.getvalue()).decode()

    def decode(self, data):
        if type(data) in (type(None), bool, int, float, str):
            return data
        if type(data) is list:
            return [self.decode(v) for v in data]
        if type(data) is not dict or len(data) == 0:
            return _opaque("unreadable")
        tag, body = next(iter(data.items()))
        if tag == "__tuple__":
            return tuple(self.decode(v) for v in body)
        if tag == "__set__":
            return {self.decode(v) for v in body}
        if tag == "__dict__":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in body}
        if tag == "__tensor__":
            return _tensor(body)
        if tag == "__fraction__" and type(body) is list and len(body) == 2 \
                and all(type(v) is int for v in body) and body[1] != 0:
            from fractions import Fraction
            return Fraction(*body)
        if tag == "__dtype__":
            import torch
            return getattr(torch, str(body))
        if tag == "__module__" and str(body).split(".")[0] in TRUSTED_PACKAGES:
            return importlib.import_module(body)
        if tag == "__import__":
            return _import(body)
        if tag == "__dataclass__":
            return self._dataclass(body, data.get("fields", {}))
        if tag == "__namedtuple__":
            cls = _import(body)
            values = [self.decode(v) for v in data.get("values", [])]
            if isinstance(cls, type) and issubclass(cls, tuple) and len(values) == len(getattr(cls, "_fields", ())):
                return tuple.__new__(cls, values)
            return _opaque(str(body))
        if tag == "__remote__":
            return Remote(self, int(body), str(data.get("name", "function")))
        if tag == "__raised__":
            raise _exception(*body)
        if tag == "__missing__":
            raise NameError(f"name {body!r} is not defined in the notebook")
        return _opaque(str(body) if tag == "__opaque__" else "unreadable")

    def _dataclass(self, path, fields):
        cls = _import(path)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            return _opaque(str(path))
        obj = cls.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(obj, name, self.decode(value))
        return obj


def _import(path):
    module, _, qualname = str(path).partition(":")
    if module.split(".")[0] not in TRUSTED_PACKAGES:
        return _opaque(qualname or module)
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return _opaque(qualname)
    return obj


def _opaque(type_name: str):
    """An Opaque whose type carries the notebook value's type name (for messages
    like "should be a number, got ToyTransformer")."""
    name = type_name if type_name.isidentifier() else "Opaque"
    return type(name, (Opaque,), {})()


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


def _tensor(body):
    import torch

    dtype = getattr(torch, str(body["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        return _opaque("Tensor")
    return torch.tensor(body["data"], dtype=dtype).reshape(body["shape"])


def _exception(names, message):
    """The student's exception as the nearest builtin type of its class's MRO (a test
    may expect a ValueError, and a subclass of ValueError is one), else RuntimeError."""
    names = [str(n) for n in names] if isinstance(names, list) else [str(names)]
    for name in names:
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            return kind(message if name == names[0] else f"{names[0]}: {message}")
    return RuntimeError(f"{names[0]}: {message}")


# -- both sides in one process ---------------------------------------------------------------
class LocalKernel:
    """`run_code` on a namespace in this process: the wire without the sandbox."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def __call__(self, code: str, timeout: float) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, self.namespace)
        return out.getvalue()
