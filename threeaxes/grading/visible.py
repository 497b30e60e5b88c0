"""Visible checks: a student's answer against fixed cases stored as data, no reference answer
(CONTRIBUTING.md, "The visible checks' cases"). A test cell's visible half is one line:

    visible.check("drop06", "tp_wire_bytes_answer", tp_wire_bytes_per_block)"""
from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threeaxes import progress
from threeaxes.grading import as_int, as_int_tuple, as_number
from threeaxes.grading.shown import in_one_line

CASES = Path(__file__).resolve().parent / "cases"
REL = 1e-9


DROP_NAME = re.compile(r"drop\d\d")   # the only names `load` reads: a file of CASES, never a path


def load(drop: str) -> dict[str, Any]:
    """The stored cases of one drop ("drop04"). The name is matched against DROP_NAME before
    it goes near a path: whoever calls this (the grader answering a graded kernel, say) reads
    a drop's cases and no other file."""
    if type(drop) is not str or not DROP_NAME.fullmatch(drop):
        raise ValueError(f"{str(drop)[:40]!r} is not a drop's name: a drop is named like 'drop04'")
    return json.loads((CASES / f"{drop}.json").read_text())


def _sealed(drop: str, answer: str) -> bool:
    """Whether `answer`'s stored cases hold only its form (its check passes on form alone)."""
    try:
        return bool(load(drop).get(answer, {}).get("sealed"))
    except (OSError, ValueError):
        return False


@in_one_line
@progress.recorded(form_only=_sealed)
def check(drop: str, answer: str, student: Any, *, part: Any = None, show: bool = True) -> list[Any]:
    """Run `student` (a function, or the answer's value) on the stored cases of one
    exercise; AssertionError naming the mistake on the first case that is wrong.
    Prints the exercise's `passed` line and returns the plain values.

    `part` (a dict key or a tuple index, or a list of them): compare only that part
    of each value, for an exercise whose answer several test cells grade a part each
    (a tuple's counts in one cell, its bytes in the next), so that a slip in one part
    does not fail the other part's cell.

    It calls the student's function on each stored case (on fresh ranks where the
    exercise runs on ranks), turns what comes back into plain values, and compares:
    the right value passes and says so; the value of a catalogued mistake names
    that mistake in the student's terms; anything else says which case differs.

    A stored exercise:

        {"call": "tp_wire_bytes_per_block",       # how the student's function is named
         "form": "number",                        # what it returns (FORMS)
         "ranks": null | {"runner": "threeaxes.grading.drop06.sp_mlp_results", "world": 2},
         "cases": [{"args": [...], "want": ..., "mistakes": {"<name>": ...}}],
         "mistakes": {"<name>": "what the student did, and what to do instead"},
         "passed": "what to print when every case is right ({want} is the first case's value)"}

    Tensors come back from ranks as long lists of floats; they are stored as a
    `signature` (length, sum, sum of squares, a fixed weighted sum), compared to a
    relative 1e-9: two different results agreeing on all four is not a slip a
    student can make by accident.
    """
    spec = load(drop)[answer]
    rel = spec.get("rel", REL)
    pick = (lambda v: v) if part is None else (lambda v: _pick(v, part))
    got_all = [plain(_answer_for(spec, student, case["args"]), spec["form"], _call(spec, case["args"]))
               for case in spec["cases"]]
    if spec.get("sealed"):       # one fixed answer: its form is checked here, its value when graded
        return _check_form(spec, got_all, part, show)
    wrong = [(case, got) for case, got in zip(spec["cases"], got_all)
             if not same(pick(got), pick(case["want"]), rel)]
    if wrong:
        case, got = wrong[0]
        where = _call(spec, case["args"])
        # a mistake is named only if it gives the answer's value on every case it was stored for
        named = [name for name in spec["mistakes"]
                 if all(name in c["mistakes"] and same(pick(g), pick(c["mistakes"][name]), rel)
                        for c, g in zip(spec["cases"], got_all))]
        if named:
            raise AssertionError(f"{where} = {_short(got)}: {spec['mistakes'][named[0]]}")
        failed = _rank_error(got)
        if failed:
            raise AssertionError(f"{where}: {failed}")
        raise AssertionError(f"{where} = {_short(got)} is not right; "
                             f"{spec.get('otherwise', 'check it against the text above')}")
    if show and part is not None:     # the other parts are another test cell's to judge
        print(f"{spec['call']}, part {part!r}: right on every stored case")
    elif show and spec.get("passed"):
        print(spec["passed"].format(want=spec["cases"][0]["want"], got=got_all[0]))
    return got_all


