"""A drop's grading data, `source/<drop>/grading.json`, read into checked records.

`load(path)` is the one reader: every key is checked (an unknown or missing key, a wrong
type, a name that no reader could use), and a fault fails with
`source/<drop>/grading.json: <key path> ...: <what is wrong, what to write instead>`.
`make release` loads every drop's first. The file (stdlib JSON, one object):

    points      {test cell's grade id: points}: every auto-graded test cell, as in its metadata
    mistakes    [{name, answer, code, loses, feedback, why?, alone?, scores?, runs_out_of_time?}]:
                whole answer cells the grading test hands in (`code`: one string per line;
                `loses`: test cells scoring 0; `scores`: {grade id: partial points}); a
                `calls_<function>` mistake answers by calling a function the drop forbids
                and its `feedback` names that function
    exercises   [{answer, tests, forbid, why, may, mistakes?, visible?, visible_config?}]:
                `forbid`: dotted names of threeaxes functions withheld from the answer;
                `mistakes`: the catalogue, [{name, says, code, rule?, when?, part?}];
                `visible`: the visible check's cases (autograder/cases.py);
                `visible_config`: a configuration exercise's (autograder/apps/config_cases.py)

CONTRIBUTING.md ("The grading data") says what each is for.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from autograder.course import notebook_in
from autograder.spec_checks import (
    At,
    SpecError,
    check_against_notebook,
    check_calls,
    check_catalogue,
    check_visible,
    check_visible_config,
    definition,
    fields,
    flag,
    lines,
    near_names,
    number,
    text,
    texts,
)

__all__ = ["Catalogued", "DropSpec", "Exercise", "Mistake", "SpecError", "Visible", "VisibleConfig",
           "definition", "exercise_from", "load", "load_exercises"]


@dataclass(frozen=True)
class Mistake:
    """A whole answer cell the grading test hands in, and what it must score."""
    name: str       # what the student got wrong, e.g. "forgets_master_copy"
    answer: str     # grade id of the answer cell it replaces
    code: str       # that cell's source
    loses: tuple    # grade ids of the test cells that must give 0 (all others full marks)
    feedback: str   # a phrase the student's feedback page must show
    why: str = ""
    alone: bool = False   # True: never shares a notebook with another mistake
    scores: tuple = ()    # ((grade id, points), ...): cells that earn partial credit
    runs_out_of_time: bool = False   # True: a cell that never ends

    @property
    def touches(self) -> set:
        """The test cells whose score this mistake decides."""
        return set(self.loses) | {gid for gid, _ in self.scores}


@dataclass(frozen=True)
class Catalogued:
    """One wrong answer of an exercise's catalogue: the cell, and what the student is told."""
    name: str
    says: str
    code: str
    rule: str | None = None   # a configuration exercise's broken rule
    when: tuple = ()          # ((config key, value), ...): the layouts it matches
    part: str | None = None   # the variable of the answer it is a mistake in (drops 13, 14)

    def as_dict(self) -> dict:
        """What the student's side stores of it (threeaxes.grading.visible_config): no code."""
        out = {"name": self.name, "says": self.says, **({"rule": self.rule} if self.rule else {})}
        return {**out, "when": dict(self.when)} if self.when else out


@dataclass(frozen=True)
class Visible:
    """An exercise's visible check: the call, its form, the reference, the cases."""
    call: str
    passed: str
    otherwise: str
    args: tuple = ()               # one list of arguments per case
    form: str | None = None        # a key of threeaxes.grading.visible.FORMS
    reference: str | None = None   # a function of autograder/references/dropNN.py
    ranks: dict | None = None      # {"runner", "world"}
    value: bool | None = None
    setup: tuple = ()              # notebook lines the answer cell needs first
    shown: str | None = None
    sealed: bool | None = None
    reveal: bool | None = None
    fraction: bool | None = None
    rel: float | None = None

    def as_dict(self) -> dict:
        """The entry as grading.json spells it, for threeaxes.grading.visible (absent keys left out)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if getattr(self, k) is not None}
        out["args"], out["setup"] = [list(a) for a in self.args], list(self.setup)
        return out if self.setup else {k: v for k, v in out.items() if k != "setup"}


@dataclass(frozen=True)
class VisibleConfig:
    """A configuration exercise's visible check (threeaxes.grading.visible_config)."""
    name: str       # the variable the answer binds
    scenario: str   # dotted name of the drop's scenario
    passed: str
    margin: float = 0.10
    micro_batch: int | None = None
    bubble_target: float | None = None
    setup: tuple = ()


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: its answer cell, test cells and what the answer may not call."""
    answer: str     # grade id of the answer cell
    tests: tuple    # grade ids of its test cells
    forbid: tuple   # dotted names: "threeaxes.data_parallel.plan_buckets"
    why: str        # why those may not be called here
    may: str        # what may be used instead
    mistakes: tuple = ()   # Catalogued
    visible: Visible | None = field(default=None, hash=False)
    visible_config: VisibleConfig | None = field(default=None, hash=False)
    # the entry as grading.json writes it, checked: for readers that take it as JSON
    entry: dict | None = field(default=None, hash=False, compare=False, repr=False)


@dataclass(frozen=True)
class DropSpec:
    name: str          # the drop's folder: source/<name>/
    points: dict = field(hash=False)       # {grade id of an auto-graded test cell: points}
    mistakes: tuple = ()
    exercises: tuple = ()

    def exercise(self, answer: str) -> Exercise:
        found = [e for e in self.exercises if e.answer == answer]
        if not found:
            raise KeyError(f"{self.name} has no exercise {answer!r}; its exercises: "
                           f"{[e.answer for e in self.exercises]}")
        return found[0]

    def points_of(self, exercise: Exercise) -> float:
        return sum(self.points.get(t, 0.0) for t in exercise.tests)


def load(path: Path) -> DropSpec:
    """The drop's grading data, every key checked (SpecError naming the file and the key).
    `path`: source/<drop>/grading.json, its notebook beside it."""
    path = Path(path)
    stamps = tuple((f.stat().st_mtime_ns, f.stat().st_size) if f.is_file() else None
                   for f in (path, notebook_in(path.parent)))
    return _load(path.resolve(), stamps)


def load_exercises(path: Path) -> list[Exercise]:
    """The drop's exercises; none where it has no grading data."""
    return list(load(path).exercises) if Path(path).is_file() else []


