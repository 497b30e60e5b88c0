"""Measured pipeline bubble against the formula, p = 4, for GPipe, 1F1B and
interleaved 1F1B (v = 2) at m = 4 and m = 8: one launch of 4 ranks, one
measured step per (schedule, m), each stage's forward padded to 40 ms and its
backward to 80 ms (`threeaxes.pipeline.measure.DelayedStage`).

Columns: the measured step and the plan's (simulated with those durations),
the measured bubble (`measured_bubble`), the formula (p - 1)/(v m + p - 1),
their ratio, the busy shares' ratio (what `BUSY_SHARE_TOLERANCE` bounds) and
the machine's load average, since the lost time comes from other processes.

    .venv/bin/python benchmarks/pipeline_bubble.py
"""
import os
import time

from threeaxes.cost.bubble import bubble_fraction
from threeaxes.launch import launch
from threeaxes.pipeline import make_plan, simulate
from threeaxes.pipeline.measure import bubble_bounds, measure_pipeline, measured_bubble
from threeaxes.toy import ToyConfig
from threeaxes.trace import Trace

P, BATCH, LAYER_F, LAYER_B = 4, 8, 0.020, 0.040
RUNS = [(schedule, m, v) for m in (4, 8) for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2))]


def main():
    cfg = ToyConfig(n_layers=8, d_model=16, n_heads=2, seq_len=8, vocab_size=16)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    start = time.perf_counter()
    results = launch(measure_pipeline, P, cfg, RUNS, batch=BATCH, layer_forward_s=LAYER_F,
                     layer_backward_s=LAYER_B, timeout=120)
    print(f"one launch, {len(RUNS)} measured steps: {time.perf_counter() - start:.1f} s; "
          f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"{'schedule':>11} {'m':>2} {'step':>8} {'plan':>8} {'measured':>9} {'formula':>8} "
          f"{'ratio':>6} {'busy ratio':>11} {'in range':>9}")
    for schedule, m, v in RUNS:
        plan = make_plan(schedule, P, m, v)
        blocks = cfg.n_layers // plan.n_stages
        planned = simulate(plan, blocks * LAYER_F, blocks * LAYER_B).makespan
        b = measured_bubble(Trace.merge(r[(schedule, m, v)]["trace"] for r in results))
        formula = bubble_fraction(P, m, schedule=schedule, virtual_stages=v)
        low, high = bubble_bounds(formula)
        print(f"{schedule:>11} {m:>2} {(b.end - b.start) * 1e3:5.0f} ms {planned * 1e3:5.0f} ms "
              f"{b.mean:9.3f} {formula:8.3f} {b.mean / formula:6.2f} {(1 - b.mean) / (1 - formula):11.3f} "
              f"{'yes' if low <= b.mean <= high else 'NO':>9}")


if __name__ == "__main__":
    main()
