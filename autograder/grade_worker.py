"""One of `make grade`'s workers: nbgrader's autograde for one submission after another.

    python -m autograder.grade_worker <course root> [--Section.key=value ...]

Reads `[assignment, student]` JSON lines on stdin and answers each with one
line `{"success": bool, "error": str}` once nbgrader's Autograde (the same
converter `nbgrader autograde` runs, with the course's nbgrader_config.py and
the given overrides) has graded it. A worker imports nbgrader and the grader's
side of the judge once, not once per submission; the student's code never
runs here (autograder/execute.py: it runs in a sandboxed kernel).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv=None) -> None:
    root, *overrides = argv or sys.argv[1:]
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    config.merge(KVArgParseConfigLoader(argv=overrides).load_config())
    api = NbGraderAPI(coursedir=CourseDirectory(config=config, root=str(Path(root).resolve())), config=config)
    for line in sys.stdin:
        assignment, student = json.loads(line)
        result = api.autograde(assignment, student, force=True, create=True)
        print(json.dumps({"success": bool(result.get("success")),
                          "error": (result.get("error") or "")[-3000:]}), flush=True)


if __name__ == "__main__":
    main()
