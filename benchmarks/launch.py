"""How long the first (cold) and later (warm) 4-rank launches take, against
torch.multiprocessing.spawn.

    python benchmarks/launch.py [--runs 10] [--spawn-runs 3] [--cold-runs 3] [--pause 1.5] [--ranks 4]

Both sides do the same work: join a gloo group through a TCPStore, one all_reduce,
leave the group.

Cold: each run is a fresh Python that does what a notebook does: ``import threeaxes``
(which starts the forkserver in the background; forced here with THREEAXES_PRESTART=1,
as outside a Jupyter kernel it is off), then either at once or after --pause seconds
(the student running other cells) ``import torch``, ``from threeaxes.launch import
launch`` and the first launch. Each is also measured with THREEAXES_PRESTART=0, i.e.
as before the prestart. One more cold case runs a function that also takes an
optimizer step: torch.optim's first step imports torch._dynamo, which the forkserver
imports only after torch (``threeaxes.launch.forkserver_idle``), so that launch waits
for it (``threeaxes.launch.payload_modules``); the line shows what that costs.
Reported per run: the launch call itself, and everything from the end of
``import threeaxes`` to the launch's return, less the pause (that includes the
caller's own ``import torch``, which a notebook does anyway).

Prints the medians and the ratios; exits 1 if the first launch immediately after the
import takes more than 1 s (median), a warm launch more than 0.5 s (median), or a warm
launch is less than 10x faster than spawn.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

import torch
import torch.distributed as dist
import torch.multiprocessing

from threeaxes.launch import launch

MAX_LAUNCH_S = 0.5
MIN_SPEEDUP = 10.0
MAX_COLD_IMMEDIATE_S = 1.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One cold run, in a fresh interpreter: argv is the pause, the rank count, the repo root,
# and which function: "all_reduce" or "optimizer_step".
COLD_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import threeaxes
imported = time.perf_counter()
time.sleep(float(sys.argv[1]))  # the student reading, running other cells
resumed = time.perf_counter()
import torch, torch.distributed as dist
from threeaxes.launch import launch

def all_reduce(rank, world_size):
    t = torch.ones(1)
    dist.all_reduce(t)  # communication: sum of ones over all ranks
    return t.item()

def optimizer_step(rank, world_size):
    layer = torch.nn.Linear(4, 4)
    layer(torch.ones(2, 4)).sum().backward()
    grad = layer.weight.grad
    dist.all_reduce(grad)  # communication: sum of the weight's gradient over all ranks
    torch.optim.SGD(layer.parameters(), lr=0.1).step()  # torch.optim's first step imports torch._dynamo
    return float(world_size) if torch.equal(grad, torch.full_like(grad, 2.0 * world_size)) else -1.0

called = time.perf_counter()
result = launch({"all_reduce": all_reduce, "optimizer_step": optimizer_step}[sys.argv[4]], int(sys.argv[2]))
assert result == [float(sys.argv[2])] * int(sys.argv[2]), result
done = time.perf_counter()
print(json.dumps({"launch_s": done - called, "since_import_s": (done - imported) - (resumed - imported),
                  "decision": threeaxes.launch.prestart.decision}))
"""


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


def time_cold(ranks, pause, prestart, fn="all_reduce"):
    """The first launch in a fresh process (see the module docstring)."""
    env = dict(os.environ, THREEAXES_PRESTART="1" if prestart else "0")
    out = subprocess.run([sys.executable, "-c", COLD_CHILD, str(pause), str(ranks), ROOT, fn],
                         env=env, capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert (run["decision"] == "started") == prestart, run
    return run


def cold_line(label, runs):
    launch_s = statistics.median(r["launch_s"] for r in runs)
    since_s = statistics.median(r["since_import_s"] for r in runs)
    print(f"{label:<46} launch call {launch_s:.3f} s, from end of import {since_s:.3f} s "
          f"(median of {len(runs)})")
    return launch_s


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="timed warm launches")
    parser.add_argument("--spawn-runs", type=int, default=3, help="timed torch.multiprocessing.spawn runs")
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes per cold case")
    parser.add_argument("--pause", type=float, default=1.5, help="seconds between import and first launch")
    parser.add_argument("--ranks", type=int, default=4)
    opts = parser.parse_args()

    print(f"{opts.ranks} ranks, one all_reduce, {os.cpu_count()} CPU cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    # (label, pause, prestart, fn); the runs of all cases interleave, so a change in the
    # machine's load hits every case alike.
    cases = [("cold, prestart, immediately:", 0.0, True, "all_reduce"),
             (f"cold, prestart, after a {opts.pause:g} s pause:", opts.pause, True, "all_reduce"),
             ("cold, THREEAXES_PRESTART=0, immediately:", 0.0, False, "all_reduce"),
             (f"cold, THREEAXES_PRESTART=0, after {opts.pause:g} s:", opts.pause, False, "all_reduce"),
             ("cold, prestart, immediately, optimizer step:", 0.0, True, "optimizer_step")]
    cold = {case: [] for case in cases}
    for _ in range(opts.cold_runs):
        for case in cases:
            cold[case].append(time_cold(opts.ranks, *case[1:]))
    cold_s = {case[0]: cold_line(case[0], runs) for case, runs in cold.items()}
    cold_immediate_s = cold_s[cases[0][0]]

    time_launch(opts.ranks)  # warm-up: starts the forkserver, which imports torch once
    launch_s = [time_launch(opts.ranks) for _ in range(opts.runs)]
    spawn_s = [time_spawn(opts.ranks) for _ in range(opts.spawn_runs)]

    launch_median, spawn_median = statistics.median(launch_s), statistics.median(spawn_s)
    speedup = spawn_median / launch_median
    print(f"launch (warm), median of {opts.runs}: {launch_median:.3f} s  "
          f"(min {min(launch_s):.3f}, max {max(launch_s):.3f})")
    print(f"torch.multiprocessing.spawn, median of {opts.spawn_runs}: {spawn_median:.3f} s")
    print(f"speedup over spawn: warm {speedup:.1f}x, first launch (immediately) "
          f"{spawn_median / cold_immediate_s:.1f}x; first launch / warm launch: "
          f"{cold_immediate_s / launch_median:.1f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")

    failures = []
    if cold_immediate_s > MAX_COLD_IMMEDIATE_S:
        failures.append(f"first launch immediately after import {cold_immediate_s:.3f} s "
                        f"> {MAX_COLD_IMMEDIATE_S} s")
    if launch_median > MAX_LAUNCH_S:
        failures.append(f"launch median {launch_median:.3f} s > {MAX_LAUNCH_S} s")
    if speedup < MIN_SPEEDUP:
        failures.append(f"speedup {speedup:.1f}x < {MIN_SPEEDUP:g}x")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
