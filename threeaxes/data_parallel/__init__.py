"""Data parallelism, the first axis: every rank holds the whole model and its own
slice of the batch; the ranks average their gradients.

    buckets.py   plan_buckets: which gradients travel together (DDP's rule), used by
                 every bucketed reduction here and by ZeRO-1/2 in threeaxes.sharding
    step.py      from scratch: shard_batch, average_gradients (one all-reduce per
                 tensor), average_gradients_bucketed, train_data_parallel (a launch target)
    overlap.py   DataParallel: each bucket's all-reduce started from backward's hooks
                 (BucketHooks, which ZeRO-2 shares), as DistributedDataParallel does
    compare.py   naive against overlapped, step by step on real ranks (VARIANTS)
    torch_options.py  DistributedDataParallel's keyword arguments: taken where they mean
                 what happens here, refused with what to use where not (ZeRO and FSDP too)

With no layout given and none made, every helper here runs over the default
process group as one dp axis, as DistributedDataParallel does
(`threeaxes.dims.dp_layout`).

Imports go one way: step and overlap each use buckets (and not each other);
overlap uses torch_options; compare uses step and overlap. Every name is
importable from here too: ``from threeaxes.data_parallel import shard_batch, DataParallel``.
"""
from threeaxes.data_parallel.buckets import DEFAULT_BUCKET_BYTES, plan_buckets
from threeaxes.data_parallel.compare import VARIANTS, naive_vs_overlapped, step_seconds
from threeaxes.data_parallel.overlap import BucketHooks, DataParallel
from threeaxes.data_parallel.step import (
    average_gradients,
    average_gradients_bucketed,
    gradient_buckets,
    shard_batch,
    train_data_parallel,
)

__all__ = [
    "DEFAULT_BUCKET_BYTES", "plan_buckets",
    "shard_batch", "average_gradients", "gradient_buckets", "average_gradients_bucketed",
    "train_data_parallel",
    "BucketHooks", "DataParallel",
    "VARIANTS", "naive_vs_overlapped", "step_seconds",
]
