"""How a graded kernel reaches a function it may not compute itself."""
from __future__ import annotations

import json
import os
import socket
from typing import Any

ENV = "THREEAXES_ORACLE"       # the socket's path, set in a graded kernel's environment


class NotInGradedRun(RuntimeError):
    """A stub was called where no grader listens (it should not happen outside grading)."""


def call(path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The grader's result of `path(*args, **kwargs)` ("module:qualname").

    In a graded run (`autograder/withheld.py`, answered by `autograder/judging/oracle.py`) the
    student's kernel gets a copy of `threeaxes` in which every function that some exercise forbids (its drop's
    `grading.json`, "exercises") has lost its body: the body is one call to
    `call` below, which asks the grader for the result over a socket. The grader
    computes it with its own copy of the package and records which cell was
    running, so a demonstration still shows its figure while an answer that
    leans on the function is seen, whatever route it took to reach it (an
    alias, `getattr`, `importlib`, a copy of the code, a subprocess, a rank):
    the body the student would need is not in the kernel at all.

    Arguments and results cross as data (`threeaxes.grading.wire`), never as
    pickles, so nothing the kernel sends runs in the grader.
    """
    from threeaxes.grading import wire

    where = os.environ.get(ENV)
    if not where:
        raise NotInGradedRun(f"{path} is withheld in this graded run and no grader answers for it")
    request = json.dumps({"path": path, "args": wire.encode(tuple(args)),
                          "kwargs": wire.encode(dict(kwargs))}) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(where)
        s.sendall(request.encode())
        reply = s.makefile("r").readline()
    return wire.Answers(None).decode(json.loads(reply))
