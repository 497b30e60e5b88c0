"""References for drop 5 (one step under pure data parallelism, traced).

Three exercises:

* `all_reduce_sizes(param_bytes, bucket_bytes)`: the bytes of each all-reduce
  of one step, in the order they start. `expected_all_reduce_bytes` builds the
  plan with `plan_buckets` on the parameters in the reverse of registration
  order; `bucket_mistake` names the usual mistakes.
* `first_reduced`: the layer whose gradient opens the first all-reduce
  (`first_bucket_layer` reads it off the bucket plan; `first_reduced_layer`
  for the notebook's toy).
* `launch_bucket(grads, dims)`: start one bucket's reduction.
  `launch_bucket_results` (`threeaxes.grading.drop05`, the student's side) runs
  it inside `DataParallel` on fresh ranks and sends back the raw gradients; `judge_launch_bucket` compares them, in the
  grader, with `reference_gradients` computed in one process (the mean of the
  ranks' gradients, which is what DistributedDataParallel leaves in `.grad`).
"""
from __future__ import annotations

import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any  # Any: what a rank or a student sent

from threeaxes.grading import as_int, same_as_reference
from threeaxes.grading.drop05 import LAUNCH_BUCKET_CONFIG, launch_bucket_results, launch_bucket_setup

if TYPE_CHECKING:
    from torch import nn

__all__ = ["plain_sizes", "expected_all_reduce_bytes", "bucket_mistake", "draw_bucket_cases",
           "first_bucket_layer", "first_reduced_layer", "layer_of", "LAUNCH_BUCKET_CONFIG",
           "launch_bucket_results", "reference_gradients", "judge_launch_bucket"]


def plain_sizes(answer: Any, name: str = "all_reduce_sizes(...)") -> list[int]:
    """The answer as a plain list of ints, or an AssertionError saying why not."""
    if type(answer) not in (list, tuple):
        raise AssertionError(f"{name} should be a plain list of ints (bytes per all-reduce), "
                             f"got {type(answer).__name__}")
    return [as_int(v, f"{name}[{i}]") for i, v in enumerate(answer)]


def _bucket_bytes(param_bytes: Iterable[int], bucket_bytes: int, reverse: bool = True) -> list[int]:
    from threeaxes.data_parallel import plan_buckets

    sizes = list(param_bytes)[::-1] if reverse else list(param_bytes)
    return [sum(sizes[i] for i in bucket) for bucket in plan_buckets(sizes, bucket_bytes)]


def expected_all_reduce_bytes(param_bytes: Iterable[int], bucket_bytes: int) -> list[int]:
    """Bytes of each all-reduce, in launch order: `plan_buckets` on the
    parameter sizes taken from the last parameter back to the first."""
    return _bucket_bytes(param_bytes, bucket_bytes)


def bucket_mistake(got: Any, param_bytes: list[int], bucket_bytes: int) -> str | None:
    """None when `got` is right; otherwise a message naming the mistake."""
    want = expected_all_reduce_bytes(param_bytes, bucket_bytes)
    if got == want:
        return None
    where = f"with {bucket_bytes:,}-byte buckets"
    forward = _bucket_bytes(param_bytes, bucket_bytes, reverse=False)
    if got in (forward, forward[::-1]):
        return (f"{where}: you filled the buckets in registration (forward) order; backward "
                f"produces the last layer's gradients first, so walk the parameters from the "
                f"last one back to the first")
    if sum(got) != sum(param_bytes):
        return (f"{where}: your all-reduces carry {sum(got):,} bytes in all, but the gradients "
                f"are {sum(param_bytes):,} bytes: each one is sent exactly once per step")
    if len(got) != len(want):
        return (f"{where}: you made {len(got)} all-reduces, the plan makes {len(want)}; a bucket "
                f"closes only when the next tensor would take it past bucket_bytes")
    return f"{where}: the sizes or their order differ from the bucket plan"


def draw_bucket_cases(rng: random.Random) -> list[tuple[list[int], int]]:
    """(param_bytes, bucket_bytes) pairs for the hidden test, drawn with `rng`: the
    parameters of a toy of random shape and a list of random sizes, each with caps
    that put every tensor alone, fill a bucket exactly, or hold everything at once."""
    import torch

    from threeaxes.toy import ToyConfig, ToyTransformer

    cfg = ToyConfig(vocab_size=rng.randint(8, 64), d_model=2 * rng.randint(2, 16), n_heads=2,
                    n_layers=rng.randint(1, 4), seq_len=rng.randint(2, 16),
                    dtype=rng.choice([torch.float32, torch.float64]))
    toy = [p.numel() * p.element_size() for p in ToyTransformer(cfg, seed=0).parameters()]
    loose = [rng.randint(1, 5000) for _ in range(rng.randint(1, 12))]
    cases = []
    for sizes in (toy, loose):
        exact = sum(sizes[::-1][:rng.randint(1, len(sizes))])   # the first bucket filled to the byte
        caps = {1, rng.randint(1, max(sizes)), exact, rng.randint(max(sizes), sum(sizes)), sum(sizes), 10**9}
        cases += [(list(sizes), cap) for cap in sorted(caps)]
    return cases


def layer_of(param_name: str, layers: Iterable[str]) -> str:
    """The layer (one of `layers`, e.g. trace.layers_of(model)) a parameter belongs to."""
    return next(layer for layer in layers if param_name.startswith(layer + "."))


