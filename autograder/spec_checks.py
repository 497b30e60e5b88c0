"""The checks behind `autograder.spec.load`: each key's type, and each name checked against
what reads it (the package, the references, the cost model's rules, the drop's notebook).
Every failure names the file and the key path, and says what to write instead.
"""
from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import re
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from threeaxes.grading.own_work import resolve

NAME = re.compile(r"[a-z0-9][a-z0-9_]*")   # a mistake's name: snake_case, what it gets wrong

# autograder.spec's DropSpec, which cannot be imported here: spec imports this module
DropSpec = Any
Record = TypeVar("Record")   # the spec's record a check builds (Visible, VisibleConfig)


class SpecError(ValueError):
    """grading.json holds something its readers cannot use; the message says where and the fix."""


class At:
    """A place in one grading.json: the file as shown, and the key path inside it."""

    def __init__(self, file: str, path: str = ""):
        self.file, self.path = file, path

    def __getitem__(self, key: str) -> At:
        joiner = "" if not self.path or key.startswith("[") else "."
        return At(self.file, f"{self.path}{joiner}{key}")

    def fail(self, what: str) -> NoReturn:
        raise SpecError(f"{self.file}: {self.path + ' ' if self.path else ''}{what}")

    def fail_value(self, value: object, what: str) -> NoReturn:
        shown = json.dumps(value) if not isinstance(value, str) else repr(value)
        self.fail(f"= {shown[:80]}: {what}")