@lru_cache(maxsize=64)
def _load(path: Path, _stamps: tuple) -> DropSpec:
    """`load`, kept while neither the file nor its notebook changes."""
    at = At(f"source/{path.parent.name}/grading.json")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        at.fail(f"is not JSON ({exc}): fix the file")
    # unknown keys first, then each part in turn: the exercises (what withholding reads) fail on
    # their own faults before a file holding nothing else is told it lacks points and mistakes
    fields(at, data, required=(), optional=("points", "mistakes", "exercises"))
    exercises = tuple(_exercise(at[f"exercises[{i}]"], e) for i, e in enumerate(_list(at, data, "exercises")))
    mistakes = tuple(_mistake(at[f"mistakes[{i}]"], m) for i, m in enumerate(_list(at, data, "mistakes")))
    fields(at, data, required=("points", "mistakes", "exercises"), optional=())
    if not isinstance(data["points"], dict):
        at["points"].fail_value(data["points"], "should be {grade id of a test cell: points}")
    points = {gid: number(at[f"points.{gid}"], p) for gid, p in data["points"].items()}
    spec = DropSpec(path.parent.name, points, mistakes, exercises)
    check_calls(at, spec)
    check_against_notebook(at, spec, notebook_in(path.parent))
    return spec


def _list(at: At, data: dict, key: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        at[key].fail_value(value, "should be a list")
    return value


def _exercise(at: At, e: Any) -> Exercise:
    fields(at, e, required=("answer", "tests", "forbid", "why", "may"),
           optional=("mistakes", "visible", "visible_config"),
           moved={"in_kernel": "move its names into 'forbid' (every forbidden function is computed by "
                               "the grader, none in the kernel)"})
    forbid = texts(at["forbid"], e["forbid"], "dotted names of functions of threeaxes")
    for k, name in enumerate(forbid):
        try:
            definition(name)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            at[f"forbid[{k}]"].fail_value(name, f"{exc}; {near_names(name)}write the dotted name of a threeaxes "
                                                "function")
    visible = check_visible(at["visible"], e["visible"], Visible) if "visible" in e else None
    config = check_visible_config(at["visible_config"], e["visible_config"], VisibleConfig) \
        if "visible_config" in e else None
    catalogue = tuple(_catalogued(at[f"mistakes[{i}]"], m) for i, m in enumerate(_list(at, e, "mistakes")))
    check_catalogue(at, catalogue, config is not None)
    return Exercise(text(at["answer"], e["answer"]), texts(at["tests"], e["tests"], "grade ids of test cells"),
                    forbid, text(at["why"], e["why"]), text(at["may"], e["may"]), catalogue, visible, config,
                    copy.deepcopy(e))


def exercise_from(entry: dict, where: str = "grading.json") -> Exercise:
    """One exercise's entry (an object of "exercises"), checked on its own: no notebook."""
    return _exercise(At(where, "exercise"), entry)


def _catalogued(at: At, m: Any) -> Catalogued:
    fields(at, m, required=("name", "says", "code"), optional=("rule", "when", "part"))
    when = m.get("when", {})
    if not isinstance(when, dict):
        at["when"].fail_value(when, "should be {configuration key: value}")
    return Catalogued(text(at["name"], m["name"]), text(at["says"], m["says"]), lines(at["code"], m["code"]),
                      text(at["rule"], m["rule"]) if "rule" in m else None, tuple(sorted(when.items())),
                      text(at["part"], m["part"]) if "part" in m else None)


def _mistake(at: At, m: Any) -> Mistake:
    fields(at, m, required=("name", "answer", "code", "loses", "feedback"),
           optional=("why", "alone", "scores", "runs_out_of_time"))
    scores = m.get("scores", {})
    if not isinstance(scores, dict):
        at["scores"].fail_value(scores, "should be {grade id of a test cell: points earned}")
    return Mistake(text(at["name"], m["name"]), text(at["answer"], m["answer"]), lines(at["code"], m["code"]),
                   texts(at["loses"], m["loses"], "grade ids of test cells"), text(at["feedback"], m["feedback"]),
                   text(at["why"], m.get("why", "")), flag(at["alone"], m.get("alone", False)),
                   tuple(sorted((gid, number(at[f"scores.{gid}"], p)) for gid, p in scores.items())),
                   flag(at["runs_out_of_time"], m.get("runs_out_of_time", False)))
