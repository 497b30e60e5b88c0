"""Runners on fresh ranks: `check_on_ranks`, imported from `threeaxes.grading`.

The ranks start in this process; or, when a student function is a `wire.Remote` (a
test cell judged from outside the student's kernel, autograder/judging/judge.py), in that
kernel, whose `wire.reply` calls `threeaxes.grading.check_on_ranks` there. This module
imports nothing of `wire` (`is_remote` is defined here and `wire` uses it), so the two
never import each other.
"""
from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["check_on_ranks", "is_remote"]


def is_remote(value: object) -> bool:
    """True for a `wire.Remote` (a student function that runs in the student's kernel),
    also one made before `wire` was imported again: its class says `is_remote = True`."""
    return getattr(type(value), "is_remote", False) is True


def check_on_ranks(check: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60.0) -> list[Any]:
    """Run the runner `check(rank, world_size, *args)` on fresh ranks (it calls the
    student's function and sends back raw values); return the plain values it returns.
    What they mean is decided by the caller: the visible check against stored cases,
    the hidden test against the references in autograder/references.

    `check` must be a module-level function of a `threeaxes.grading.*` module.
    Only its module and name travel; each worker imports it fresh from disk, so
    a function defined in the notebook (even one that claims a grading module
    as its `__module__`) cannot stand in for it. Student functions go in
    `args` and travel by value.
    """
    from threeaxes.launch import launch

    module, name = getattr(check, "__module__", "") or "", getattr(check, "__name__", "")
    if not module.startswith("threeaxes.grading."):
        raise ValueError("check_on_ranks takes a runner from threeaxes.grading")
    remote = next((a for a in args if is_remote(a)), None)
    if remote is not None:
        # judged from outside the student's kernel (autograder/judging/judge.py): the ranks
        # start there, with the student's function; only their plain results come back
        results = remote._answers.on_ranks(check, world_size, args, timeout)
    else:
        _import_course_modules_they_use(args)
        results = launch(_run_check_by_name, world_size, module, name, *args, timeout=timeout)
    for r in results:
        if type(r) not in (bool, int, float, str, tuple, dict, type(None)):
            raise AssertionError(f"a check returned {type(r).__name__}, not a plain value")
    return results


def _import_course_modules_they_use(functions: Iterable[object]) -> None:
    """Make every `threeaxes` name a student function refers to travel by name.

    A hidden test drops the notebook's `threeaxes` modules from sys.modules and
    imports the grading code afresh. A student function still refers to the old
    objects: the `comms` module it imported, or `all_gather` imported from it.
    cloudpickle sends a module (or a function of one) by name only if it is the
    object sys.modules holds now; otherwise by value, old classes and all, and
    the worker then sees two `ParallelDims` classes. So: import each such module
    again, and point a global that named an old function or class at the fresh
    one of the same name (a student's own function, defined in the notebook,
    is left alone). Each worker then imports its own fresh copy.
    """
    for fn in functions:
        namespace = getattr(fn, "__globals__", {})
        for name, value in list(namespace.items()):
            if isinstance(value, types.ModuleType):
                if value.__name__.split(".")[0] == "threeaxes":
                    importlib.import_module(value.__name__)
                continue
            module = getattr(value, "__module__", None)
            if not (isinstance(module, str) and module.split(".")[0] == "threeaxes"):
                continue
            fresh: object = importlib.import_module(module)
            for part in getattr(value, "__qualname__", "").split("."):
                fresh = getattr(fresh, part, None)
            if fresh is not None and fresh is not value and type(fresh) is type(value):
                namespace[name] = fresh


def _run_check_by_name(rank: int, world_size: int, module: str, name: str, *args: Any) -> Any:
    """Inside a fresh rank: import the reference check by name, then run it."""
    return getattr(importlib.import_module(module), name)(rank, world_size, *args)
