"""How a test cell reads a student's answers from outside the student's kernel, as data
(why, and the contract a reply keeps: CONTRIBUTING.md, "Test cells run in the grader").

    grader                                        student's kernel (sandboxed)
    Answers.get(["all_reduce_sizes", "cfg"])  ->  reply(): encode each value
    Remote(...)([4, 4, 8], 8)                 ->  reply(): call it there, encode the result
    check_on_ranks(check, 4, Remote(...))     ->  reply(): run the check on ranks there"""
from __future__ import annotations

import base64
import builtins
import contextlib
import dataclasses
import importlib
import io
import json
import pickle
import secrets
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar

from threeaxes.grading.ranks import is_remote
from threeaxes.grading.wire import data as wire_data
from threeaxes.grading.wire.data import MAX_TENSOR_VALUES, Opaque, opaque  # noqa: F401  (re-exported)

# -- inside the student's kernel ------------------------------------------------------------
_handles: list[Any] = []   # objects the grader holds a Remote of, by index


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of `value` (the wire's contract: CONTRIBUTING.md)."""
    if depth > 20:
        return {"__opaque__": "a structure nested over 20 deep"}
    kind = type(value)
    if kind in (type(None), bool, int, float, str):   # NaN and infinities too: Python's JSON reads them
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"__tuple__": [encode(v, depth + 1) for v in value]}
    if kind in (set, frozenset):
        return {"__set__": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"__dict__": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    record = _record_path(kind)
    if record is not None:
        return {"__record__": record, "fields": {f: encode(getattr(value, f), depth + 1)
                                                 for f in wire_data.record_fields(kind)}}
    if kind.__module__ == "fractions" and kind.__name__ == "Fraction":   # exact bubbles of the schedules
        return {"__fraction__": [value.numerator, value.denominator]}
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and kind is torch.dtype:
        return {"__dtype__": str(value).removeprefix("torch.")}
    # tensors, numpy arrays and numpy scalars (shape ()): their values, flat, and the shape
    if (torch is not None and isinstance(value, torch.Tensor)) or \
            (numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic))):
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in wire_data.DTYPES or _numel(value) > MAX_TENSOR_VALUES:
            return {"__opaque__": f"{kind.__name__} of dtype {dtype} and shape {tuple(value.shape)}"}
        return {"__tensor__": {"dtype": dtype, "shape": [int(s) for s in value.shape],
                               "data": _flat(value.tolist())}}
    if callable(value) and not _is_model(value, torch):   # functions, methods, classes, ...
        _handles.append(value)
        return {"__remote__": len(_handles) - 1, "name": str(getattr(value, "__name__", kind.__name__)),
                "module": str(getattr(value, "__module__", "")),
                "qualname": str(getattr(value, "__qualname__", ""))}
    return {"__opaque__": kind.__name__}


def _record_path(kind: type) -> str | None:
    """"module:qualname" of a course result type (`wire_data.RECORDS`), else None."""
    path = f"{getattr(kind, '__module__', '')}:{getattr(kind, '__qualname__', '')}"
    if path in wire_data.RECORDS and (dataclasses.is_dataclass(kind) or hasattr(kind, "_fields")
                                      or path in wire_data.CONSTRUCTOR_FIELDS):
        return path
    return None


def _is_model(value: object, torch: ModuleType | None) -> bool:
    """An nn.Module is callable, but it is a value (a model), not an answer's function."""
    return torch is not None and isinstance(value, torch.nn.Module)


def _numel(value: Any) -> int:
    n = 1
    for s in value.shape:
        n *= int(s)
    return n


def _flat(values: Any) -> list[Any]:
    if not isinstance(values, list):
        return [values]
    out: list[Any] = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, list) else [v])
    return out


def reply(namespace: dict[str, Any], request: str, nonce: str) -> None:
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
        text = json.dumps(answer)
    except BaseException as exc:  # noqa: BLE001 - the grader decides what a failure means
        text = json.dumps({"__raised__": [[c.__name__ for c in type(exc).__mro__], str(exc)[:2000]]})
    print(f"{nonce}{text}{nonce}")


