"""A drop's opening cells, run once per grading worker instead of once per submission: each
submission whose notebook opens with them gets a kernel forked from that state (`OpeningHost`;
CONTRIBUTING.md, "The opening cells run once per grading worker")."""
from __future__ import annotations

import atexit
import hashlib
import secrets
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import phases
from autograder.judging.judge import is_graded, last_graded_code_cell
from autograder.judging.oracle import Oracle
from autograder.runtime.kernel_session import KernelHost, KernelSession
from autograder.runtime.oracle_worker import WorkerSource
from autograder.withheld import package_for

if TYPE_CHECKING:
    from nbformat import NotebookNode

KEPT = 3   # hosts a worker keeps: a drop's usual opening, and the odd notebook that differs


def opening_cells(nb: NotebookNode) -> list[str]:
    """The sources of the code cells before the first answer or test cell."""
    sources = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if is_graded(cell):
            break
        sources.append(cell.source)
    return sources


def imported_modules(nb: NotebookNode) -> tuple[str, ...]:
    """The modules the instructor's code cells of `nb` import at their top level, up to its last
    graded code cell (the grader runs none after it): `import a.b` gives a.b, `from a import b`
    gives a and a.b (b may be a module). A cell Python cannot parse (a line magic) gives none."""
    import ast

    names: dict[str, None] = {}
    for cell in nb.cells[:last_graded_code_cell(nb) + 1]:
        if cell.cell_type != "code" or is_graded(cell):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                names.update(dict.fromkeys(alias.name for alias in node.names))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names[node.module] = None
                names.update(dict.fromkeys(f"{node.module}.{alias.name}" for alias in node.names
                                           if alias.name != "*"))
    return tuple(names)


class OpeningHost:
    """A kernel host that has run `sources`, then imported `imports` (each kernel forked from it
    finds them loaded); `session()` forks a submission's kernel from it."""

    def __init__(self, sources: list[str], *, isolate: bool, files: dict[str, bytes], withheld: set[str] | None,
                 timeout: float, imports: tuple[str, ...] = ()):
        self._scratch = tempfile.TemporaryDirectory(prefix="threeaxes-oracle-")
        self.withheld = set(withheld or ())
        # the modules imported once, in an unprivileged process each kernel's worker is forked from
        self._workers = WorkerSource({p.split(":")[0] for p in self.withheld}) if self.withheld else None
        opening = self._oracle()
        try:
            self.host = KernelHost(isolate=isolate, files=files,
                                   package=package_for(withheld) if withheld else None,
                                   oracle_folder=self._scratch.name if self.withheld else None,
                                   oracle_name=Path(opening.socket_path).name if opening else None)
            self.sandbox = self.host.sandbox
            self.outputs = [self.host.run_cell(source, timeout) for source in sources if self.host.alive]
            # once here, not in each kernel (kernel_host.py)
            self.host.request({"warm": True, "imports": list(imports)}, timeout)
        except BaseException:
            if self._workers:
                self._workers.close()
            self._scratch.cleanup()
            raise
        finally:
            if opening:     # the opening cells' oracle ends with them: each kernel gets its own
                opening.close()

    def _oracle(self) -> Oracle | None:
        """A new oracle, on a socket of its own in this host's oracle folder (named at random:
        a kernel reaches only the one it is told of)."""
        if not self.withheld:
            return None
        return Oracle(self.withheld, Path(self._scratch.name), source=self._workers,
                      name=f"{secrets.token_hex(8)}.sock")

    @property
    def ready(self) -> bool:
        return self.host.alive

    def session(self, timeout: float) -> KernelSession[Oracle]:
        """A kernel forked from this host, with an oracle of its own that ends with it."""
        return KernelSession(self.host, timeout=timeout, oracle=self._oracle())

    def close(self) -> None:
        self.host.close()
        if self._workers:
            self._workers.close()
        self._scratch.cleanup()


_hosts: OrderedDict[tuple[object, ...], OpeningHost] = OrderedDict()


def host_for(nb: NotebookNode, *, instructors: set[str], isolate: bool, files: dict[str, bytes],
             withheld: set[str] | None, timeout: float, imports: tuple[str, ...] = ()) -> OpeningHost:
    """The host for this notebook's opening cells, made (and run) on first use. Only the
    instructor's cells run in a host: where a student changed one, the opening is empty
    and every cell runs in the submission's own kernel. `imports`: the instructor's modules
    (`imported_modules` of the source notebook), loaded in the host after the opening."""
    sources = opening_cells(nb)
    if not all(source.strip() in instructors for source in sources):
        sources = []
    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(name.encode() + b"\0" + data + b"\0")
    key = (isolate, tuple(sources), digest.hexdigest(), tuple(sorted(withheld or ())), timeout, imports)
    host = _hosts.pop(key, None)
    if host is None or not host.ready:
        if host is not None:
            host.close()
        with phases.timed("opening"):
            host = OpeningHost(sources, isolate=isolate, files=files, withheld=withheld, timeout=timeout,
                               imports=imports)
    _hosts[key] = host
    while len(_hosts) > KEPT:
        _hosts.popitem(last=False)[1].close()
    return host


@atexit.register
def close_all() -> None:
    while _hosts:
        _hosts.popitem()[1].close()
