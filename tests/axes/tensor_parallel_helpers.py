"""Shared by the tensor-parallel tests: the toy model as every drop uses it, in float64, its
batches, the SGD step the ranks take, and a launch that sends the rank function by value.

Pickled by value itself: the ranks never import it."""
from __future__ import annotations

import sys

import cloudpickle
import torch

from threeaxes.toy import ToyConfig, make_batch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# The toy model as every drop uses it (4 heads, 4 layers, width 32), in float64.
CFG = ToyConfig(dtype=torch.float64)
BATCH, STEPS, LR = 2, 2, 0.1
F64 = 8  # bytes per float64


def toy_batches(offset=0):
    return [make_batch(CFG, BATCH, seed=offset + step) for step in range(STEPS)]


def sgd_step(model, lr):
    """What torch.optim.SGD (no momentum) does to each parameter: p <- p - lr * grad.

    The ranks use this instead of torch.optim, whose first use in a fresh process
    imports torch._dynamo (seconds per rank); test_sgd_step_is_torch_sgd proves
    the two give identical bits."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


def launch_by_value(fn, world_size, *args):
    from threeaxes.launch import launch

    # Send the worker by value, so the ranks need not import its test module (and pytest).
    cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])
    return launch(fn, world_size, *args, timeout=120)
