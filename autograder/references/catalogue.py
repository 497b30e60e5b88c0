"""Hidden tests driven by an exercise's catalogue of mistakes (its drop's grading.json).

    cases = catalogue.telling("drop06", "tp_wire_bytes_answer", drop06.draw_wire_bytes_cases, rng)
    catalogue.judge("drop06", "tp_wire_bytes_answer", tp_wire_bytes_per_block, cases)

`telling` keeps, among the cases `draw(rng)` proposes at grading time, those on
which the reference differs from every catalogued mistake, so an answer that
makes one of them cannot pass by luck, and a memorised visible answer meets
cases it has never seen. `judge` compares the student's answer with the
reference on each case and, where it is wrong, names the catalogued mistake it
equals, without showing the drawn case.
"""
from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

from autograder import course, spec
from threeaxes.grading import visible


@cache
def record(drop: str, answer: str) -> spec.Exercise:
    """The exercise `answer` of drop `drop` ("drop06"), as autograder.spec reads it."""
    return spec.load(course.grading_file(course.drop_named(drop))).exercise(answer)


def _visible_check(drop: str, answer: str) -> spec.Visible:
    found = record(drop, answer).visible
    if found is None:
        raise ValueError(f"{drop} {answer}: its grading.json entry has no 'visible' check, which the "
                         "catalogue's cases need: add one")
    return found


def _visible(drop: str, answer: str) -> dict:
    return _visible_check(drop, answer).as_dict()


def _reference(drop: str, vis: dict) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"autograder.references.{drop}"), vis["reference"])


def mistakes(drop: str, answer: str) -> dict:
    """{name: (the mistaken function or value, what the student is told)}."""
    from autograder.cases import defined

    entry, check = record(drop, answer), _visible_check(drop, answer)
    return {m.name: (defined(m.code, check.call, check.setup), m.says) for m in entry.mistakes}


def _value(vis: dict, fn: Callable[..., object], args: Sequence) -> Any:
    try:
        return visible.plain(fn(*args), vis["form"], vis["call"])
    except Exception:  # noqa: BLE001 - a mistake that raises here is told apart by raising
        return None


def telling(drop: str, answer: str, draw: Callable[[random.Random], Iterable[Sequence]], rng: random.Random,
            n: int = 4, tries: int = 50) -> list:
    """At least `n` cases drawn with `draw(rng)` (a list of argument tuples a call) that
    together tell every catalogued mistake apart from the right answer, and from each
    other where a drawn case can: a case is kept while it separates a pair not yet apart."""
    vis = _visible(drop, answer)
    reference, wrong = _reference(drop, vis), mistakes(drop, answer)
    names = ["right"] + list(wrong)
    apart: set[tuple[str, str]] = set()
    pairs = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    kept: list[tuple] = []
    for _ in range(tries):
        for args in draw(rng):
            values = {"right": visible.plain(reference(*args), vis["form"], "reference")}
            values.update({name: _value(vis, fn, args) for name, (fn, _) in wrong.items()})
            new = {(a, b) for a, b in pairs - apart if not visible.same(values[a], values[b])}
            if new or len(kept) < n:
                kept.append(tuple(args))
                apart |= new
        if len(kept) >= n and apart == pairs:
            return kept
    # some pairs of mistakes may never part on drawn cases: then every mistake must at least
    # part from the right answer
    if len(kept) >= n and all(("right", m) in apart for m in wrong):
        return kept
    missing = [m for m in wrong if ("right", m) not in apart]
    raise RuntimeError(f"{drop} {answer}: no drawn case tells {missing} from the right answer")


def judge(drop: str, answer: str, student: Callable[..., object], cases: Sequence[Sequence]) -> None:
    """AssertionError naming the mistake (or saying what to check) on the first drawn
    case the student's function gets wrong; the case's values stay hidden."""
    vis = _visible(drop, answer)
    reference, wrong = _reference(drop, vis), mistakes(drop, answer)
    got_all = []
    for args in cases:
        try:
            got_all.append(visible.plain(student(*args), vis["form"], vis["call"]))
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - the student's error, without the hidden input
            raise AssertionError(f"on a case drawn at grading, {vis['call']} raised "
                                 f"{type(exc).__name__}: {exc}") from None
    wants = [visible.plain(reference(*args), vis["form"], "reference") for args in cases]
    if all(visible.same(got, want) for got, want in zip(got_all, wants)):
        return
    # the mistake named is one that gives the student's value on every drawn case
    named = [says for fn, says in wrong.values()
             if all(visible.same(_value(vis, fn, args), got) for args, got in zip(cases, got_all))]
    if named:
        raise AssertionError(f"on a case drawn at grading: {named[0]}")
    raise AssertionError(f"on a case drawn at grading, {vis['call']} is not right; "
                         f"{vis.get('otherwise', 'check it against the text above')}")


def judge_fixed(drop: str, answer: str, student: object, part: str | int | None = None) -> None:
    """A fixed answer's value, checked here in the grader: its visible check stores only
    its form (threeaxes.grading.visible.shape), so the value and the catalogued mistakes'
    values are computed now, from the reference and the mistakes' code. AssertionError
    naming the mistake the student's value equals (on `part` of it, where given: a dict
    key or tuple index this test cell grades), or saying what to check."""
    vis = _visible(drop, answer)
    rel = vis.get("rel", visible.REL)
    pick = (lambda v: v) if part is None else (lambda v: visible._pick(v, part))
    reference, wrong = _reference(drop, vis), mistakes(drop, answer)
    for args in vis["args"]:
        where = visible._call(vis, args) + ("" if part is None else f"[{part!r}]")
        got = visible.plain(visible._answer_for(vis, student, args), vis["form"], visible._call(vis, args))
        want = visible.plain(reference(*args), vis["form"], "reference")
        if visible.same(pick(got), pick(want), rel):
            continue
        named = [says for fn, says in wrong.values()
                 if visible.same(pick(_fixed_value(vis, fn, args)), pick(got), rel)]
        if named:
            raise AssertionError(f"{where} = {visible._short(pick(got))}: {named[0]}")
        raise AssertionError(f"{where} = {visible._short(pick(got))} is not right; "
                             f"{vis.get('otherwise', 'check it against the text above')}")


def _fixed_value(vis: dict, fn: object, args: list) -> Any:
    try:
        return visible.plain(visible._answer_for(vis, fn, args), vis["form"], vis["call"])
    except Exception:  # noqa: BLE001 - a mistake that raises here is told apart by raising
        return None
