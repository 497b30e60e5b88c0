"""Does a launch need more than torch and torch.distributed? Read from its pickle."""

from __future__ import annotations

import pickletools
import sys

# The parts of torch a rank forked from the early server has, that a pickled function
# or tensor argument can name.
TORCH_LEAN = frozenset({
    "torch", "torch.distributed", "torch.distributed.distributed_c10d", "torch._C",
    "torch._C._distributed_c10d", "torch._utils", "torch._tensor", "torch.storage",
})


def modules_named(payload: bytes) -> set[str]:
    """Modules (already imported here) that the pickle ``payload`` names, with the
    submodules reached by attribute from them (``torch`` + ``optim`` -> ``torch.optim``).

    launch's forkserver serves ranks as soon as it has imported torch, torch.distributed
    and launch's rank side (``prestart.PRELOAD``); the rest (``prestart.DEFERRED``:
    sympy, torch._dynamo, ...) follows while it is idle. A rank forked before that rest
    is in, which then needs it (torch.optim's first step imports torch._dynamo), imports
    it itself: four ranks pay four times what the server would have paid once.

    So launch forks early only a function that is *light*: one whose pickle names no
    module but torch, torch.distributed and the standard library. Everything else (any
    ``threeaxes`` module, torch.optim, torch.nn, DTensor, ...) waits for the warm server.
    A wrong guess costs time, never correctness: a light function that needs more imports
    it in each rank, a heavy one waits for the warm server.

    The names come from the pickle's strings: module references (cloudpickle's
    ``subimport('torch')``, a class's module) and the names a by-value function's code
    uses, so ``torch.optim.SGD`` in a notebook function shows up as ``torch`` then ``optim``.
    """
    words: set[str] = set()
    for opcode, arg, _ in pickletools.genops(payload):
        if isinstance(arg, str):
            words.update(arg.split(" ") if opcode.name == "GLOBAL" else (arg,))
    named = {word for word in words if word in sys.modules}
    reached = named
    while reached:  # torch -> torch.nn -> torch.nn.functional ...
        reached = {f"{parent}.{word}" for parent in reached for word in words} & sys.modules.keys()
        reached -= named
        named |= reached
    return named


def is_light(payload: bytes) -> bool:
    """True if ranks for this payload need nothing the early forkserver lacks."""
    try:
        named = modules_named(payload)
    except Exception:  # noqa: BLE001 -- unreadable: assume it needs everything (wait for the warm server)
        return False
    return not any(_heavy(name) for name in named)


def _heavy(name: str) -> bool:
    top = name.partition(".")[0]
    if top == "torch":
        return name not in TORCH_LEAN
    return top in ("threeaxes", "sympy") or top not in sys.stdlib_module_names and top not in (
        "__main__", "cloudpickle", "numpy")