def _unpickle_args(text: str) -> Any:
    """Arguments the grader sent (pickled by the grader, so safe to load here); a
    `Remote` among them is the kernel's own object again."""
    class Loader(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            return _handles[pid]
    return Loader(io.BytesIO(base64.b64decode(text))).load()


# -- in the grader ---------------------------------------------------------------------------
class KernelGone(AssertionError):
    """The student's kernel did not answer (it exited, hung or garbled its reply)."""


class ReplyRefused(AssertionError):
    """The kernel's reply was longer than the grader reads (`wire_data.MAX_REPLY_CHARS`)."""


class Remote:
    """A function, method or class of the notebook's (a student's or a library's): a handle,
    called in the student's kernel; what it returns comes back as data. `__module__` and
    `__qualname__` are what the kernel says the callable is: a label (for messages and
    for spotting an answer that is a withheld function), never resolved to an object."""

    is_remote = True   # what `is_remote` looks for: the class itself changes when a
                       # test cell imports threeaxes afresh

    def __init__(self, answers: Answers, handle: int, name: str, module: str = "__main__",
                 qualname: str | None = None) -> None:
        self._answers, self._handle, self.__name__ = answers, handle, name
        self.__qualname__, self.__module__ = qualname or name, module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._answers.run_code is None:
            raise KernelGone(f"{self.__name__} lives in a kernel this grader does not reach")
        return self._answers.request({"op": "call", "handle": self._handle,
                                      "args": self._answers.pickle_args(args, kwargs)})

    def __repr__(self) -> str:
        return f"<notebook function {self.__name__}>"


class Answers:
    """The grader's side of the wire to one kernel. `run_code(code, timeout)` runs
    code there and returns what it printed (None if the kernel is gone)."""

    def __init__(self, run_code: Callable[[str, float], str | None] | None, timeout: float = 90.0) -> None:
        self.run_code, self.timeout = run_code, timeout

    def get(self, names: Iterable[str]) -> dict[str, Any]:
        """The notebook's values of `names`; a name it does not define is left out."""
        names = list(names)
        data = self.request({"op": "get", "names": names}, raw=True)
        if type(data) is not dict:
            raise KernelGone("the notebook's kernel sent no readable answer")
        if set(data) == {"__raised__"} and "__raised__" not in names:
            self.decode(data)   # raises the kernel's error
        return {name: self.decode(data[name]) for name in names     # asked for, nothing else
                if name in data and not (type(data[name]) is dict and "__missing__" in data[name])}

    def on_ranks(self, check: Callable[..., Any], world_size: int, args: tuple[Any, ...], timeout: float) -> Any:
        return self.request({"op": "on_ranks", "check": f"{check.__module__}:{check.__name__}",
                             "world_size": world_size, "args": self.pickle_args(args, {}),
                             "timeout": timeout}, timeout=timeout + 30)

    def request(self, req: dict[str, Any], raw: bool = False, timeout: float | None = None) -> Any:
        if self.run_code is None:     # a decoder only (the oracle's): no kernel to ask
            raise KernelGone("these answers were read with no kernel behind them; nothing can be asked of one")
        nonce = secrets.token_hex(8)
        code = ("import threeaxes.grading.wire as __threeaxes_wire\n"
                f"__threeaxes_wire.reply(globals(), {json.dumps(json.dumps(req))}, {nonce!r})")
        printed = self.run_code(code, timeout or self.timeout)
        if printed is None:
            raise KernelGone("the notebook's kernel stopped answering (did a cell exit, "
                             "hang or crash the kernel?)")
        return self.read(printed, nonce, raw)

    def read(self, printed: str, nonce: str, raw: bool = False) -> Any:
        """The reply between the two nonces, parsed if it is not too long, then decoded."""
        start = printed.find(nonce)
        end = printed.find(nonce, start + len(nonce)) if start >= 0 else -1
        if end < 0:
            raise KernelGone("the notebook's kernel sent no readable answer")
        size = end - start - len(nonce)
        if size > wire_data.MAX_REPLY_CHARS:
            raise ReplyRefused(f"the notebook's answer is {size / 1e6:.0f} MB of data, over the "
                               f"{wire_data.MAX_REPLY_CHARS / 1e6:.0f} MB the grader reads; "
                               "answers are numbers, short lists and small tensors")
        try:
            data = json.loads(printed[start + len(nonce):end])
        except (ValueError, RecursionError):
            raise KernelGone("the notebook's kernel sent no readable answer") from None
        return data if raw else self.decode(data)

    def pickle_args(self, args: Iterable[Any], kwargs: dict[str, Any]) -> str:
        class Pickler(pickle.Pickler):
            def persistent_id(self, obj: Any) -> Any:
                return obj._handle if is_remote(obj) else None
        buf = io.BytesIO()
        Pickler(buf).dump((tuple(args), dict(kwargs)))
        return base64.b64encode(buf.getvalue()).decode()

    def decode(self, data: Any, depth: int = 0) -> Any:
        """Plain data from a reply's JSON (the wire's contract: CONTRIBUTING.md); a raised error or a
        missing name at the top raises."""
        kind = type(data)
        if kind in (type(None), bool, int, float, str):
            return data
        if depth > wire_data.MAX_DEPTH:
            return opaque("Opaque", f"a structure nested over {wire_data.MAX_DEPTH} deep")
        if kind is list:
            return [self.decode(v, depth + 1) for v in data]
        tags = [k for k in data if k.startswith("__")] if kind is dict else []
        if len(tags) != 1 or not set(data) - {tags[0]} <= _EXTRAS.get(tags[0], set()):
            return opaque("Opaque", "an unreadable value")
        tag, body = tags[0], data[tags[0]]
        if tag == "__tuple__" and type(body) is list:
            return tuple(self.decode(v, depth + 1) for v in body)
        if tag == "__set__" and type(body) is list:
            return _hashed(lambda: {self.decode(v, depth + 1) for v in body}, "set")
        if tag == "__dict__" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            return _hashed(lambda: {self.decode(k, depth + 1): self.decode(v, depth + 1) for k, v in body},
                           "dict")
        if tag == "__tensor__":
            return wire_data.tensor(body)
        if tag == "__fraction__":
            return wire_data.fraction(body)
        if tag == "__dtype__":
            return wire_data.dtype_named(body)
        if tag == "__record__" and type(data.get("fields")) is dict:   # fields' names checked there
            return wire_data.record(body, {name: self.decode(v, depth + 1)
                                           for name, v in data["fields"].items()})
        if tag == "__remote__" and type(body) is int and 0 <= body < 2**31:
            name = str(data.get("name", "function"))[:100]
            return Remote(self, body, name if name.isprintable() else "function",
                          _label(data.get("module"), "__main__"), _label(data.get("qualname"), None))
        if tag == "__raised__" and depth == 0 and type(body) is list and len(body) == 2:
            raise _exception(*body)
        if tag == "__missing__" and depth == 0:
            raise NameError(f"name {str(body)[:100]!r} is not defined in the notebook")
        if tag == "__opaque__":
            return opaque(str(body))
        return opaque("Opaque", "an unreadable value")


# keys beside the tag
_EXTRAS: dict[str, set[str]] = {"__record__": {"fields"}, "__remote__": {"name", "module", "qualname"}}


_Default = TypeVar("_Default", str, None)


def _label(text: object, default: _Default) -> str | _Default:
    """A name the kernel gave (a dotted Python name, for messages only), else `default`."""
    if type(text) is str and 0 < len(text) <= 200 and all(p.isidentifier() for p in text.split(".")):
        return text
    return default


def _hashed(build: Callable[[], Any], what: str) -> Any:
    """A set or dict built by `build`, or an Opaque where a member cannot be hashed."""
    try:
        return build()
    except TypeError:
        return opaque(what, f"a {what} whose members are not plain, hashable values")


def _exception(names: object, message: object) -> Exception:
    """The student's exception as the nearest builtin type of its class's MRO (a test
    may expect a ValueError, and a subclass of ValueError is one), else RuntimeError."""
    names = [str(n)[:100] for n in names][:50] if isinstance(names, list) else [str(names)[:100]]
    names = names or ["RuntimeError"]
    message = str(message)[:2000]
    for name in names:
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            with contextlib.suppress(Exception):   # a builtin that wants other arguments: the next
                return kind(message if name == names[0] else f"{names[0]}: {message}")
    return RuntimeError(f"{names[0]}: {message}")


# -- both sides in one process ---------------------------------------------------------------
class LocalKernel:
    """`run_code` on a namespace in this process: the wire without the sandbox."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace

    def __call__(self, code: str, timeout: float) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, self.namespace)
        return out.getvalue()
