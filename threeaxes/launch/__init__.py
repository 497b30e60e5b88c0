"""Everything that starts ranks: ``launch(fn, n, ...)`` runs fn on n ranks from a notebook cell
(``from threeaxes.launch import launch, RankError, LaunchTimeout``). Its modules: CONTRIBUTING.md's
map; imports go launcher -> local -> worker, prestart; launcher -> payload_modules; forkserver_idle
-> prestart, and nothing else of ``threeaxes``. The public names are imported on first use: ``import
threeaxes`` imports this package (through prestart), so it must stay light (no torch)."""

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
