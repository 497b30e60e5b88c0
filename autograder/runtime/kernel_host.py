"""The process that holds a drop's kernels, inside the sandbox; it forks one per submission
(CONTRIBUTING.md, "How a submission's cells run").

    python -m autograder.runtime.kernel_host      # the settings JSON, one line, first on stdin

    {"source": "...", "timeout": 90}  ->  {"outputs": [...], "status": "ok" | "dead"}
    {"fork": true}                    ->  {"forked": true | false}
    {"warm": true, "imports": [...]}  ->  {"warmed": true | false}
    {"end": true}                     ->  {"ended": true}"""
from __future__ import annotations

import _thread
import json
import os
import sys
import threading
from typing import TextIO

from autograder.runtime import budget, sandbox

# before isolating: the grader's code is not in the sandbox
from autograder.runtime.cell_runner import CellRunner
from autograder.runtime.forked_kernel import TIMEOUT, Kernel, dumps
from autograder.runtime.host_forkserver import forkservers_forked_from_here, warm_for_forks
from autograder.runtime.messages import CellReply, HostSettings, Output

MAX_REQUEST_CHARS = 64 << 20   # one line from the grader: a cell's source, or the settings with a drop's files


def main() -> None:
    settings: HostSettings = json.loads(sys.stdin.readline(MAX_REQUEST_CHARS + 1))
    budget.join(settings.get("cgroup_procs", []))   # before anything starts: all of it in one budget
    sandbox.die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    report = sandbox.isolate(settings)            # forks: what follows runs inside
    oracle = settings.get("oracle")               # the grader's socket, as this side sees it
    if oracle:
        settings["env"]["THREEAXES_ORACLE"] = oracle["inside" if report["namespaces"] else "outside"]
    folder = settings.get("oracle_folder")        # or a folder with a socket per kernel (forked_kernel.py)
    if folder:
        folder["here"] = folder["inside" if report["namespaces"] else "outside"]
        if folder.get("name"):                    # the opening cells' own
            settings["env"]["THREEAXES_ORACLE"] = f"{folder['here']}/{folder['name']}"
    if settings.get("package_parent") and not report["namespaces"]:
        # no mounts here: the withheld copy goes first on the path (autograder/withheld.py)
        settings["env"]["PYTHONPATH"] = settings["package_parent"]
        sys.path.insert(0, settings["package_parent"])
    os.environ.clear()
    os.environ.update(settings["env"])
    requests = sys.stdin
    runner = CellRunner()   # (it gives the kernels an empty sys.stdin)
    _leave_the_grader_behind(settings)
    if settings.get("withheld_marker"):
        report["package"] = _package_seen(settings["withheld_marker"])
    replies.write(json.dumps({"sandbox": report}) + "\n")
    forkservers_forked_from_here()   # the opening cells' launches: no fresh interpreter
    Host(runner, replies, report["namespaces"], settings).serve(requests)


def _leave_the_grader_behind(settings: HostSettings) -> None:
    """The kernels run in this process: they import from the work folder and the Python
    environment, as a Jupyter kernel would, and not the grader (`autograder`) this
    process was started from."""
    grader = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path[:] = [""] + [p for p in sys.path if p and os.path.abspath(p) != grader]
    for name in [n for n in sys.modules if n == "autograder" or n.startswith("autograder.")]:
        del sys.modules[name]


def _package_seen(marker: str) -> str:
    """"withheld" when the `threeaxes` the kernels will import is the withheld copy
    (autograder/withheld.py), else where the one they would import lives."""
    import importlib.util
    spec = importlib.util.find_spec("threeaxes")
    # a module, not a package (a threeaxes.py first on the path), has no search locations
    folders = list(spec.submodule_search_locations or ()) if spec else []
    if folders and all(os.path.exists(os.path.join(f, marker)) for f in folders):
        return "withheld"
    return f"imported from {', '.join(folders) or (spec and spec.origin) or 'nowhere'}"


class Host:
    def __init__(self, runner: CellRunner, replies: TextIO, namespaces: bool, settings: HostSettings):
        self.runner, self.replies, self.namespaces, self.settings = runner, replies, namespaces, settings
        self.kernel: Kernel | None = None
        self.forked = False
        self.warm = False   # each kernel forks its own forkserver (host_forkserver.warm_for_forks)

    def serve(self, requests: TextIO) -> None:
        while True:
            line = requests.readline(MAX_REQUEST_CHARS + 1)
            if not line or len(line) > MAX_REQUEST_CHARS:   # the grader's requests are short
                break
            request = json.loads(line)
            if "fork" in request:
                self._end()
                if not self.forked and not self.warm:
                    self.warm = warm_for_forks()
                self.kernel, self.forked = Kernel.fork(self, oracle=request.get("oracle")), True
                reply: CellReply | dict[str, bool] = {"forked": self.kernel.pid is not None}
            elif "warm" in request:   # the opening's last step (autograder/judging/warm_start.py)
                if not self.forked:
                    import_ahead(request.get("imports"))
                    self.warm = warm_for_forks()
                reply = {"warmed": self.warm}
            elif "end" in request:
                self._end()
                reply = {"ended": True}
            elif self.kernel is not None:
                reply = self.kernel.run(request)
            elif not self.forked:
                reply = {"outputs": run_here(self.runner, request["source"], request["timeout"]), "status": "ok"}
            else:   # the opening cells' state is every submission's: no cell runs here once one forked
                reply = {"outputs": [], "status": "dead"}
            self.replies.write(dumps(reply) + "\n")
        self._end()

    def _end(self) -> None:
        if self.kernel is not None:
            self.kernel.stop()
            self.kernel = None


def import_ahead(names: object) -> None:
    """The modules the drop's instructor cells import (warm_start.imported_modules), imported
    here once, before the first fork, so that every kernel forked from this state has them
    loaded (a plot's matplotlib, an explorer's widgets); nothing is bound in the notebook's
    namespace. A module that fails to import is left to the cell that imports it."""
    import importlib

    for name in names if isinstance(names, list) else []:
        if isinstance(name, str):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - that cell will meet the error itself
                continue


def run_here(runner: CellRunner, source: str, timeout: float) -> list[Output]:
    """A cell in this process (the opening cells: the instructor's own), interrupted at `timeout`."""
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        _thread.interrupt_main()

    timer = threading.Timer(timeout, interrupt)
    timer.start()
    try:
        outputs = runner.run(source)
    except KeyboardInterrupt:   # the timer fired between the cell's end and cancel()
        outputs = list(runner.outputs)
    finally:
        timer.cancel()
        timer.join()   # no thread may be left when this process forks
    return outputs + ([TIMEOUT] if fired.is_set() else [])


if __name__ == "__main__":
    main()
