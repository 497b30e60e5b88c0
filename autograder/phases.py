"""Where a submission's grading time goes: seconds per phase, counted in the grading worker.

    with phases.timed("fork"):       # the grader's steps add to their phase ...
        ...
    spent = phases.take()            # ... and the worker takes the sum after each submission

`table` prints a class's phases (benchmarks/grade_class.py): per submission and in all.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# in the order a submission meets them; "nbgrader" is what autograde spent beyond the others
PHASES = {
    "worker start": "a grading worker's start: Python, nbgrader, the config (once per worker)",
    "opening": "a drop's kernel host: sandbox, the opening cells (once per worker and drop)",
    "cell limits": "the model solution's cell times, measured (once per course and drop)",
    "setup": "the submission's guard and files: which cells are the instructor's, what is withheld",
    "fork": "the submission's kernel forked from the host, its own world and oracle",
    "student cells": "the submission's cells in its kernel",
    "test cells": "the test cells judged in the grader, their questions to the kernel and the oracle",
    "kernel end": "the kernel stopped with all it started, its oracle closed",
    "nbgrader": "nbgrader's own: reading, converting, the gradebook, writing the autograded notebook",
    "grader side": "the grader's queue, digest and pipes around each worker's answer",
}

_spent: dict[str, float] = {}
_nested: list[float] = []   # for each open `timed` block, the seconds its nested blocks counted
_quiet = [0]                # open `quiet` blocks


def add(phase: str, seconds: float) -> None:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; the phases are {', '.join(PHASES)}")
    _spent[phase] = _spent.get(phase, 0.0) + seconds


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """The block's seconds, less those of `timed` blocks inside it: each second counts once,
    in the innermost phase."""
    if _quiet[0]:
        yield
        return
    began = time.perf_counter()
    _nested.append(0.0)
    try:
        yield
    finally:
        took = time.perf_counter() - began
        add(phase, took - _nested.pop())
        if _nested:
            _nested[-1] += took


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No phase of its own inside: the block's time all counts to the phase around it."""
    _quiet[0] += 1
    try:
        yield
    finally:
        _quiet[0] -= 1


def take() -> dict[str, float]:
    """The seconds each phase took since the last take; the count starts again."""
    spent = dict(_spent)
    _spent.clear()
    return spent


def table(per_submission: list[dict[str, float]], wall_s: float, jobs: int) -> str:
    """Each phase's class total, its share of the workers' time and its mean per submission,
    then the submissions a minute over `wall_s` seconds with `jobs` workers."""
    count = max(1, len(per_submission))
    totals = {phase: sum(spent.get(phase, 0.0) for spent in per_submission) for phase in PHASES}
    busy = sum(totals.values()) or 1.0
    lines = [f"  {'phase':14s} {'class total':>11s} {'share':>6s} {'per submission':>15s}"]
    for phase, total in totals.items():
        lines.append(f"  {phase:14s} {total:9.1f} s {total / busy:6.1%} {total / count:13.2f} s   {PHASES[phase]}")
    lines.append(f"  {'all':14s} {busy:9.1f} s {1:6.0%} {busy / count:13.2f} s   "
                 f"the workers' time ({jobs} workers, {wall_s:.0f} s of wall time: "
                 f"{60 * len(per_submission) / wall_s:.1f} submissions a minute)")
    return "\n".join(lines)
