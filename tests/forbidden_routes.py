"""Which public callables of `threeaxes` give an exercise's answer: found by trying them.

For each exercise of a drop's grading.json whose visible check compares plain values (not
ranks, not a configuration), the right value on each visible case comes from the drop's
reference (`autograder/references/dropNN.py`, named by "visible"/"reference": as
`python -m autograder.cases` stored it, or computed here for a sealed answer), never from the
package. Then every public function of the package is called with the case's arguments;
where one returns an object of the package, each of its public methods is called with no
arguments and with the case's, and each function that takes it with it (and a stage 0);
where the first argument names a function of the package ("gpipe"), that function is called
with the rest; where it names a preset ("llama-30b"), every function is called with the
preset's object (a `get_*` function's) in its place. A callable whose value (or, for a record
or a dict, the answer's keys of it, or for a number one of its fields) is the answer on every
case is a route to the answer; for a dict of numbers, so is one that gives one of its entries
on every case (its main step).

Each exercise is tried with the functions it withholds made to raise, as the kernel's stubs
refuse them, so a route that reaches one at any depth fails and what is left is open; drop
4's bubble and stages are also tried with nothing withheld, to show the probe finds the routes
a reader knows. Run in a subprocess (`python tests/forbidden_routes.py [dropNN ...]`) with an
address-space limit and one second per call, it prints {"open": {"dropNN/answer": [route,
...]}, "unwithheld": {...}} as JSON. Functions that start ranks, draw, open widgets or write
files are not tried (`SKIPPED_MODULES`, `_starts_ranks`): they are slow, and each of those
that computes a bubble or a byte count does it through the cost model or the schedules,
which are tried.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import pkgutil
import re
import resource
import signal
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # run as a script in a fresh process: autograder is imported from here
from forbidden_routes_match import answers, plain  # noqa: E402

from autograder.course import CASES, graded_drops, grading_file  # noqa: E402
from autograder.spec import definition, load_exercises  # noqa: E402

SKIPPED_MODULES = ("threeaxes.launch", "threeaxes.widgets", "threeaxes.plots", "threeaxes.display",
                   "threeaxes.train", "threeaxes.train_reference", "threeaxes.progress", "threeaxes.practice",
                   "threeaxes.course", "threeaxes.comms", "threeaxes.trace",
                   "threeaxes.grading.ranks", "threeaxes.grading.wire", "threeaxes.grading.wire.data",
                   "threeaxes.grading.wire.oracle", "threeaxes.grading.own_work", "threeaxes.grading.shown",
                   "threeaxes.grading.visible", "threeaxes.grading.visible_config",
                   "threeaxes.pipeline.measure", "threeaxes.pipeline.executor", "threeaxes.pipeline.torch_plans")
PROBED_FORMS = {"number", "int", "int_tuple", "int_lists", "number_dict", "text", "raw"}
CALL_LIMIT_S = 1
MEMORY_BYTES = 6 << 30


class _Slow(Exception):
    """A call that ran over CALL_LIMIT_S (raised by SIGALRM's handler)."""


def _raise_slow(*_):
    raise _Slow()


def probed_exercises(root: Path = ROOT) -> list[dict]:
    """{"drop", "answer", "form", "cases": [(args, want)]} for each exercise a probe can judge."""
    found = []
    for name in graded_drops(root):
        drop = name[:6]
        for e in load_exercises(grading_file(name, root)):
            vis = e.visible.as_dict() if e.visible else {}
            if vis.get("ranks") or "reference" not in vis or vis.get("form") not in PROBED_FORMS:
                continue
            found.append({"drop": drop, "answer": e.answer, "form": vis["form"], "cases": _cases(drop, e.answer, vis),
                          "withheld": sorted({definition(n) for n in e.forbid})})
    return found


def _cases(drop: str, answer: str, vis: dict) -> list:
    """[(args, right value)]: as `python -m autograder.cases` stored them from the drop's
    reference, or, for a sealed answer (no value stored), from the reference itself."""
    stored = json.loads((CASES / f"{drop}.json").read_text())[answer]
    if not stored.get("sealed"):
        return [(list(c["args"]), c["want"]) for c in stored["cases"]]
    ref = getattr(importlib.import_module(f"autograder.references.{drop}"), vis["reference"])
    return [(list(args), ref(*args)) for args in vis.get("args", [[]])]


def public_functions() -> dict:
    """{dotted name: function or class} of every public name defined in a module of the package."""
    import threeaxes

    table = {}
    for info in pkgutil.walk_packages(threeaxes.__path__, "threeaxes."):
        name = info.name
        if name.startswith(SKIPPED_MODULES) or any(p.startswith("_") for p in name.split(".")):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that does not import here offers nothing
            continue
        if _starts_ranks(module):
            continue
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                table[f"{name}.{attr}"] = obj
    return table


def _starts_ranks(module) -> bool:
    return any(k in vars(module) for k in ("launch", "check_on_ranks", "run_on_ranks"))


def _bound(fn, args):
    """`fn` with `args` given in the order of its parameters, or None where they do not fit it.
    Past its positional parameters, an argument goes to the first keyword-only one left whose
    default is of its kind (a string to a string, a number to a number)."""
    signature = _signature(fn)
    if signature is None:
        return None
    kinds = [p.kind for p in signature.parameters.values()]
    plain = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY]
    positional, named = list(args[:len(plain)]), {}
    for arg in args[len(plain):]:
        if inspect.Parameter.VAR_POSITIONAL in kinds:
            positional.append(arg)
            continue
        fits = [p for p in keyword if p.name not in named and _same_kind(p.default, arg)]
        if not fits:
            return None
        named[fits[0].name] = arg
    try:
        signature.bind(*positional, **named)
    except TypeError:
        return None
    return lambda: fn(*positional, **named)


