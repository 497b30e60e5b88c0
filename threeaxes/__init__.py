"""Three Axes: data, tensor and pipeline parallelism on one toy transformer.

Modules: launch (N ranks from a notebook cell), toy (the model and its data),
dims (the (dp, tp, pp) layout), comms (every collective, traced),
data_parallel, tensor_parallel, pipeline/, cost/ (pure cost-model functions),
widgets and plots (calculators), grading (what the nbgrader checks use).
"""
__version__ = "0.1.0"

# Start launch's forkserver (which imports torch once for every rank) on a background
# thread now, in a Jupyter kernel, so the first launch finds it ready. Never blocks,
# never raises; THREEAXES_PRESTART=0 turns it off, =1 turns it on outside kernels.
from threeaxes import _prestart  # noqa: E402  (imports nothing heavy)

_prestart.on_import()
