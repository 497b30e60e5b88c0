"""Each cell's time limit from the model solution's own time, so a loop stops in seconds
(the rule and where the times are kept: CONTRIBUTING.md, "Each cell's time limit")."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import phases
from autograder.runtime.forked_kernel import TIMEOUT
from autograder.runtime.messages import Output

if TYPE_CHECKING:
    from nbformat import NotebookNode

FACTOR = 10      # a student's cell may take this many times the model solution's
FLOOR_S = 5.0    # but never less: a cell that takes 0.01 s in the model still gets a few seconds
FOLDER = Path(".graded") / "cell-seconds"   # in the course root, beside the grading notes (apps/grade/notes.py)


def key(cell: Mapping[str, Any]) -> str:
    """How a submission's cell is matched with the model's: its grade id, or its code."""
    grade_id = (cell.get("metadata", {}).get("nbgrader", {}) or {}).get("grade_id")
    if grade_id:
        return f"id:{grade_id}"
    return "code:" + hashlib.sha256(cell.get("source", "").strip().encode()).hexdigest()[:16]


@dataclass
class Limits:
    """The limit of each cell of one notebook: `seconds` holds the model solution's time per key."""
    timeout: float
    seconds: dict[str, float] = field(default_factory=dict)
    factor: float = FACTOR
    floor_s: float = FLOOR_S

    def of(self, cell: Mapping[str, Any]) -> tuple[float, str]:
        """(the cell's limit in seconds, how it was derived, in words)."""
        measured = self.seconds.get(key(cell))
        if measured is None or self.factor <= 0:
            return self.timeout, f"the course's limit per cell (Execute.timeout = {self.timeout:g} s)"
        limit = min(self.timeout, max(self.floor_s, self.factor * measured))
        return limit, (f"{self.factor:g} x the model solution's {measured:.2f} s for this cell, at least "
                       f"{self.floor_s:g} s, at most the course's {self.timeout:g} s")

    def stopped(self, cell: Mapping[str, Any], outputs: list[Output], name: str) -> list[Output]:
        """`outputs` with the time-limit error, if there is one, saying which cell hit which limit."""
        limit, how = self.of(cell)
        said = (f"{name} was stopped at its grading time limit of {limit:.1f} s ({how}). Make it "
                f"finish sooner: a loop that never ends, or work far beyond the exercise's, is stopped here")
        return [{**o, "evalue": said, "traceback": [f"{TIMEOUT['ename']}: {said}"]} if _is_timeout(o) else o
                for o in outputs]


def _is_timeout(output: Output) -> bool:
    """The kernel host's own "stopped at the limit" (a student's `raise TimeoutError` is theirs)."""
    return (output.get("output_type") == "error" and output.get("ename") == TIMEOUT["ename"]
            and output.get("evalue") == TIMEOUT["evalue"])


class Recorder:
    """What the model solution's run fills in: the seconds of each cell, by key."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def timing(self, cell: Mapping[str, Any]) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[key(cell)] = max(self.seconds.get(key(cell), 0.0), time.perf_counter() - began)


def measured(course_root: Path, assignment: str, notebook: str,
             measure: Callable[[NotebookNode], dict[str, float] | None]) -> dict[str, float]:
    """The model solution's seconds per cell key for source/<assignment>/<notebook>.ipynb: read
    where they were measured on this very notebook, else `measure(nb)` (a Recorder's seconds, or
    None where the model could not be run) and kept. Empty where the course has no such notebook
    or the model could not be run: every cell keeps the course's limit."""
    import nbformat

    source = Path(course_root) / "source" / assignment / f"{notebook}.ipynb"
    if not (assignment and notebook) or "/" in assignment + notebook or not source.is_file():
        return {}
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    kept = Path(course_root) / FOLDER / f"{assignment}+{notebook}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(kept.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # two workers on a new drop: one measures, the other reads
        try:
            found = json.loads(kept.read_text())
            if found.get("digest") == digest:
                return {str(k): float(v) for k, v in found["seconds"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        with phases.timed("cell limits"):
            seconds = measure(nbformat.reads(data.decode(), as_version=4))
        if seconds is None:   # the model could not be run: the course's limit, measured again next time
            return {}
        scratch = kept.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps({"digest": digest, "seconds": seconds}, indent=1, sort_keys=True))
        os.replace(scratch, kept)
    return seconds
