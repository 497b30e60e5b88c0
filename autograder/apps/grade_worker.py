"""One of `make grade`'s workers: nbgrader's autograde, with the course's nbgrader_config.py and the
given overrides, for one submission after another (nbgrader and the judge imported once).

    python -m autograder.apps.grade_worker <course root> [--Section.key=value ...]

It reads `[assignment, student]` JSON lines on stdin and answers each with one
`failures.WorkerAnswer` line: `error` is nbgrader's traceback, `log` what nbgrader logged meanwhile
(the real cause: nbgrader's error only says "see the above traceback"); a folder that holds more
than its notebook (autograder/one_notebook.py) is answered `refused`, unread."""
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
MAX_REQUEST_CHARS = 1 << 16   # one request line from the pool (apps/grade/pool.py)
STARTED_AT = "THREEAXES_WORKER_STARTED"   # time.time() when the pool started this worker


def main(argv: list[str] | None = None) -> None:
    # answers go on a copy of the stdout this process was started with; fd 1 then points at stderr
    # (the worker's log), so nothing else that prints, here or in a process started from here,
    # can garble an answer
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # a crash writes its Python traceback to the log as well
    faulthandler.enable(sys.stderr)
    root, *overrides = argv or sys.argv[1:]
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    config.merge(KVArgParseConfigLoader(argv=overrides).load_config())
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.apps.grade import refused

    api = NbGraderAPI(coursedir=CourseDirectory(config=config, root=str(Path(root).resolve())), config=config)
    started = os.environ.get(STARTED_AT)   # the pool's clock when it started this process
    phases.take()
    if started:   # the first submission's phases include this worker's start
        phases.add("worker start", max(0.0, time.time() - float(started)))
    while True:
        line = sys.stdin.readline(MAX_REQUEST_CHARS + 1)
        if not line or len(line) > MAX_REQUEST_CHARS:   # the pool's requests: two names
            return
        assignment, student = json.loads(line)
        print(f"-- grading {student}/{assignment} (worker {os.getpid()})", file=sys.stderr, flush=True)
        # checked again here, just before nbgrader copies the folder: what changed since the pool looked
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