def _pick(value: Any, part: Any) -> Any:
    """The `part` of a plain value: value[part], or a list of them for a list of parts
    (None where the value has no such part, which then compares unequal)."""
    if type(part) is list:
        return [_pick(value, p) for p in part]
    try:
        return value[part]
    except (KeyError, IndexError, TypeError):
        return None


def _answer_for(spec: dict[str, Any], student: Any, args: list[Any]) -> Any:
    if spec.get("ranks"):
        from threeaxes.grading.ranks import check_on_ranks

        module, _, name = spec["ranks"]["runner"].rpartition(".")
        runner = getattr(importlib.import_module(module), name)
        results = check_on_ranks(runner, spec["ranks"]["world"], student, *args)
        return [signature(r) for r in results]
    if spec.get("value"):          # the answer is a value, not a function
        return student
    try:
        return student(*args)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the student's error, reported with its input
        raise AssertionError(f"{_call(spec, args)} raised {type(exc).__name__}: {exc}") from None


def _rank_error(results: Any) -> str | None:
    """What a rank said the student's code raised, if one did (runners send it as "error")."""
    for rank, result in enumerate(results if type(results) is list else []):
        if type(result) is dict and result.get("error"):
            return f"rank {rank}: {result['error']}"
    return None


def _call(spec: dict[str, Any], args: list[Any]) -> str:
    # "shown": the student's own name, where the check calls a wrapper of their function, or
    # the whole call as the check cell makes it, with {0!r}, {1!r}, ... for the case's arguments
    name = spec.get("shown", spec["call"])
    if spec.get("value") or spec.get("ranks"):
        return name
    if "{" in name:
        return name.format(*args)
    return f"{name}({', '.join(repr(a) for a in args)})"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


# -- plain values ------------------------------------------------------------------------

def _text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise AssertionError(f"{name} should be a string, got {type(value).__name__}")
    return value.strip().lower()


def _dict(value: Any, name: str, each: Callable[[Any, str], Any]) -> dict[Any, Any]:
    if type(value) is not dict:
        raise AssertionError(f"{name} should return a dict, got {type(value).__name__}")
    return {k: each(v, f"{name}[{k!r}]") for k, v in value.items()}


FORMS: dict[str, Callable[[Any, str], Any]] = {
    "number": as_number,
    "int": as_int,
    "int_tuple": lambda v, name: list(as_int_tuple(v, name=name)),
    "int_lists": lambda v, name: [list(as_int_tuple(x, name=f"{name}[{i}]"))
                                  for i, x in enumerate(v if type(v) in (list, tuple) else
                                                        as_int_tuple(v, name=name))],
    "number_dict": lambda v, name: _dict(v, name, as_number),
    "text": lambda v, name: _text(v, name),
    "raw": lambda v, name: v,      # already plain: what ranks sent back, as signatures
}


def plain(value: Any, form: str, name: str) -> Any:
    """The answer as plain JSON-like values, or an AssertionError saying what was expected."""
    return FORMS[form](value, name)


