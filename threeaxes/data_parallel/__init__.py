"""Data parallelism, the first axis: every rank holds the whole model and its own slice of the
batch; the ranks average their gradients. Its modules: CONTRIBUTING.md's map (step and overlap
each use buckets, compare uses both). Every name is importable from here too:
``from threeaxes.data_parallel import shard_batch, DataParallel``."""
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
