"""The grader's handles on a kernel host (`autograder.runtime.kernel_host`) and its kernels.

    host = KernelHost(isolate=True, files={...})         # the cells every submission shares, once
    host.run_cell(opening_cell, timeout=90)
    with KernelSession(host) as kernel:                  # a kernel forked per submission
        outputs = kernel.run_cell("x = 1", timeout=90)   # a student's cell
        answers = kernel.answers                          # threeaxes.grading.wire.Answers"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Generic, Protocol, TypeVar, overload

from autograder import course
from autograder.runtime import sandbox, zygote
from autograder.runtime.budget import Budget
from autograder.runtime.messages import HostSettings, Output, SandboxReport
from autograder.withheld import WITHHELD_MARKER
from threeaxes.grading.wire import Answers

ROOT = course.ROOT
MARGIN_S = 30            # beyond a cell's timeout, for the kernel host to reply
STARTUP_TIMEOUT_S = 180  # a host can take a minute to start on a loaded 2-core machine
SUBMISSION_CELLS = 4    # a submission's time: this many cells' limits (a drop runs in about 30 s)
MAX_LINE_CHARS = 64 << 20   # one reply line of a kernel host: a cell's outputs (images included)
STOPPED: list[Output] = [{"output_type": "error", "ename": "KernelStopped", "traceback": [],
            "evalue": "the kernel had stopped (a cell exited, crashed it or ran too long)"}]


def _out_of_time(message: str) -> Output:
    return {"output_type": "error", "ename": "TimeoutError", "evalue": message, "traceback": []}


class KernelHost:
    def __init__(self, *, isolate: bool = True, files: dict[str, bytes] | None = None,
                 package: Path | None = None, oracle_socket: str | None = None,
                 oracle_folder: str | None = None, oracle_name: str | None = None):
        """`package`: a copy of threeaxes the kernels import instead of this one;
        `oracle_socket`: where the grader answers its withheld functions (autograder/judging/oracle.py),
        one socket for every cell this host runs; or `oracle_folder`: the folder in which each
        kernel's own oracle listens (`KernelSession(oracle=...)`), `oracle_name` the socket
        there for the host's own (opening) cells."""
        # isolated: an empty folder the sandbox builds its root on; otherwise the kernel's scratch
        self._scratch = tempfile.TemporaryDirectory(prefix="threeaxes-grade-")
        workdir = "/tmp/work" if isolate else self._scratch.name
        home = "/tmp/home" if isolate else workdir
        env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
               "HOME": home, "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1",
               "JUPYTER_RUNTIME_DIR": f"{workdir}/.runtime", "IPYTHONDIR": f"{home}/.ipython",
               "MPLCONFIGDIR": f"{home}/.matplotlib", "MPLBACKEND": "Agg",
               "THREEAXES_PRESTART": "0", "TORCH_CPP_LOG_LEVEL": "ERROR",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        settings: HostSettings = {
            "isolate": isolate, "workdir": workdir, "env": env, "stage": self._scratch.name,
            "startup_timeout": STARTUP_TIMEOUT_S,
            "keep": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT / "threeaxes"), *python_paths()}),
            "files": {name: data.hex() for name, data in (files or {}).items()}}
        if package is not None:
            # bound over every copy a kernel would import (the checkout, site-packages), and
            # first on the path where no sandbox can be made; the host says which it imports
            settings["keep"].remove(str(ROOT / "threeaxes"))
            settings["replace"] = [(str(package), target, False) for target in kernel_imports_from(env)]
            settings["package_parent"] = str(Path(package).parent)
            settings["withheld_marker"] = WITHHELD_MARKER
        if oracle_socket is not None:
            # the socket alone, read-only (connecting needs no write to the folder): the
            # grader's folder is not the kernel's to fill or empty
            os.chmod(oracle_socket, 0o666)
            inside = f"/run/threeaxes-oracle/{Path(oracle_socket).name}"
            settings["replace"] = settings.get("replace", []) + [(oracle_socket, inside, False)]
            settings["oracle"] = {"inside": inside, "outside": oracle_socket}
        if oracle_folder is not None:
            # a folder of sockets, one per kernel, each made and removed by the grader: bound
            # read-only, searchable but not listable, so a kernel reaches the socket it is told of
            os.chmod(oracle_folder, 0o711)
            inside = "/run/threeaxes-oracle"
            settings["replace"] = settings.get("replace", []) + [(oracle_folder, inside, False)]
            settings["oracle_folder"] = {"inside": inside, "outside": oracle_folder, "name": oracle_name}
        self._budget = Budget.make()   # the host and all it starts, together (autograder/runtime/budget.py)
        settings["cgroup_procs"] = self._budget.procs_files
        self._log = tempfile.TemporaryFile()
        self._proc = _start_host({**env, "PYTHONPATH": str(ROOT)}, self._log)
        # the settings on the first line of its input, not in argv: the assignment's files
        # travel in them, and a command line holds no more than about 128 kB
        self._stdin: IO[str] = _piped(self._proc.stdin)
        try:
            self._stdin.write(json.dumps(settings) + "\n")
            self._stdin.flush()
        except OSError:   # it died at once; the missing reply below says so
            pass
        self._replies: queue.Queue[str | None] = queue.Queue()
        self.overlong: str | None = None   # why the host was stopped, when a line of its was over the cap
        threading.Thread(target=self._read, daemon=True).start()
        self.alive = True
        self.sandbox: SandboxReport = self._reply(STARTUP_TIMEOUT_S).get("sandbox") or SandboxReport()
        if self.sandbox:
            self.sandbox["budget"] = self._budget.how
        if not self.sandbox:
            self.close()
        elif package is not None and self.sandbox.get("package") != "withheld":
            self.close()
            raise RuntimeError(
                f"grading refused: the kernel imports the whole threeaxes ({self.sandbox.get('package')}), "
                "not the copy with the exercises' functions withheld, so an answer that only calls the "
                "package would earn points. Grade from the course's own environment (make grade), "
                "where the package is installed with pip install -e .")


    def run_cell(self, source: str, timeout: float) -> list[Output]:
        """A cell in the host itself: only before its first fork (the opening cells)."""
        reply = self.request({"source": source, "timeout": timeout}, timeout)
        if not reply and self.overlong:
            return [{"output_type": "error", "ename": "KernelStopped", "evalue": self.overlong, "traceback": []}]
        return reply["outputs"] if reply and reply.get("status") == "ok" else STOPPED

    def request(self, message: Mapping[str, object], timeout: float) -> dict[str, Any] | None:
        """One request and its reply; None (and the host stopped) if none comes in time."""
        if not self.alive:
            return None
        try:
            self._stdin.write(json.dumps(message) + "\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        reply = self._reply(timeout + MARGIN_S)
        if not reply:
            self.close()
            return None
        return reply

    def _reply(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            line = None
        try:
            return json.loads(line) if line else {}
        except ValueError:
            return {}

    def _read(self) -> None:
        """The host's replies, a line at a time, each at most MAX_LINE_CHARS: a longer one ends
        the host (everything it runs is as untrusted as the kernels), and says so."""
        stdout = _piped(self._proc.stdout)
        while True:
            line = stdout.readline(MAX_LINE_CHARS + 1)
            if len(line) > MAX_LINE_CHARS:
                self.overlong = (f"the kernel host sent the grader a line of over {MAX_LINE_CHARS >> 20} MiB "
                                 "(nothing the grader asked for is that long): it was stopped, with its kernel")
                sandbox.kill_tree(self._proc)
                break
            if not line:
                break
            self._replies.put(line)
        self._replies.put(None)

    def log_tail(self, chars: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:]

    def close(self) -> None:
        if self.alive:
            self.alive = False
            try:   # end of requests: the host stops its kernel ...
                self._stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            sandbox.kill_tree(self._proc)   # ... and whatever is left goes with its group
            self._budget.remove()
            self._scratch.cleanup()


def python_paths() -> set[str]:
    """The folders this Python imports from beyond its prefixes (a .pth file's, a conda
    layout's), less the course (ROOT, a folder that holds it, any folder in it but the
    environment `make` builds, .venv), the working folder and the user's own site-packages,
    which a kernel does not use."""
    import site

    skip = {os.getcwd(), os.path.realpath(site.getusersitepackages())}
    found = set()
    for path in filter(None, sys.path):
        real = Path(os.path.realpath(path))
        in_course = real == ROOT or ROOT.is_relative_to(real) or (
            real.is_relative_to(ROOT) and not real.is_relative_to(ROOT / ".venv"))
        if real.is_dir() and str(real) not in skip and not in_course:
            found.add(str(real))
    return found


def kernel_imports_from(env: dict[str, str]) -> list[str]:
    """The folders a kernel started with `env` (no PYTHONPATH, an empty working folder) would
    import `threeaxes` from: the checkout for an editable install, site-packages for
    `pip install .`, a wheel or a conda package."""
    code = ("import importlib.util, json; spec = importlib.util.find_spec('threeaxes'); "
            "print(json.dumps(list(spec.submodule_search_locations) if spec else []))")
    with tempfile.TemporaryDirectory() as empty:
        found = subprocess.run([sys.executable, "-c", code], cwd=empty, env=env, capture_output=True,
                               text=True, timeout=STARTUP_TIMEOUT_S)
    if found.returncode != 0:
        raise RuntimeError(f"could not tell where a kernel imports threeaxes from: {found.stderr[-2000:]}")
    return [os.path.realpath(path) for path in json.loads(found.stdout)]


def _start_host(env: Mapping[str, str], stderr: IO[bytes]) -> zygote.Forked | subprocess.Popen[str]:
    """A kernel host with `env`, its stderr `stderr`: forked from this process's zygote (torch
    already imported), or, where none can fork it, started afresh."""
    host_in_r, host_in_w = os.pipe()
    host_out_r, host_out_w = os.pipe()
    try:
        forked = zygote.fork("host", env, [host_in_r, host_out_w, stderr.fileno()])
    finally:
        os.close(host_in_r)
        os.close(host_out_w)
    if forked is not None:
        forked.stdin, forked.stdout = open(host_in_w, "w"), open(host_out_r)
        return forked
    os.close(host_in_w)
    os.close(host_out_r)
    return subprocess.Popen([sys.executable, "-m", "autograder.runtime.kernel_host"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            cwd=ROOT, env=dict(env), start_new_session=True)


def _piped(stream: IO[str] | None) -> IO[str]:
    """A pipe of a process started with it (never None, as Popen's types allow)."""
    assert stream is not None
    return stream


class KernelOracle(Protocol):
    """What a session needs of its kernel's oracle (autograder.judging.oracle.Oracle)."""
    socket_path: str

    def close(self) -> None: ...


O = TypeVar("O", bound=KernelOracle)


class KernelSession(Generic[O]):
    """One submission's kernel, forked from `host` (one of its own when none is given).

    Time is counted three ways: each cell and each question to `answers` within `timeout`
    (the host interrupts it); all the questions one test cell asks within one `timeout`
    together (`test_cell`); the whole submission within `budget_s`, after which its kernel
    is stopped and each later cell gets an error that says so."""

    @overload   # no oracle: a KernelSession[KernelOracle], whose `oracle` is None
    def __init__(self: KernelSession[KernelOracle], host: KernelHost | None = None, *, timeout: float = 90,
                 budget_s: float | None = None, oracle: None = None, **host_settings: Any) -> None: ...

    @overload   # an oracle that may be None (OpeningHost.session's): a KernelSession[its type]
    def __init__(self, host: KernelHost | None = None, *, timeout: float = 90, budget_s: float | None = None,
                 oracle: O | None, **host_settings: Any) -> None: ...

    def __init__(self, host: KernelHost | None = None, *, timeout: float = 90, budget_s: float | None = None,
                 oracle: O | None = None, **host_settings: Any) -> None:
        """`oracle`: this kernel's own (autograder/judging/oracle.py), listening in the host's
        `oracle_folder`; it is closed with the kernel."""
        self._own_host = host is None
        self.oracle = oracle
        self.host = host if host is not None else KernelHost(**host_settings)
        self.sandbox = self.host.sandbox
        self.answers = Answers(self.run_code, timeout)
        self.budget_s = SUBMISSION_CELLS * timeout if budget_s is None else budget_s
        self._deadline = time.monotonic() + self.budget_s
        self._test_deadline: float | None = None
        self._stopped = STOPPED
        fork: dict[str, object] = {"fork": True}
        if oracle is not None:
            fork["oracle"] = Path(oracle.socket_path).name
        reply = self.host.request(fork, STARTUP_TIMEOUT_S)
        self.alive = bool(reply and reply.get("forked"))

    @contextlib.contextmanager
    def test_cell(self, timeout: float) -> Iterator[None]:
        """The questions a test cell asks, all within `timeout`: a slow answer it calls many
        times fails that cell instead of holding the grader."""
        self._test_deadline = time.monotonic() + timeout
        try:
            yield
        finally:
            self._test_deadline = None

    def run_cell(self, source: str, timeout: float) -> list[Output]:
        reply = self._request(source, timeout)
        if reply is None and self.host.overlong:
            self._stopped = [{"output_type": "error", "ename": "KernelStopped", "evalue": self.host.overlong,
                              "traceback": []}]
        return self._stopped if reply is None else reply["outputs"]

    def run_code(self, code: str, timeout: float) -> str | None:
        """What `code` printed, for `Answers`; None once the kernel is gone."""
        reply = self._request(code, timeout)
        if reply is None:
            return None
        return "".join(o.get("text", "") for o in reply["outputs"]
                       if o.get("output_type") == "stream" and o.get("name") == "stdout")

    def _request(self, source: str, timeout: float) -> dict[str, Any] | None:
        if not self.alive:
            return None
        now = time.monotonic()
        if now >= self._deadline:
            self._stopped = [_out_of_time(f"the submission used its whole grading time ({self.budget_s:.0f} s): "
                                          "the cells after this one were not run")]
            self.close()
            return None
        if self._test_deadline is not None and now >= self._test_deadline:
            return None   # this test cell's time is spent; the kernel goes on to the next cell
        timeout = min(timeout, self._deadline - now, (self._test_deadline or self._deadline) - now)
        reply = self.host.request({"source": source, "timeout": timeout}, timeout)
        if reply is None or reply.get("status") != "ok":
            self.alive = False   # the host has stopped it already
            return reply if reply and "outputs" in reply else None
        return reply

    def close(self) -> None:
        if self.alive:
            self.alive = False
            self.host.request({"end": True}, MARGIN_S)
        if self.oracle is not None:    # after the kernel: nothing it left queued is read by anyone
            self.oracle.close()
        if self._own_host:
            self.host.close()

    def __enter__(self) -> KernelSession[O]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
