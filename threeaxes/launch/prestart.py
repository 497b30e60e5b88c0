"""Start launch's forkserver in the background as soon as ``threeaxes`` is imported."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

ENV_VAR = "THREEAXES_PRESTART"
_OFF, _ON, _AUTO = ("0", "no", "false", "off"), ("1", "yes", "true", "on"), ("", "auto")

# Imported by the forkserver before it forks its first rank: what every rank needs to
# join a group and run fn. Never anything that initialises CUDA.
PRELOAD = ["threeaxes.launch.forkserver_quiet", "torch", "torch.distributed", "cloudpickle",
           "threeaxes.launch.worker", "threeaxes.launch.forkserver_idle"]
# Imported by the forkserver afterwards, one at a time, only while no launch waits for
# it (threeaxes.launch.forkserver_idle), so an early first launch does not wait 1-2 s for them.
# torch._dynamo is what torch.optim and parallelize_module pull in on first use (2-5 s
# per rank otherwise); torch.fx.experimental.symbolic_shapes (sympy, ~0.5 s) is imported
# by the first backward given an explicit gradient, which every pipeline stage but the
# last runs. Dependencies that import on their own come first, so each step is shorter
# (sympy ~0.5 s, DTensor ~0.25 s, then torch._dynamo ~0.9 s in one piece: its own
# submodules cannot be imported ahead of it, that fails on a circular import).
DEFERRED = ["sympy", "torch.fx.experimental.symbolic_shapes", "torch.distributed.tensor",
            "torch._dynamo", "torch.distributed.tensor.parallel", "torch.distributed.pipelining",
            "threeaxes.toy"]

# How long ``import threeaxes`` waits for the background thread to have spawned the
# server (usually 20-90 ms). Without it, the thread often starts only after the next
# cell's ``import torch`` is well under way: while torch loads its C library the thread
# cannot run (the GIL), and the server, started late, then makes the first launch wait.
HEAD_START_S = 0.25

# A kernel whose notebook never names launch starts no server (a torch process and its
# memory, for nothing); the folder's notebooks are read only up to this many.
MAX_NOTEBOOKS = 8

# How long launch waits for the server to import DEFERRED before it forks anyway, and
# how often it looks.
WARM_WAIT_S = 30.0
_WARM_POLL_S = 0.02
_silent_server = None  # pid of a server that did not say it was warm within WARM_WAIT_S

# What the import of threeaxes decided in this process: "started", or why not. A rank
# inherits the forkserver's value (it forks with threeaxes already imported).
decision = None
error = None  # the exception if the background start failed; launch then tries itself
_thread = None
_lock = threading.Lock()


def forkserver_context() -> ForkServerContext | SpawnContext:
    """The process-wide forkserver context launch uses (spawn where there is no
    forkserver: slower, still works). multiprocessing keeps one server per process,
    running between launches, and stops it when this process exits."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # takes effect when the server starts; a no-op after
    return ctx


def skip_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """None if this process should prestart the forkserver, else why not (a sentence)."""
    environ = os.environ if environ is None else environ
    setting = environ.get(ENV_VAR, "auto").strip().lower()
    if setting not in _OFF + _ON + _AUTO:
        warnings.warn(f"{ENV_VAR}={setting!r} is not understood; use 0 (never), 1 (always) "
                      "or auto (in a Jupyter kernel); using auto", stacklevel=2)
        setting = "auto"
    if setting in _OFF:
        return f"opted out ({ENV_VAR}={environ[ENV_VAR]})"
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return "under torchrun: launch spawns no processes"
    if setting in _AUTO and not _in_kernel():
        return f"not in a Jupyter kernel ({ENV_VAR}=1 starts it anyway)"
    if setting in _AUTO:
        notebooks = _kernels_notebooks(environ)
        if notebooks and not any(map(_names_launch, notebooks)):
            return f"{', '.join(n.name for n in notebooks)} never launches ranks ({ENV_VAR}=1 starts it anyway)"
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "this platform has no forkserver"
    if multiprocessing.parent_process() is not None:
        return "inside a multiprocessing child (a rank)"
    if _inside_forkserver():
        return "inside the forkserver"
    return None


def _in_kernel() -> bool:
    ipython = sys.modules.get("IPython")  # never import IPython just to ask
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def _kernels_notebooks(environ: Mapping[str, str]) -> list[Path]:
    """The notebook this kernel runs, where it can be known: the one jupyter-server names
    (JPY_SESSION_NAME), else those in the kernel's working folder (where JupyterLab, nbclient
    and nbval start it), up to MAX_NOTEBOOKS of them; none where neither says (Colab)."""
    named = environ.get("JPY_SESSION_NAME", "")
    try:
        if named and os.path.isfile(named):
            return [Path(named)]
        found = sorted(Path.cwd().glob("*.ipynb"))
    except OSError:
        return []
    return found if len(found) <= MAX_NOTEBOOKS else []


