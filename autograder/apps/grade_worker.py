"""One of `make grade`'s workers: nbgrader's autograde for one submission after another.

    python -m autograder.apps.grade_worker <course root> [--Section.key=value ...]

Reads `[assignment, student]` JSON lines on stdin and answers each with one
line `{"success": bool, "error": str, "log": str}` once nbgrader's Autograde (the
same converter `nbgrader autograde` runs, with the course's nbgrader_config.py
and the given overrides) has graded it: `error` is nbgrader's traceback, `log`
what nbgrader logged meanwhile (where the real cause is: nbgrader's own error
only says "see the above traceback"). A submission folder that holds more than its
notebook (autograder/one_notebook.py) is answered `{"success": false, "refused": why}`
unread. A worker imports nbgrader and the grader's
side of the judge once, not once per submission; the student's code never
runs here (autograder/plugins/execute.py: it runs in a sandboxed kernel).

The answers go to the grader on the stdout this process was started with; file
descriptor 1 is then pointed at stderr (the worker's log, which grade.py keeps),
so nothing else that prints, here or in a process started from here, can
garble an answer. A crash writes its Python traceback to the log as well.
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import phases

if TYPE_CHECKING:
    from autograder.apps.grade.failures import WorkerAnswer

KEEP = 20000   # characters of nbgrader's traceback and log sent back per submission
MAX_REQUEST_CHARS = 1 << 16   # one request line from grade.py
STARTED_AT = "THREEAXES_WORKER_STARTED"   # time.time() when grade.py started this worker


def main(argv: list[str] | None = None) -> None:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable(sys.stderr)
    root, *overrides = argv or sys.argv[1:]
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    config.merge(KVArgParseConfigLoader(argv=overrides).load_config())
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.apps.grade import refused

    api = NbGraderAPI(coursedir=CourseDirectory(config=config, root=str(Path(root).resolve())), config=config)
    started = os.environ.get(STARTED_AT)   # grade.py's clock when it started this process
    phases.take()
    if started:   # the first submission's phases include this worker's start
        phases.add("worker start", max(0.0, time.time() - float(started)))
    while True:
        line = sys.stdin.readline(MAX_REQUEST_CHARS + 1)
        if not line or len(line) > MAX_REQUEST_CHARS:   # grade.py's requests: two names
            return
        assignment, student = json.loads(line)
        print(f"-- grading {student}/{assignment} (worker {os.getpid()})", file=sys.stderr, flush=True)
        # checked again here, just before nbgrader copies the folder: what changed since grade.py looked
        why = refused(Path(root), assignment, student)
        if why:
            said: WorkerAnswer = {"success": False, "refused": why, "error": why, "log": ""}
            answers.write(json.dumps(said) + "\n")
            answers.flush()
            continue
        began = time.perf_counter()
        try:
            result = api.autograde(assignment, student, force=True, create=True)
        except Exception:   # noqa: BLE001 - capture_log catches nbgrader's own; anything else is named too
            import traceback
            result = {"success": False, "error": traceback.format_exc()}
        if not result.get("success"):
            print(result.get("log") or "", result.get("error") or "", sep="\n", file=sys.stderr, flush=True)
        spent = phases.take()
        # what autograde took beyond the grader's own steps (worker start came before it)
        inside = sum(t for phase, t in spent.items() if phase != "worker start")
        spent["nbgrader"] = max(0.0, time.perf_counter() - began - inside)
        answer: WorkerAnswer = {"success": bool(result.get("success")), "error": (result.get("error") or "")[-KEEP:],
                                "log": (result.get("log") or "")[-KEEP:], "phases": spent}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
