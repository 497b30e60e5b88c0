"""Naive against overlapped data parallelism on 4 ranks: the median step time of
each (the slowest rank's time per step) and their ratio, for a few bucket sizes.

Naive: backward, then `average_gradients_bucketed`. Overlapped: `DataParallel`,
whose buckets start their all-reduce from gradient hooks during backward. Both
use the same bucket plan, so they send the same bytes in the same messages.

    .venv/bin/python benchmarks/data_parallel_overlap.py [--steps 20] [--ranks 4]

On a CPU with few cores the ratio hovers around 1 and can exceed it: gloo's
all-reduce is CPU work that competes with backward for the same cores.
"""
import argparse

import torch

from threeaxes.data_parallel.compare import naive_vs_overlapped, step_seconds
from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, make_batch

BUCKETS = [4 * 1024, 64 * 1024, 25 * 2**20]  # small, the notebook's, DDP's default (one bucket here)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--ranks", type=int, default=4, help="data-parallel ranks")
    args = parser.parse_args()
    cfg = ToyConfig(dtype=torch.float64)
    batch = make_batch(cfg, 2 * args.ranks, seed=0)
    launch(naive_vs_overlapped, args.ranks, cfg, batch, BUCKETS[0], steps=1, warmup=0)  # warm the forkserver
    print(f"toy model {cfg}, dp={args.ranks}, median of {args.steps} steps (slowest rank per step)")
    print(f"{'bucket bytes':>12} {'buckets':>7} {'naive ms':>9} {'overlapped ms':>14} {'overlapped/naive':>17}")
    for bucket_bytes in BUCKETS:
        results = launch(naive_vs_overlapped, args.ranks, cfg, batch, bucket_bytes,
                         steps=args.steps, warmup=3, timeout=300)
        naive, overlapped = step_seconds(results, "naive"), step_seconds(results, "overlapped")
        buckets = results[0]["overlapped"]["trace"].count("all_reduce", "dp")
        print(f"{bucket_bytes:>12,} {buckets:>7} {naive * 1e3:>9.1f} {overlapped * 1e3:>14.1f} "
              f"{overlapped / naive:>17.2f}")


if __name__ == "__main__":
    main()
