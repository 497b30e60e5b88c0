"""How long a warm 4-rank launch takes, against torch.multiprocessing.spawn.

    python benchmarks/launch.py [--runs 10] [--spawn-runs 3] [--ranks 4]

Both sides do the same work: join a gloo group through a TCPStore, one all_reduce,
leave the group. Prints both medians and the ratio; exits 1 if a warm launch takes
more than 0.5 s (median) or is less than 10x faster than spawn.
"""

import argparse
import datetime
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing  # noqa: E402

from threeaxes.launch import launch  # noqa: E402

MAX_LAUNCH_S = 0.5
MIN_SPEEDUP = 10.0


def all_reduce_rank(rank, world_size):
    """The work measured with launch: the group is already up when this runs."""
    t = torch.ones(1)
    dist.all_reduce(t)  # communication: sum of ones over all ranks
    return t.item()


def spawn_rank(rank, world_size, port):
    """The same work under torch.multiprocessing.spawn, which leaves setup to us."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    t = torch.ones(1)
    dist.all_reduce(t)  # communication: sum of ones over all ranks
    assert t.item() == world_size
    dist.destroy_process_group()


def time_launch(ranks):
    start = time.perf_counter()
    results = launch(all_reduce_rank, ranks)
    elapsed = time.perf_counter() - start
    assert results == [float(ranks)] * ranks, results
    return elapsed


def time_spawn(ranks):
    start = time.perf_counter()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # port 0: the OS picks
    torch.multiprocessing.spawn(spawn_rank, args=(ranks, store.port), nprocs=ranks, join=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="timed warm launches")
    parser.add_argument("--spawn-runs", type=int, default=3, help="timed torch.multiprocessing.spawn runs")
    parser.add_argument("--ranks", type=int, default=4)
    opts = parser.parse_args()

    time_launch(opts.ranks)  # warm-up: starts the forkserver, which imports torch once
    launch_s = [time_launch(opts.ranks) for _ in range(opts.runs)]
    spawn_s = [time_spawn(opts.ranks) for _ in range(opts.spawn_runs)]

    launch_median, spawn_median = statistics.median(launch_s), statistics.median(spawn_s)
    speedup = spawn_median / launch_median
    print(f"{opts.ranks} ranks, one all_reduce, {os.cpu_count()} CPU cores")
    print(f"launch (warm), median of {opts.runs}: {launch_median:.3f} s  (min {min(launch_s):.3f}, max {max(launch_s):.3f})")
    print(f"torch.multiprocessing.spawn, median of {opts.spawn_runs}: {spawn_median:.3f} s")
    print(f"speedup: {speedup:.1f}x")

    failures = []
    if launch_median > MAX_LAUNCH_S:
        failures.append(f"launch median {launch_median:.3f} s > {MAX_LAUNCH_S} s")
    if speedup < MIN_SPEEDUP:
        failures.append(f"speedup {speedup:.1f}x < {MIN_SPEEDUP:g}x")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