_SIGNATURES: dict = {}


def _signature(fn):
    """inspect.signature(fn), once per function (a bound method's is its function's, less self)."""
    inner = getattr(fn, "__func__", fn)
    key = (id(inner), hasattr(fn, "__self__"))
    if key not in _SIGNATURES:
        try:
            _SIGNATURES[key] = (inner, inspect.signature(fn))
        except (TypeError, ValueError):
            _SIGNATURES[key] = (inner, None)
    return _SIGNATURES[key][1]


def _same_kind(default, arg) -> bool:
    number = (int, float)
    if isinstance(arg, bool) or isinstance(default, bool):
        return isinstance(arg, bool) and isinstance(default, bool)
    return (isinstance(arg, str) and isinstance(default, str)) or \
        (isinstance(arg, number) and (isinstance(default, number) or default is None))


def _call(fn, args=()):
    """fn(*args) under the time limit, what it prints thrown away; an exception is returned."""
    signal.alarm(CALL_LIMIT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return exc
    finally:
        signal.alarm(0)


def _is_package_object(value) -> bool:
    return (not isinstance(value, (BaseException, type)) and plain(value) is None
            and str(type(value).__module__).startswith("threeaxes."))


def tries(functions: dict, args: list):
    """(label, value) for each way of calling the package on one case's arguments."""
    objects = []
    for name, fn in functions.items():
        for label, call_args in [(name, args)] + _dispatched(name, args):
            call = _bound(fn, call_args)
            if call is None:
                continue
            value = _call(call)
            yield label, value
            if _is_package_object(value):
                objects.append((label, value))
    yield from _by_preset(functions, args)
    for label, obj in objects:
        for attr in dir(type(obj)):
            if attr.startswith("_"):
                continue
            member = inspect.getattr_static(type(obj), attr, None)
            if isinstance(member, property):
                yield f"{label}(...).{attr}", _call(lambda: getattr(obj, attr), [])
                continue
            bound = getattr(obj, attr, None)
            if not (inspect.ismethod(bound) or inspect.isfunction(bound)) or \
                    not str(getattr(bound, "__module__", "")).startswith("threeaxes."):
                continue
            for call_args in ([], args):
                call = _bound(bound, call_args)
                if call is not None:
                    yield f"{label}(...).{attr}({'...' if call_args else ''})", _call(call)
        for name, fn in functions.items():
            for call_args in ([obj], [obj, 0]):
                call = _bound(fn, call_args) if inspect.isfunction(fn) else None
                if call is not None:
                    yield (f"{name}({label}(...){', 0' if len(call_args) > 1 else ''})",
                           _call(call))


def _by_preset(functions: dict, args: list):
    """Where the first argument names a preset ("llama-30b"): the package's object for it (a
    `get_*` function's), then every function called with it in its place."""
    if not args or not isinstance(args[0], str):
        return
    for name, getter in functions.items():
        call = _bound(getter, args[:1]) if name.rsplit(".", 1)[-1].startswith("get_") else None
        obj = _call(call) if call is not None else None
        if obj is None or not _is_package_object(obj):
            continue
        for other, fn in functions.items():
            call = _bound(fn, [obj, *args[1:]]) if inspect.isfunction(fn) else None
            if call is not None:
                yield f"{other}({name}({args[0]!r}), ...)", _call(call)


def _dispatched(name: str, args: list) -> list:
    """Where the case's first argument is a string naming this function: it, with the rest."""
    if args and isinstance(args[0], str) and name.rsplit(".", 1)[-1] in _names_for(args[0]):
        return [(f"{name} (named by {args[0]!r})", list(args[1:]))]
    return []


def _names_for(text: str) -> set:
    key = text.lower().replace("-", "_")
    return {key, {"1f1b": "one_f_one_b"}.get(key, key)}


_FIRST_STEP = re.compile(r"([\w.]+(?: \(named by '[^']*'\))?)\(\.\.\.\)")


def _refuses(want) -> bool:
    return isinstance(want, str) and want.startswith("raises")


def routes(exercise: dict, functions: dict) -> list:
    """The routes that give `exercise`'s answer on every one of its cases: the whole answer, or,
    for a dict of numbers, one of its entries (then the label says which). A route that starts
    from an object of the package ("gpipe(...).bubble_fraction()") refuses a case where the
    call that makes the object refuses it, so the cases that want a refusal come last and
    such a route matches them through its first step."""
    matching = None
    for args, want in sorted(exercise["cases"], key=lambda case: _refuses(case[1])):
        here = set()
        for label, value in tries(functions, args):
            if answers(value, want, exercise["form"], args):
                here.add(label)
            elif exercise["form"] == "number_dict" and isinstance(want, dict):
                here |= {f"{label} [{key!r}]" for key, part in want.items() if answers(value, part, "number", args)}
        if _refuses(want) and matching:
            here |= {label for label in matching
                     if (first := _FIRST_STEP.search(label)) and first.group(1) in here}
        matching = here if matching is None else matching & here
        if not matching:
            return []
    return sorted(matching or ())


def _refused(*args, **kwargs):
    raise RuntimeError("withheld in this graded run")


@contextlib.contextmanager
def refusing(paths):
    """Each function of `paths` ("module:qualname") raising while inside, by its code: every
    reference to it, however imported, raises, as the kernel's stub is refused."""
    saved = []
    try:
        for path in paths:
            module, qualname = path.split(":")
            fn = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
            fn = getattr(fn, "__func__", fn)
            saved.append((fn, fn.__code__))
            fn.__code__ = _refused.__code__
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code


KNOWN = ("drop04/bubble_fraction_answer", "drop04/stage_layers_answer")   # tried unwithheld too


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(MEMORY_BYTES, hard) if hard > 0 else MEMORY_BYTES, hard))
    signal.signal(signal.SIGALRM, _raise_slow)
    functions, only = public_functions(), sys.argv[1:]
    found = {"open": {}, "unwithheld": {}}
    for e in probed_exercises():
        key = f"{e['drop']}/{e['answer']}"
        if only and e["drop"] not in only:
            continue
        if key in KNOWN:
            found["unwithheld"][key] = routes(e, functions)
        with refusing(e["withheld"]):
            found["open"][key] = routes(e, functions)
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
