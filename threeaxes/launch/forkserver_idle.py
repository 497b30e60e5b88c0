"""Inside launch's forkserver: import the rest of what ranks use while no launch is waiting."""

from __future__ import annotations

import importlib
import os
import selectors
import time
from typing import Any

from threeaxes.launch import prestart

_ORIGINAL_SELECTOR = selectors.DefaultSelector
IDLE_AFTER_S = 0.1  # after a request: this long without another, and it imports the next module

# (module, seconds its import took, or the exception's repr), in the server only;
# inherited by every rank forked after, so a test can ask a rank what was imported.
imported: list[tuple[str, float | str]] = []
_server_pid = None  # set when installed, in the server


class _ImportWhileIdleSelector(_ORIGINAL_SELECTOR):
    """The forkserver's selector: idle time goes to the next deferred import."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # this one instance is the server's (patching the stdlib's class: mypy calls it a type)
        selectors.DefaultSelector = _ORIGINAL_SELECTOR  # type: ignore[misc]
        super().__init__(*args, **kwargs)
        # Only in the server itself: a process forked from it keeps a plain selector.
        self._in_server = os.getpid() == _server_pid
        self._todo = list(prestart.DEFERRED) if self._in_server else []
        self._quiet = 0.0  # how long to wait for a request before the next import

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # Right after a request, wait a moment for the next: the ranks of one launch ask
        # one after another, a few ms apart, and none should wait behind an import.
        quiet = self._quiet
        while self._todo and timeout is None:
            ready = super().select(quiet)  # a fork request, a child's exit, the caller gone?
            if ready:
                self._quiet = IDLE_AFTER_S
                return ready  # serve it first
            quiet = self._quiet = 0.0
            _import_one(self._todo.pop(0))
        if self._in_server and not self._todo:
            self._in_server = False  # say it once
            _mark_warm()
        return super().select(timeout)


def _import_one(name: str) -> None:
    start = time.perf_counter()
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 -- as the preload: a module that fails is left to the ranks
        imported.append((name, repr(exc)))
        return
    imported.append((name, time.perf_counter() - start))


def _mark_warm() -> None:
    """Tell the launching process that everything is imported: an empty file beside
    the server's socket (in the caller's temporary folder, removed when it exits)."""
    import multiprocessing.forkserver

    # a private attribute of the stdlib's forkserver, which typeshed does not list
    address = multiprocessing.forkserver._forkserver._forkserver_address  # type: ignore[attr-defined]
    marker = prestart.warm_marker(address)
    if marker is not None:
        try:
            open(marker, "w").close()
        except OSError:  # the caller is gone (its folder with it): nobody to tell
            pass


def install() -> None:
    """In the forkserver's preload: make its selector import DEFERRED while idle.

    The forkserver imports ``prestart.PRELOAD`` (torch, torch.distributed, the rank
    side of launch, then this module) before it forks its first rank. Everything else
    the ranks often need (``prestart.DEFERRED``: sympy, torch._dynamo, ... another
    1-2 s) is imported here afterwards, one module at a time, and only while no fork
    request is waiting, so a launch that comes early is served at once instead of
    waiting for all of it. A rank forked before a module is imported imports it itself
    if it needs it, exactly as it would without a forkserver.

    How: the server's loop (``multiprocessing.forkserver.main``) builds one
    ``selectors.DefaultSelector()`` after its preload and then blocks in its
    ``select()``. Importing this module during the preload swaps in a selector whose
    ``select()`` first looks whether a request is waiting (just after one, it gives
    the next ``IDLE_AFTER_S``); while none is, it imports the next deferred module.
    Everything runs on the server's one thread, between forks, so no rank is ever
    forked in the middle of an import. The swap is undone as soon as the server has
    built its selector, so nothing else (ranks included) ever gets it.
    When the last deferred module is imported, the server says so with a file beside
    its socket (``prestart.warm_marker``); launch waits for it unless fn is light.

    Imported anywhere else (a test, a rank), this module changes nothing.
    """
    import multiprocessing

    global _server_pid
    if prestart._inside_forkserver() and multiprocessing.parent_process() is None:
        _server_pid = os.getpid()
        selectors.DefaultSelector = _ImportWhileIdleSelector  # type: ignore[misc]  # the stdlib's, patched


install()