def same(got: Any, want: Any, rel: float = REL) -> bool:
    """Equal as plain values: numbers to a relative `rel`, containers item by item."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)):
        return (type(got) in (int, float) and math.isfinite(got)
                and math.isclose(got, want, rel_tol=rel, abs_tol=1e-12))
    if isinstance(want, list) and want[:1] == ["floats"]:    # a signature: scale-aware tolerance
        return (type(got) is list and len(got) == len(want) and got[:2] == want[:2]
                and all(math.isclose(g, w, rel_tol=REL, abs_tol=REL * math.sqrt(max(want[3], 1e-300)) * want[1])
                        for g, w in zip(got[2:], want[2:])))
    if isinstance(want, (list, tuple)):
        return (type(got) in (list, tuple) and len(got) == len(want)
                and all(same(g, w, rel) for g, w in zip(got, want)))
    if isinstance(want, dict):
        return type(got) is dict and set(got) == set(want) and all(same(got[k], want[k], rel) for k in want)
    return False


def shape(value: Any) -> Any:
    """What a fixed answer's visible check stores: its form without its value (each number
    as "number" or "positive number", each string as "text", dicts by their keys, lists by
    their length), so that nothing in the package gives the answer away."""
    if type(value) is dict:
        return {str(k): shape(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [shape(v) for v in value]
    if type(value) is bool:
        return "bool"
    if type(value) in (int, float):
        return "positive number" if math.isfinite(value) and value > 0 else "number"
    if type(value) is str:
        return "text"
    return "none" if value is None else type(value).__name__


def _form_error(got: Any, want: Any, name: str) -> str | None:
    """Where plain value `got` has not the form `want` (a `shape`), said in the student's
    terms; None where it has."""
    if type(want) is dict:
        if type(got) is not dict or set(map(str, got)) != set(want):
            keys = ", ".join(repr(k) for k in sorted(want))
            return f"{name} should be a dict with the keys {keys}, got {_short(got)}"
        return next((e for k in sorted(want) if (e := _form_error(got.get(k), want[k], f"{name}[{k!r}]"))), None)
    if type(want) is list:
        if type(got) not in (list, tuple) or len(got) != len(want):
            return f"{name} should be a list of {len(want)}, got {_short(got)}"
        return next((e for i, (g, w) in enumerate(zip(got, want)) if (e := _form_error(g, w, f"{name}[{i}]"))), None)
    kind = shape(got)
    if kind == want or (want == "number" and kind == "positive number"):
        return None
    if want == "fraction":       # a share of something, stored so where the exercise says so
        if kind in ("number", "positive number") and 0 <= got <= 1:
            return None
        return f"{name} should be a fraction between 0 and 1 (0.25 for 25%), got {_short(got)}"
    article = "an" if want[0] in "aeiou" else "a"
    said = {"text": "a string"}.get(want, f"{article} {want}")
    return f"{name} should be {said}, got {_short(got)}"


def _check_form(spec: dict[str, Any], got_all: list[Any], part: Any, show: bool) -> list[Any]:
    for case, got in zip(spec["cases"], got_all):
        want = case["shape"]
        name = _call(spec, case["args"])
        if part is not None:
            got, want, name = _pick(got, part), _pick(want, part), f"{name}[{part!r}]"
        error = _form_error(got, want, name)
        if error:
            raise AssertionError(error)
    if show:
        what = spec["call"] + ("" if part is None else f"[{part!r}]")
        print(f"{what} has the form it should have; its value is not stored in the package and is "
              "checked when your notebook is graded")
    return got_all


def signature(value: Any) -> Any:
    """A rank's raw result with every long list of floats replaced by its signature."""
    if type(value) in (list, tuple) and len(value) > 8 and all(type(v) is float for v in value):
        n = len(value)
        weighted = sum(v * math.cos(0.7 * i + 0.3) for i, v in enumerate(value))
        return ["floats", n, math.fsum(value), math.fsum(v * v for v in value), weighted]
    if type(value) in (list, tuple):
        return [signature(v) for v in value]
    if type(value) is dict:
        return {str(k): signature(v) for k, v in value.items()}
    return value
