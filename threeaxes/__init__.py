"""Three Axes: data, tensor and pipeline parallelism on one toy transformer.

Modules: launch (N ranks from a notebook cell), toy (the model and its data),
dims (the (dp, tp, pp) layout), comms (every collective, traced),
data_parallel, tensor_parallel, pipeline/, cost/ (pure cost-model functions),
widgets and plots (calculators), grading (what the nbgrader checks use).
"""
__version__ = "0.1.0"
