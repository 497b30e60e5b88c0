"""Three Axes: data, tensor and pipeline parallelism on one toy transformer.

CONTRIBUTING.md has the map (one folder per axis, the shared modules) and which way imports go."""
__version__ = "0.1.0"

# Start launch's forkserver (which imports torch once for every rank) on a background
# thread now, in a Jupyter kernel, so the first launch finds it ready. Never blocks,
# never raises; THREEAXES_PRESTART=0 turns it off, =1 turns it on outside kernels.
from threeaxes.launch.prestart import on_import as _prestart_on_import

_prestart_on_import()
