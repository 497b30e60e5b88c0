"""Everything that starts ranks: ``launch(fn, n, ...)`` runs fn on n ranks from a notebook cell.

    from threeaxes.launch import launch, RankError, LaunchTimeout

    launcher.py        launch(): checks its arguments, picks the backend, runs fn under
                       torchrun or on local ranks (the phases are described there)
    local.py           LocalLaunch, the caller's side of local ranks: rendezvous, spawn,
                       wait loop, teardown; RankError, LaunchTimeout
    worker.py          the rank's side: join the group, run fn, send output and result back
    prestart.py        start the forkserver in the background when ``threeaxes`` is imported
                       in a Jupyter kernel (``THREEAXES_PRESTART``); what it preloads
    forkserver_idle.py inside the forkserver: import the rest of what ranks use while idle
    payload_modules.py does a launch need more than torch? (read from its pickle)

Imports go one way: launcher -> local -> worker, prestart; launcher -> payload_modules;
forkserver_idle -> prestart. None of them imports anything else of ``threeaxes``.

The public names are imported on first use, not here: ``import threeaxes`` imports
``threeaxes.launch.prestart`` (which imports nothing heavy), and so this package, and
must stay light where it starts nothing (no torch).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for mypy only: at run time they come from __getattr__ below, on first use
    from threeaxes.launch.launcher import MAX_WORLD_SIZE, LaunchTimeout, RankError, launch

__all__ = ["launch", "RankError", "LaunchTimeout", "MAX_WORLD_SIZE"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from threeaxes.launch import launcher

        value = getattr(launcher, name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
