"""Drop 5 on the student's side: the runner of the launch_bucket exercise.

`launch_bucket_results` runs a student's `launch_bucket` inside `DataParallel`
on fresh ranks, for one backward of a small float64 toy, and sends back raw
values: no verdict is decided on a rank, since ranks started from a student's
notebook run there. The grader judges what comes back
(`autograder/references/drop05.py`); the visible check compares it with stored
cases (`threeaxes.grading.visible`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the hints only: torch is imported inside the functions, on the ranks
    import torch

    from threeaxes.toy import ToyConfig

__all__ = ["LAUNCH_BUCKET_CONFIG", "launch_bucket_setup", "launch_bucket_results"]

# The toy the launch_bucket check trains unless told otherwise (small: its gradients come back
# to the grader as numbers). dtype is always float64, so "equal" means equal to rounding.
LAUNCH_BUCKET_CONFIG = {"vocab_size": 16, "d_model": 8, "n_heads": 2, "n_layers": 2, "seq_len": 8}


def launch_bucket_setup(config: dict[str, Any] | None, per_rank: int, seed: int,
                        world_size: int) -> tuple[ToyConfig, tuple[torch.Tensor, torch.Tensor]]:
    """The model config and the global batch of the launch_bucket check."""
    import torch

    from threeaxes.toy import ToyConfig, make_batch

    cfg = ToyConfig(**{**LAUNCH_BUCKET_CONFIG, **(config or {})}, dtype=torch.float64)
    return cfg, make_batch(cfg, per_rank * world_size, seed=seed)


def launch_bucket_results(rank: int, world_size: int, launch_bucket: Callable[..., Any], bucket_bytes: int,
                          config: dict[str, Any] | None = None, per_rank: int = 2, seed: int = 5) -> dict[str, Any]:
    """On fresh ranks: one backward through `DataParallel(..., launch_bucket=...)`; the raw results.

    Returns plain values only, for the grader to compare with a reference it
    computes itself: {"error": None or what the student's code raised,
    "pending": the type name of each `pending` launch_bucket returned, "all_reduces":
    how many all-reduces over dp went through threeaxes.comms, "grads": {parameter
    name: its gradient after finish_gradient_synchronization(), flattened to floats}}.
    """
    from threeaxes import comms, trace
    from threeaxes.data_parallel import DataParallel, shard_batch
    from threeaxes.dims import ParallelDims
    from threeaxes.toy import ToyTransformer, lm_loss

    dims = ParallelDims.init(dp=world_size)
    cfg, batch = launch_bucket_setup(config, per_rank, seed, world_size)
    inputs, targets = shard_batch(*batch, dims)
    pending_types: list[str] = []

    def watched(grads: list[torch.Tensor], dims: ParallelDims) -> Any:
        result = launch_bucket(grads, dims)
        pending = result[1] if type(result) is tuple and len(result) == 2 else None
        pending_types.append(type(pending).__name__)
        if pending is not None and not isinstance(pending, comms.Pending):
            raise AssertionError(
                f"launch_bucket returned a {type(pending).__name__} as pending, not the Pending "
                f"of comms.all_reduce(flat, 'dp', dims=dims, async_op=True): without async_op=True "
                f"the all-reduce finishes inside the hook and backward waits for the network")
        return result

    model = ToyTransformer(cfg, seed=0)
    wrapped = DataParallel(model, bucket_bytes, dims, launch_bucket=watched)
    out: dict[str, Any] = {"error": None, "pending": pending_types, "all_reduces": 0, "grads": {}}
    try:
        with trace.record() as recorded:
            lm_loss(wrapped(inputs), targets).backward()
            wrapped.finish_gradient_synchronization()
    except Exception as err:  # noqa: BLE001 - the student's code raised: report it, in the student's terms
        out["error"] = f"rank {rank}: {type(err).__name__}: {err}"
        return out
    out["all_reduces"] = recorded.count("all_reduce", "dp")
    out["grads"] = {n: None if p.grad is None else p.grad.reshape(-1).tolist()
                    for n, p in model.named_parameters()}
    return out
