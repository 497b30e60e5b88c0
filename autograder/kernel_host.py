"""The process that holds a submission's kernel, inside the sandbox.

    python -m autograder.kernel_host '<settings JSON>'

It isolates itself first (`autograder.sandbox.isolate`), then starts a Jupyter
kernel and runs the cells the grader sends, one JSON line at a time on stdin:

    {"source": "...", "timeout": 90}  ->  {"outputs": [...], "status": "ok" | "timeout" | "dead"}

Replies go to the grader on a private copy of stdout; the kernel (and every
rank it starts) gets /dev/null instead, so what it prints never reaches the
grader except as a cell's outputs. Everything here is as untrusted as the
kernel: the grader reads replies as data and decides nothing from them but
the outputs of the student's own cells.
"""
from __future__ import annotations

import json
import os
import sys

import nbformat

from autograder import sandbox

TIMEOUT = {"ename": "TimeoutError", "evalue": "the cell ran past the grading time limit"}


def main(argv=None) -> None:
    settings = json.loads((argv or sys.argv[1:])[0])
    sandbox.die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    report = sandbox.isolate(settings)            # forks: what follows runs inside
    oracle = settings.get("oracle")               # the grader's socket, as this side sees it
    if oracle:
        settings["env"]["THREEAXES_ORACLE"] = oracle["inside" if report["namespaces"] else "outside"]
    if settings.get("package_parent") and not report["namespaces"]:
        # no mounts here: the withheld copy goes first on the path (autograder/borrowed.py)
        settings["env"]["PYTHONPATH"] = settings["package_parent"]
    os.environ.clear()
    os.environ.update(settings["env"])
    replies.write(json.dumps({"sandbox": report}) + "\n")
    serve(sys.stdin, replies, settings)


def serve(requests, replies, settings: dict) -> None:
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.v4.new_notebook()
    client = NotebookClient(nb, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                            error_on_timeout=TIMEOUT,
                            startup_timeout=settings.get("startup_timeout", 120),
                            resources={"metadata": {"path": settings["workdir"]}})
    executed = []   # each cell's execute_reply: a timeout shows there, not in the outputs
    client.on_cell_executed = lambda cell, cell_index, execute_reply: executed.append(execute_reply)
    client.km = client.create_kernel_manager()
    client.start_new_kernel(env=settings["env"])
    client.start_new_kernel_client()
    alive = True
    for line in requests:
        request = json.loads(line)
        cell = nbformat.v4.new_code_cell(request["source"])
        nb.cells = [cell]
        status = "dead"
        if alive:
            client.timeout = request["timeout"]
            try:
                executed.clear()
                client.execute_cell(cell, 0)
                timed_out = _timed_out(cell, executed)
                status = "ok" if not timed_out or _answers(client, executed) else "dead"
            except DeadKernelError:
                alive = False
            except Exception as exc:  # noqa: BLE001 - nbclient's own failures end the kernel
                cell.outputs = [nbformat.v4.new_output("error", ename=type(exc).__name__,
                                                       evalue=str(exc), traceback=[])]
                alive = client.kc is not None and client.km.is_alive()
                status = "ok" if alive else "dead"
        replies.write(json.dumps({"outputs": cell.get("outputs", []), "status": status}) + "\n")
    # the grader closed our stdin: stop the kernel (without a PID namespace nothing else would)
    run_sync(client.km.shutdown_kernel)(now=True)


def _timed_out(cell, replies) -> bool:
    """True if the cell ran past its time; its outputs then say so, as nbgrader's own
    Execute does."""
    content = replies[-1].get("content", {}) if replies else {}
    if content.get("ename") != TIMEOUT["ename"]:
        return False
    cell.outputs.append(nbformat.v4.new_output("error", ename=TIMEOUT["ename"], evalue=TIMEOUT["evalue"],
                                               traceback=[f"{TIMEOUT['ename']}: {TIMEOUT['evalue']}"]))
    return True


def _answers(client, executed, grace: float = 10) -> bool:
    """After a timeout nbclient has interrupted the kernel; one that still does not
    answer (it ignores the interrupt) would cost every later cell a full timeout."""
    probe = nbformat.v4.new_code_cell("pass")
    client.nb.cells = [probe]
    client.timeout = grace
    executed.clear()
    try:
        client.execute_cell(probe, 0)
    except Exception:  # noqa: BLE001 - the kernel went away meanwhile
        return False
    return not (executed and executed[-1].get("content", {}).get("ename") == TIMEOUT["ename"])


if __name__ == "__main__":
    main()
