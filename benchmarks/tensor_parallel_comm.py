"""Tensor parallelism's collectives against each block's compute, on 2 and 4 gloo ranks,
and the step time of TP + sequence parallelism against plain TP.

For each tp and each model size: one launch of `tensor_parallel.measure.tp_step`
per mode (TP, TP + SP), 1 warm-up step and STEPS timed ones. Per block (median
over blocks, timed steps and ranks): the forward and backward span split into
time inside the block's collectives and the rest (compute); per step (median
over timed steps of the slowest rank): wall time from the first layer's
forward to the optimizer's end.

On gloo (CPU) expect TP + SP to be slower than TP, not equal: it makes twice
as many collectives per block, each paying a fixed per-call latency, and gloo
has no reduce-scatter, so `comms.reduce_scatter` runs an all-reduce and keeps
a slice (the trace still records it, and counts its wire bytes, as the ring
reduce-scatter it stands for). The equal wire bytes show on NCCL.

    .venv/bin/python benchmarks/tensor_parallel_comm.py
"""
import statistics

import torch

from threeaxes.launch import launch
from threeaxes.tensor_parallel.measure import comms_by_layer, tp_step
from threeaxes.toy import ToyConfig, make_batch

STEPS = 5
SIZES = {
    "toy (b=2, s=16, h=32, float64)": (ToyConfig(dtype=torch.float64), 2),
    "wider (b=8, s=128, h=256, float32)": (ToyConfig(d_model=256, seq_len=128, n_heads=8), 8),
}


def _step_seconds(trace) -> float:
    return max(e.end for e in trace.events) - min(e.start for e in trace.events)


def measure(cfg, batch, tp, sequence_parallel):
    batches = [make_batch(cfg, batch, seed=s) for s in range(1 + STEPS)]
    results = launch(tp_step, tp, cfg, batches, sequence_parallel=sequence_parallel, timeout=300)
    blocks = [f"blocks.{i}" for i in range(cfg.n_layers)]
    per_pass = {(p, k): [] for p in ("forward", "backward") for k in ("compute_seconds", "comm_seconds")}
    steps = []
    for step in range(1, 1 + STEPS):  # step 0 warms up
        steps.append(max(_step_seconds(r["traces"][step]) for r in results))
        for rank, r in enumerate(results):
            for row in comms_by_layer(r["traces"][step], rank, blocks):
                for k in ("compute_seconds", "comm_seconds"):
                    per_pass[row["pass"], k].append(row[k])
    return {key: statistics.median(v) for key, v in per_pass.items()}, statistics.median(steps)


def main():
    for label, (cfg, batch) in SIZES.items():
        print(f"\n{label}, {cfg.n_layers} blocks; per block medians in ms")
        print(f"{'tp':>3} {'mode':<8} {'fwd compute':>12} {'fwd comm':>9} {'bwd compute':>12} {'bwd comm':>9} "
              f"{'comm/compute':>13} {'step ms':>8} {'SP/TP step':>11}")
        for tp in (2, 4):
            step_tp = None
            for sp in (False, True):
                blocks, step = measure(cfg, batch, tp, sp)
                compute = blocks["forward", "compute_seconds"] + blocks["backward", "compute_seconds"]
                comm = blocks["forward", "comm_seconds"] + blocks["backward", "comm_seconds"]
                step_tp = step if not sp else step_tp
                ratio = f"{step / step_tp:>11.2f}" if sp else f"{'':>11}"
                ms = {key: 1e3 * value for key, value in blocks.items()}
                print(f"{tp:>3} {'TP+SP' if sp else 'TP':<8} "
                      f"{ms['forward', 'compute_seconds']:>12.2f} {ms['forward', 'comm_seconds']:>9.2f} "
                      f"{ms['backward', 'compute_seconds']:>12.2f} {ms['backward', 'comm_seconds']:>9.2f} "
                      f"{comm / compute:>13.2f} {1e3 * step:>8.1f} {ratio}")


if __name__ == "__main__":
    main()
