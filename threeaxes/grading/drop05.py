"""Reference checks for drop 5 (one step under pure data parallelism, traced).

Three exercises:

* `all_reduce_sizes(param_bytes, bucket_bytes)`: the bytes of each all-reduce
  of one step, in the order they start. `expected_all_reduce_bytes` builds the
  plan with `plan_buckets` on the parameters in the reverse of registration
  order; `bucket_mistake` names the usual mistakes.
* `first_reduced`: the layer whose gradients are all-reduced first
  (`first_bucket_layer` reads it off the bucket plan).
* `launch_bucket(grads, dims)`: start one bucket's reduction.
  `check_launch_bucket` runs it inside `DataParallel` on fresh ranks and
  compares every gradient with DistributedDataParallel's.

Only plain values come back from the ranks: {"ok": bool, "message": str, ...}.
"""
from __future__ import annotations

from threeaxes.grading import as_int

__all__ = ["plain_sizes", "expected_all_reduce_bytes", "bucket_mistake", "first_bucket_layer",
           "layer_of", "check_launch_bucket"]


def plain_sizes(answer, name="all_reduce_sizes(...)") -> list[int]:
    """The answer as a plain list of ints, or an AssertionError saying why not."""
    if type(answer) not in (list, tuple):
        raise AssertionError(f"{name} should be a plain list of ints (bytes per all-reduce), "
                             f"got {type(answer).__name__}")
    return [as_int(v, f"{name}[{i}]") for i, v in enumerate(answer)]


def _bucket_bytes(param_bytes, bucket_bytes, reverse=True):
    from threeaxes.data_parallel import plan_buckets

    sizes = list(param_bytes)[::-1] if reverse else list(param_bytes)
    return [sum(sizes[i] for i in bucket) for bucket in plan_buckets(sizes, bucket_bytes)]


def expected_all_reduce_bytes(param_bytes, bucket_bytes) -> list[int]:
    """Bytes of each all-reduce, in launch order: `plan_buckets` on the
    parameter sizes taken from the last parameter back to the first."""
    return _bucket_bytes(param_bytes, bucket_bytes)


def bucket_mistake(got, param_bytes, bucket_bytes) -> str | None:
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


def layer_of(param_name: str, layers) -> str:
    """The layer (one of `layers`, e.g. trace.layers_of(model)) a parameter belongs to."""
    return next(layer for layer in layers if param_name.startswith(layer + "."))


def first_bucket_layer(model) -> str:
    """The layer whose parameter opens the first bucket: the last trainable one registered."""
    from threeaxes.trace import layers_of

    last = [n for n, p in model.named_parameters() if p.requires_grad][-1]
    return layer_of(last, layers_of(model))


def check_launch_bucket(rank, world_size, launch_bucket, bucket_bytes) -> dict:
    """On fresh ranks: one backward through `DataParallel(..., launch_bucket=...)`;
    every gradient against DDP's, and each bucket launched asynchronously via comms."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from threeaxes import comms, trace
    from threeaxes.data_parallel import DataParallel, shard_batch
    from threeaxes.dims import ParallelDims
    from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

    dims = ParallelDims.init(dp=world_size)
    cfg = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=2, seq_len=8, dtype=torch.float64)
    inputs, targets = shard_batch(*make_batch(cfg, 2 * world_size, seed=5), dims)

    def watched(grads, dims):
        result = launch_bucket(grads, dims)
        pending = result[1] if type(result) is tuple and len(result) == 2 else None
        if pending is not None and not isinstance(pending, comms.Pending):
            raise AssertionError(
                f"launch_bucket returned a {type(pending).__name__} as pending, not the Pending "
                f"of comms.all_reduce(flat, 'dp', dims=dims, async_op=True): without async_op=True "
                f"the all-reduce finishes inside the hook and backward waits for the network")
        return result

    model = ToyTransformer(cfg, seed=0)
    wrapped = DataParallel(model, bucket_bytes, dims, launch_bucket=watched)
    try:
        with trace.record() as recorded:
            lm_loss(wrapped(inputs), targets).backward()
            wrapped.finish_gradient_synchronization()
    except Exception as err:  # the student's code raised: report it, in the student's terms
        return {"ok": False, "message": f"rank {rank}: {type(err).__name__}: {err}"}
    ours = {n: p.grad for n, p in model.named_parameters()}

    reference = ToyTransformer(cfg, seed=0)
    ddp = DDP(reference, process_group=dims.group("dp"))  # kept alive: its hooks run in backward
    lm_loss(ddp(inputs), targets).backward()
    theirs = {n: p.grad for n, p in reference.named_parameters()}
    local = ToyTransformer(cfg, seed=0)
    lm_loss(local(inputs), targets).backward()

    def close(a, b):
        return all(torch.allclose(a[n], b[n], rtol=1e-10, atol=1e-12) for n in b)

    launched = recorded.count("all_reduce", "dp")
    if launched != len(wrapped.bucket_names):
        return {"ok": False, "message": f"rank {rank}: {launched} all-reduces over dp went through "
                f"threeaxes.comms for {len(wrapped.bucket_names)} buckets; make exactly one "
                f"comms.all_reduce(flat, 'dp', dims=dims, async_op=True) per bucket"}
    if close(ours, {n: g * world_size for n, g in theirs.items()}):
        return {"ok": False, "message": f"rank {rank}: your gradients are {world_size}x DDP's: "
                f"the all-reduce sums, so divide the flat buffer by dp (dims.size('dp'))"}
    if close(ours, {n: p.grad for n, p in local.named_parameters()}):
        return {"ok": False, "message": f"rank {rank}: your gradients are this rank's own, not the "
                f"average: all-reduce the flat buffer you return"}
    worst = max((ours[n] - theirs[n]).abs().max().item() for n in theirs)
    if worst > 1e-12:
        return {"ok": False, "message": f"rank {rank}: gradients differ from DDP's by up to "
                f"{worst:.1e}", "max_abs_diff": worst}
    return {"ok": True, "message": f"rank {rank}: every gradient equals DDP's (largest difference "
            f"{worst:.1e})", "max_abs_diff": worst}
