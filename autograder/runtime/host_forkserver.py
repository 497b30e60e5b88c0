"""The forkservers of a kernel host and of its kernels, each a fork of a process that has
imported torch and the ranks' modules already, instead of multiprocessing's fresh interpreter
that imports them again (CONTRIBUTING.md, "How a submission's cells run").

    warm_for_forks()                  # the host, before its first fork: what a warm server holds
    forkservers_forked_from_here()    # the host, before its opening cells: their launches' server
    fork_a_forkserver(keep=(0, 1, 2)) # a kernel, before the student's first cell: its own server
    forget_the_hosts_helpers()        # a kernel, just forked: the host's server is not its own"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from typing import Any


def forget_the_hosts_helpers() -> None:
    """The forkserver and resource tracker the opening cells started belong to the host's
    world; this kernel starts its own (multiprocessing's own way from here on: a server the
    student's code started is a fresh interpreter, not a fork of their kernel)."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        server = forkserver._forkserver
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
        server._inherited_fds, server._lock = None, threading.Lock()
        vars(server).pop("ensure_running", None)   # forkservers_forked_from_here's
        vars(forkserver)["ensure_running"] = server.ensure_running   # the module's name for it, restored
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        tracker._resource_tracker._fd = tracker._resource_tracker._pid = None
        tracker._resource_tracker._lock = threading.RLock()


def forkservers_forked_from_here() -> None:
    """In the host, before its first cell: where the opening cells' first launch would have
    multiprocessing start a fresh interpreter that imports torch and the ranks' modules again
    (seconds of CPU in each opening that launches ranks), the server is forked from the host
    instead (`fork_a_forkserver`), which the zygote gave those modules. Only the instructor's
    opening cells run here; each kernel forked later forgets it (`forget_the_hosts_helpers`)."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    start = server.ensure_running

    def ensure_running() -> None:
        fork_a_forkserver(keep=(0, 1, 2))   # none if one runs: then as multiprocessing's own
        start()

    # both names: Process.start() calls the server's, prestart's thread the module's
    server.ensure_running = forkserver.ensure_running = ensure_running


def fork_a_forkserver(keep: Iterable[int]) -> None:
    """Start this kernel's forkserver as a fork of the kernel itself, before any of the
    student's code runs, instead of multiprocessing's fresh interpreter that imports torch
    and the ranks' modules again (seconds, on every submission's first launch). It is
    multiprocessing's own server loop (`forkserver.main`) in the kernel's world, with the
    host's modules already imported (`warm_for_forks`); `keep`: the descriptors it keeps
    besides its socket and pipe (stdin, stdout, stderr), as a spawned server would. Nothing
    where this process has a server already."""
    import socket
    from multiprocessing import connection, forkserver

    server: Any = forkserver._forkserver   # Any: typeshed declares none of its private fields, used here
    preload = list(server._preload_modules)
    with server._lock:
        if server._forkserver_pid is not None:
            return
        listener = socket.socket(socket.AF_UNIX)
        # multiprocessing's own (undocumented, so not in typeshed): a fresh name in this kernel's own /tmp
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _blank_descriptors_but({*keep, listener.fileno(), alive_r})
                # the server's own modules run their import-time set-up in it, as in a spawned one
                for name in [n for n in preload if n.startswith("threeaxes.launch.forkserver_")]:
                    sys.modules.pop(name, None)
                forkserver.main(listener.fileno(), alive_r, preload)
            finally:
                os._exit(0)
        os.close(alive_r)
        listener.close()
        server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid


def _blank_descriptors_but(kept: set[int]) -> None:
    """Every open descriptor but `kept` made /dev/null: the kernel's pipes to the host and its
    files are not the server's. Not closed: a Python object the fork copied may close its
    number later, which must not be a descriptor the server has opened since."""
    null = os.open(os.devnull, os.O_RDWR)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in kept and fd != null:
            try:
                os.dup2(null, fd, inheritable=False)
            except OSError:   # the listing's own descriptor, closed by now
                continue
    os.close(null)


def warm_for_forks() -> bool:
    """In the host, before its first fork, where its opening imported threeaxes' launch (the
    drop may launch ranks): the forkserver's settings and what a warm one imports while idle
    (threeaxes' DEFERRED), once, so that every kernel's server forked from it has them.
    Returns whether it did (each kernel then forks its server, `fork_a_forkserver`)."""
    if "threeaxes.launch.launcher" not in sys.modules:
        return False
    import importlib

    from threeaxes.launch import prestart

    if prestart.forkserver_context().get_start_method() != "forkserver":
        return False
    for name in prestart.DEFERRED:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - as the forkserver's own: a module that fails is left to the ranks
            continue
    return True
