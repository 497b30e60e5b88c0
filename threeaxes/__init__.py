"""Three Axes: data, tensor and pipeline parallelism on one toy transformer.

One folder per axis (data_parallel/, tensor_parallel/, pipeline/, sharding/),
launch/ (N ranks from a notebook cell), cost/ (pure cost-model functions),
grading/ (what the nbgrader checks use), scenarios/ (the sizing drops'
scenarios), widgets/ (calculators); small shared
modules: dims (the (dp, tp, pp) layout), toy (the model and its data), comms
(every collective, traced), trace; drawings in plots, notebook display in
display. CONTRIBUTING.md has the map and which way imports go.
"""
__version__ = "0.1.0"

# Start launch's forkserver (which imports torch once for every rank) on a background
# thread now, in a Jupyter kernel, so the first launch finds it ready. Never blocks,
# never raises; THREEAXES_PRESTART=0 turns it off, =1 turns it on outside kernels.
from threeaxes.launch.prestart import on_import as _prestart_on_import

_prestart_on_import()
