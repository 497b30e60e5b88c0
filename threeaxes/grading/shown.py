"""How a failed visible check shows in the student's notebook: its message alone.

A check fails with an AssertionError whose message names the mistake in the student's
terms. Printed the usual way, that sentence would come last, under twenty lines of the
course's own grading frames. IPython shows an exception that has a `_render_traceback_`
method as the lines that method returns, so a failed check shows as one red mark and
its message: nothing of the traceback, which points at no line of the student's.
The exception is still an AssertionError (nbgrader, pytest and the grader see it as one).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

RED, RESET = "\x1b[31m", "\x1b[0m"


def one_line(exc: BaseException) -> BaseException:
    """`exc`, made to show in a notebook as its message alone."""
    lines = str(exc).splitlines() or ["the check failed"]
    # IPython's hook, read from the instance: no exception type declares it
    exc._render_traceback_ = lambda: [f"{RED}✗ check failed:{RESET} {lines[0]}", *lines[1:]]  # type: ignore[attr-defined]
    return exc


def in_one_line(check: Callable[P, R]) -> Callable[P, R]:
    """A check whose AssertionError shows as its message alone (`one_line`)."""
    @functools.wraps(check)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = True
        try:
            return check(*args, **kwargs)
        except AssertionError as exc:
            raise one_line(exc) from None
    return run