def _names_launch(notebook: Path) -> bool:
    """Whether a code cell of the notebook names launch (threeaxes.launch, or a call of
    it); True where the notebook cannot be read, so that the server starts as before."""
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
        return any("launch" in "".join(cell.get("source", "")) for cell in cells if cell.get("cell_type") == "code")
    except (OSError, ValueError, AttributeError, TypeError):
        return True


def _inside_forkserver() -> bool:
    """True while multiprocessing.forkserver.main is on this thread's stack: that is the
    server importing PRELOAD (which imports threeaxes), or a rank it forked."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is None:
        return False
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        if frame.f_code.co_filename == forkserver.__file__ and frame.f_code.co_name == "main":
            return True
        frame = frame.f_back
    return False


def on_import() -> None:
    """Called by ``threeaxes/__init__``: decide, and start if so. Never raises; waits at
    most HEAD_START_S, for the thread to have spawned the server (see there).

    The first :func:`threeaxes.launch.launch` in a process starts a multiprocessing
    forkserver that imports torch once (``PRELOAD``, 1.5-2 s) and then, while idle, what
    ranks often need besides (``DEFERRED``: torch._dynamo, ..., another 1-2 s; see
    ``threeaxes.launch.forkserver_idle``); every rank then forks from it already warm. Started
    at import time, by a daemon thread, that work overlaps with the student reading and
    running the next cells, so the first launch finds the server ready. ``import
    threeaxes`` waits for the thread to have spawned the server (``HEAD_START_S``), not
    for the server's imports.

    When it happens (``THREEAXES_PRESTART``):

    * unset or ``auto``: only in a Jupyter kernel (IPython's shell has a ``kernel``).
      Kernels are where launches are interactive; the test suite, scripts and grading
      helpers import threeaxes in many processes that never launch, and a server each
      would cost them CPU for nothing. Nor in a kernel whose notebook never names launch
      in a code cell (drops 10, 11, 13 and 14, the calculators): the notebook jupyter-server
      names, else the notebooks in the kernel's working folder, all of them silent on it.
      A launch there all the same starts the server itself, as ``0`` would.
    * ``1``: in any process (a script, a benchmark).
    * ``0``: never; the first launch starts the server itself.

    Never on a platform without the forkserver start method (Windows), never inside the
    forkserver or a rank (the forkserver imports threeaxes: a prestart there would start
    servers without end), and never under torchrun (launch spawns nothing there).

    Safety: this module imports nothing heavy (no torch: importing torch on a second
    thread while the main thread imports too could hand either a half-built module).
    The thread only calls ``multiprocessing.forkserver.ensure_running()``, which holds the
    forkserver's own lock; a launch that arrives meanwhile waits on that lock and then
    uses the same server, which accepts it once it has imported PRELOAD.
    """
    global decision
    try:
        reason = skip_reason()
        decision = reason or "started"
        if reason is None:
            start().join(HEAD_START_S)
    except Exception as exc:  # noqa: BLE001 -- importing threeaxes must not fail because of this
        decision = f"failed to decide: {exc!r}"


def start() -> threading.Thread:
    """Start the forkserver on a daemon thread (once per process); returns that thread."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_ensure_running, name="threeaxes-prestart", daemon=True)
            _thread.start()
        return _thread


def _ensure_running() -> None:
    global error
    try:
        import multiprocessing.forkserver

        forkserver_context()  # the preload list first: the server imports it when it starts
        multiprocessing.forkserver.ensure_running()
    except Exception as exc:  # noqa: BLE001 -- the first launch starts the server and reports
        error = exc


def warm_marker(address: object) -> str | None:
    """The file the forkserver at ``address`` creates once DEFERRED is imported, or None
    where its socket is not a file (an abstract socket): then nobody waits for it."""
    if isinstance(address, str) and address and not address.startswith("\0"):
        return address + ".warm"
    return None


def wait_until_warm(timeout: float = WARM_WAIT_S) -> bool:
    """Start the forkserver if need be, then wait until it has imported DEFERRED too.
    Returns True if it is warm. Waits at most ``timeout`` s, and for a server that once
    let that pass without saying so (its loop may not be the one forkserver_idle
    knows), never again: it is used as it is. Without a forkserver there is nothing to wait for."""
    global _silent_server
    import multiprocessing.forkserver

    if forkserver_context().get_start_method() != "forkserver":
        return False
    multiprocessing.forkserver.ensure_running()  # as the first Process.start() would
    server: Any = multiprocessing.forkserver._forkserver   # its _forkserver_* are private: typeshed has none
    marker = warm_marker(server._forkserver_address)
    if marker is None or server._forkserver_pid == _silent_server:
        return False
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            if timeout > 0:
                _silent_server = server._forkserver_pid
            return False
        time.sleep(_WARM_POLL_S)  # short: Ctrl-C in a notebook stops the wait at once
    return True


def wait(timeout: float | None = None) -> bool:
    """Block until the background start has handed the server its work (tests, benchmarks).
    The server itself may still be importing PRELOAD then; launch waits for that."""
    if _thread is not None:
        _thread.join(timeout)
    return _thread is not None and not _thread.is_alive()