def first_bucket_layer(model: nn.Module) -> str:
    """The layer whose parameter opens the first bucket: the last trainable one registered."""
    from threeaxes.trace import layers_of

    last = [n for n, p in model.named_parameters() if p.requires_grad][-1]
    return layer_of(last, layers_of(model))


def first_reduced_layer() -> str:
    """Exercise 2's answer: the layer that opens the first bucket of the notebook's toy."""
    from threeaxes.toy import ToyConfig, ToyTransformer

    return first_bucket_layer(ToyTransformer(ToyConfig()))


# -- exercise 3: the hook that sends a bucket ------------------------------------------------

def reference_gradients(world_size: int, config: dict | None = None, per_rank: int = 2,
                        seed: int = 5) -> tuple[dict, list[dict]]:
    """In one process: the dp-averaged gradients every rank should end with (the
    gradient of the whole batch's mean loss, since the slices are equal), and each
    rank's own gradient before averaging. Both {name: float64 tensor}."""
    from threeaxes.toy import ToyTransformer, lm_loss

    cfg, (inputs, targets) = launch_bucket_setup(config, per_rank, seed, world_size)

    def grads(rows: slice) -> dict:
        model = ToyTransformer(cfg, seed=0)
        lm_loss(model(inputs[rows]), targets[rows]).backward()
        return {n: p.grad for n, p in model.named_parameters()}

    mean = grads(slice(None))
    own = [grads(slice(r * per_rank, (r + 1) * per_rank)) for r in range(world_size)]
    return mean, own


def judge_launch_bucket(results: Any, world_size: int, bucket_bytes: int, config: dict | None = None,
                        per_rank: int = 2, seed: int = 5) -> str:
    """The line to print when every rank's results from `launch_bucket_results`
    match the one-process reference; otherwise an AssertionError naming the mistake."""

    from threeaxes.data_parallel import plan_buckets

    fields = ", ".join(f"{k}={v}" for k, v in {**LAUNCH_BUCKET_CONFIG, **(config or {})}.items())
    where = (f"(dp={world_size}, bucket_bytes={bucket_bytes}, ToyConfig({fields}, dtype=torch.float64), "
             f"a batch of {per_rank * world_size} sequences from seed {seed})")
    mean, own = reference_gradients(world_size, config, per_rank, seed)
    sizes = [g.numel() * g.element_size() for g in mean.values()][::-1]   # the order backward ends them
    buckets = len(plan_buckets(sizes, bucket_bytes))
    if type(results) is not list or len(results) != world_size:
        raise AssertionError(f"expected one result per rank {where}")

    def close(got: dict, want: dict) -> bool:
        return all(same_as_reference(got[n], want[n]) for n in want)

    worst = 0.0
    for rank, r in enumerate(results):
        if type(r) is not dict:
            raise AssertionError(f"rank {rank} returned {type(r).__name__} {where}")
        if r.get("error"):
            raise AssertionError(f"{r['error']} {where}")
        if as_int(r.get("all_reduces"), "all-reduces") != buckets:
            raise AssertionError(
                f"rank {rank}: {r.get('all_reduces')} all-reduces over dp went through threeaxes.comms "
                f"for {buckets} buckets; make exactly one comms.all_reduce(flat, 'dp', dims=dims, "
                f"async_op=True) per bucket {where}")
        if r.get("pending") != ["Pending"] * buckets:
            raise AssertionError(f"rank {rank}: launch_bucket should return what comms.all_reduce(..., "
                                 f"async_op=True) returns as pending, once per bucket {where}")
        ours = _gradients(r.get("grads"), mean, rank, where)
        if not close(ours, mean):
            if close(ours, {n: g * world_size for n, g in mean.items()}):
                raise AssertionError(f"rank {rank}: your gradients are {world_size}x the average: the "
                                     f"all-reduce sums, so divide the flat buffer by dp "
                                     f"(dims.size('dp')) {where}")
            if close(ours, own[rank]):
                raise AssertionError(f"rank {rank}: your gradients are this rank's own, not the average: "
                                     f"all-reduce the flat buffer you return {where}")
            diff = max((ours[n] - mean[n]).abs().max().item() for n in mean)
            raise AssertionError(f"rank {rank}: gradients differ from the average over the ranks by up to "
                                 f"{diff:.1e} {where}")
        worst = max([worst] + [(ours[n] - mean[n]).abs().max().item() for n in mean])
    return (f"on {world_size} ranks every gradient equals the whole batch's gradient from one process, "
            f"which is what DDP gives (largest difference {worst:.1e})")


def _gradients(grads: Any, reference: dict, rank: int, where: str) -> dict:
    """A rank's returned gradients as float64 tensors shaped like the reference's."""
    import torch

    if type(grads) is not dict or set(grads) != set(reference):
        raise AssertionError(f"rank {rank}: the model's gradients did not come back {where}")
    out = {}
    for name, want in reference.items():
        values = grads[name]
        if values is None:
            raise AssertionError(f"rank {rank}: {name} has no gradient after "
                                 f"finish_gradient_synchronization() {where}")
        if (type(values) is not list or len(values) != want.numel()
                or any(type(v) is not float for v in values)):
            raise AssertionError(f"rank {rank}: the gradient of {name} came back malformed {where}")
        out[name] = torch.tensor(values, dtype=torch.float64).reshape(want.shape)
    return out
