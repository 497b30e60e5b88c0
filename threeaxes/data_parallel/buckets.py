"""Which gradients travel together: the bucket plan, used by every bucketed reduction.

`plan_buckets` groups tensors (by their sizes in bytes) into buckets of about
`bucket_bytes` each. `step.average_gradients_bucketed` all-reduces each bucket
after backward; `overlap.DataParallel` starts each one from backward's hooks;
ZeRO-1 and ZeRO-2 (`threeaxes.sharding`) shard each one. All of them group
with this one rule, so their plans are the same.
"""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_BUCKET_BYTES", "check_bucket_bytes", "plan_buckets"]

# DDP's default bucket_cap_mb is 25 MiB.
DEFAULT_BUCKET_BYTES = 25 * 2**20


def check_bucket_bytes(bucket_bytes: object) -> None:
    """A ValueError that says what to pass unless `bucket_bytes` is a positive int."""
    if type(bucket_bytes) is not int or bucket_bytes <= 0:
        raise ValueError(
            f"bucket_bytes={bucket_bytes!r}; it must be a positive whole number of bytes, "
            f"e.g. 25 * 2**20 (DDP's default of 25 MiB)")


def plan_buckets(sizes_bytes: Iterable[int], bucket_bytes: int) -> list[list[int]]:
    """Group tensors into buckets, in the order given: indices per bucket.

    Rule: walk the tensors in order and add each to the open bucket; if adding
    it would take the bucket past `bucket_bytes`, close the bucket first and
    start a new one. A tensor larger than `bucket_bytes` sits alone in its own
    bucket (tensors are never split). Pure function, so a plan can be checked
    without any ranks.
    """
    check_bucket_bytes(bucket_bytes)
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index, size in enumerate(sizes_bytes):
        if current and filled + size > bucket_bytes:
            buckets.append(current)
            current, filled = [], 0
        current.append(index)
        filled += size
    if current:
        buckets.append(current)
    return buckets