def _hint(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def fields(at: At, data: object, required: tuple[str, ...], optional: tuple[str, ...],
           moved: dict[str, str] | None = None) -> None:
    """`data` is an object whose keys are `required`, and some of `optional`."""
    known = set(required) | set(optional)
    if not isinstance(data, dict):
        at.fail_value(data, f"should be an object with the keys {sorted(known)}")
    for key in data:
        if moved and key in moved:
            at.fail(f"has the key {key!r}: {moved[key]}")
        if key not in known:
            at.fail(f"has the key {key!r}: {_hint(key, known)}the keys are {sorted(required)}"
                    + (f", and optionally {sorted(optional)}" if optional else ""))
    if not set(required) <= set(data):
        at.fail(f"needs the keys {sorted(required)}; got {sorted(data)}: add "
                f"{sorted(set(required) - set(data))}")


def text(at: At, value: object) -> str:
    if not isinstance(value, str):
        at.fail_value(value, "should be a string")
    return value


def texts(at: At, value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        at.fail_value(value, f"should be a list of {what}")
    return tuple(value)


def lines(at: At, value: object) -> str:
    """A cell's source written one string per line (JSON has no multi-line strings)."""
    return "\n".join(texts(at, value, "strings, one per line of the cell"))


def number(at: At, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        at.fail_value(value, "should be a number")
    return float(value)


def flag(at: At, value: object) -> bool:
    if not isinstance(value, bool):
        at.fail_value(value, "should be true or false")
    return value


def definition(name: str) -> str:
    """"module:qualname" where the function a dotted name stands for is defined."""
    obj = resolve(name)
    code = getattr(obj, "__code__", None)
    if code is None or not str(obj.__module__).startswith("threeaxes."):
        raise TypeError(f"{name} is not a function of threeaxes (a grading.json 'forbid' entry "
                        "names a function whose body can be withheld)")
    return f"{obj.__module__}:{obj.__qualname__}"


def near_names(name: str) -> str:
    """"did you mean ...? " for a dotted name whose last part is misspelt ("" when none is near)."""
    parent, _, last = name.rpartition(".")
    try:
        return _hint(last, [n for n in dir(resolve(parent)) if not n.startswith("_")]).replace(
            "mean '", f"mean '{parent}.")
    except (ImportError, AttributeError, ValueError):
        return ""


def _resolves(at: At, name: str, what: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError, ValueError) as exc:
        at.fail_value(name, f"{exc}; {near_names(name)}write the dotted name of {what}")


@cache
def _top_level_names(module: str) -> frozenset:
    """The names a module of the repository defines at its top level, read without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return frozenset()
    found = set()
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(found)


def check_visible(at: At, v: Any, record: Callable[..., Record]) -> Record:
    from threeaxes.grading.visible import FORMS

    fields(at, v, required=("call", "args", "passed", "otherwise"),
           optional=("form", "reference", "ranks", "value", "setup", "shown", "sealed", "reveal", "fraction", "rel"))
    if not isinstance(v["args"], list) or not all(isinstance(a, list) for a in v["args"]):
        at["args"].fail_value(v["args"], "should be a list of cases, each a list of arguments")
    if "form" in v and v["form"] not in FORMS:
        at["form"].fail_value(v["form"], f"{_hint(v['form'], FORMS)}choose one of {sorted(FORMS)}")
    drop = Path(at.file).parent.name[:6]     # source/<drop>/grading.json
    defined = _top_level_names(f"autograder.references.{drop}")
    if "reference" in v and text(at["reference"], v["reference"]) not in defined:
        at["reference"].fail_value(v["reference"], f"{_hint(v['reference'], defined)}name a function of "
                                                   f"autograder/references/{drop}.py")
    if "ranks" in v:
        fields(at["ranks"], v["ranks"], required=("runner", "world"), optional=())
        _resolves(at["ranks.runner"], text(at["ranks.runner"], v["ranks"]["runner"]), "a rank runner")
        number(at["ranks.world"], v["ranks"]["world"])
    if "reference" not in v and "ranks" not in v:
        at.fail("needs 'reference' (the right value's function) or 'ranks' (the runner whose results are judged)")
    opt = {k: v[k] for k in ("form", "reference", "shown") if k in v}
    flags = {k: flag(at[k], v[k]) for k in ("value", "sealed", "reveal", "fraction") if k in v}
    return record(text(at["call"], v["call"]), text(at["passed"], v["passed"]), text(at["otherwise"], v["otherwise"]),
                  args=tuple(v["args"]), ranks=v.get("ranks"), rel=number(at["rel"], v["rel"]) if "rel" in v else None,
                  setup=texts(at["setup"], v.get("setup", []), "notebook lines"), **opt, **flags)


def check_visible_config(at: At, v: Any, record: Callable[..., Record]) -> Record:
    fields(at, v, required=("name", "scenario", "passed"),
           optional=("margin", "micro_batch", "bubble_target", "setup"))
    _resolves(at["scenario"], text(at["scenario"], v["scenario"]), "a drop's scenario")
    extra = {k: number(at[k], v[k]) for k in ("margin", "bubble_target") if k in v}
    if "micro_batch" in v:
        extra["micro_batch"] = int(number(at["micro_batch"], v["micro_batch"]))
    return record(text(at["name"], v["name"]), v["scenario"], text(at["passed"], v["passed"]),
                  setup=texts(at["setup"], v.get("setup", []), "notebook lines"), **extra)


@cache
def rules() -> frozenset:
    """Every rule a configuration can break: the cost model's `Violation`s, and the check's own."""
    from threeaxes.grading.visible_config import PRINTED_ONLY

    found = set(PRINTED_ONLY)
    for module in ("threeaxes.cost.constraints", "threeaxes.cost.verdict"):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, f"{module} is a module of this repository"
        tree = ast.parse(Path(spec.origin).read_text())
        found |= {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and getattr(n.func, "id", None) == "Violation" and n.args and isinstance(n.args[0], ast.Constant)
                  and isinstance(n.args[0].value, str)}
    return frozenset(found)


def check_catalogue(at: At, catalogue: tuple, configuration: bool) -> None:
    from threeaxes.cost.verdict import CONFIG_KEYS

    seen: set[str] = set()
    for i, m in enumerate(catalogue):
        here = at[f"mistakes[{i}]"]
        if not NAME.fullmatch(m.name) or m.name in seen:
            here["name"].fail_value(m.name, "should be a new snake_case name saying the mistake "
                                            f"(the exercise's others: {sorted(seen)})")
        seen.add(m.name)
        if configuration and m.rule is None:
            here.fail("needs the key 'rule': the rule of the configuration that the mistake breaks")
        if m.rule is not None and m.rule not in rules():
            here["rule"].fail_value(m.rule, f"{_hint(m.rule, rules())}choose one of {sorted(rules())}")
        for key, _ in m.when:
            if key not in CONFIG_KEYS:
                here[f"when.{key}"].fail(f"is no key of a configuration: {_hint(key, CONFIG_KEYS)}"
                                         f"choose from {list(CONFIG_KEYS)}")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def check_calls(at: At, spec: DropSpec) -> None:
    """Each drop mistake's name is snake_case and new; a `calls_<function>` mistake names, in its
    name and its feedback, a function an exercise of the drop forbids."""
    forbidden = sorted({n for e in spec.exercises for n in e.forbid})
    parts = {_snake(p) for n in forbidden for p in n.split(".")[1:]}
    seen = set()
    for i, m in enumerate(spec.mistakes):
        here = at[f"mistakes[{i}]"]
        if not NAME.fullmatch(m.name) or m.name in seen:
            here["name"].fail_value(m.name, "should be a new snake_case name saying the mistake")
        seen.add(m.name)
        if not m.name.startswith("calls_"):
            continue
        said = m.name[len("calls_"):]
        if not any(re.search(rf"(^|_){re.escape(p)}(_|$)", said) for p in parts):
            here["name"].fail_value(m.name, f"names no function the drop forbids: write calls_<function>, "
                                            f"the function one of {forbidden}")
        if m.feedback.rsplit(".", 1)[-1] not in {n.rsplit(".", 1)[-1] for n in forbidden}:
            here["feedback"].fail_value(m.feedback, f"should name the forbidden function called, one of {forbidden}")


def _cells(notebook: Path) -> tuple[dict, set]:
    """({grade id of an auto-graded test cell: points}, {grade ids of code answer cells})."""
    cells = json.loads(notebook.read_text())["cells"]
    meta = [(c["cell_type"], c.get("metadata", {}).get("nbgrader", {})) for c in cells]
    tests = {m["grade_id"]: float(m.get("points", 0)) for kind, m in meta
             if kind == "code" and m.get("grade") and not m.get("solution")}
    answers = {m["grade_id"] for kind, m in meta if kind == "code" and m.get("solution")}
    return tests, answers


def _one_of(at: At, gid: str, known: Iterable[str], what: str) -> None:
    if gid not in known:
        at.fail_value(gid, f"is no {what} of the notebook: {_hint(gid, known)}choose one of {sorted(known)}")


def check_against_notebook(at: At, spec: DropSpec, notebook: Path) -> None:
    """Every grade id names a cell of the drop's notebook, and `points` is its test cells' own."""
    if not notebook.is_file():
        at.fail(f"has no notebook beside it: the drop's notebook is source/{spec.name}/{notebook.name}")
    tests, answers = _cells(notebook)
    for gid, points in spec.points.items():
        _one_of(at[f"points.{gid}"], gid, tests, "auto-graded test cell")
        if points != tests[gid]:
            at[f"points.{gid}"].fail_value(points, f"the notebook's cell gives {tests[gid]:g} points: write that")
    if set(tests) - set(spec.points):
        at["points"].fail(f"needs the keys {sorted(set(tests) - set(spec.points))}: every auto-graded test "
                          "cell of the notebook, with its points")
    for i, e in enumerate(spec.exercises):
        _one_of(at[f"exercises[{i}].answer"], e.answer, answers, "answer cell")
        for k, gid in enumerate(e.tests):
            _one_of(at[f"exercises[{i}].tests[{k}]"], gid, tests, "auto-graded test cell")
    unlisted = answers - {e.answer for e in spec.exercises}
    if unlisted:
        at["exercises"].fail(f"needs an entry for every answer cell of the notebook: add {sorted(unlisted)}")
    listed = [t for e in spec.exercises for t in e.tests]
    twice, orphans = {t for t in listed if listed.count(t) > 1}, set(tests) - set(listed)
    if twice or orphans:
        at["exercises"].fail(f"should list every auto-graded test cell in the tests of exactly one exercise: "
                             f"listed twice {sorted(twice)}, in none {sorted(orphans)}")
    for i, m in enumerate(spec.mistakes):
        _one_of(at[f"mistakes[{i}].answer"], m.answer, answers, "answer cell")
        for k, gid in enumerate(m.loses):
            _one_of(at[f"mistakes[{i}].loses[{k}]"], gid, tests, "auto-graded test cell")
        for gid, earned in m.scores:
            _one_of(at[f"mistakes[{i}].scores.{gid}"], gid, tests, "auto-graded test cell")
            if not 0 < earned < tests[gid]:
                at[f"mistakes[{i}].scores.{gid}"].fail_value(earned, f"a partial score lies between 0 and "
                                                                     f"the cell's {tests[gid]:g} points")
