"""The planner's prediction for every row of Narayanan et al. 2021, Table 1.

    python benchmarks/published_runs.py [--runs 3]

For each published run (GPT 1.7B to 1T on up to 3,072 A100 80GB GPUs) prints
the configuration the planner evaluates (the published dp, tp, pp with its
fastest micro-batch and chunk count), whether it fits, the predicted and
published teraFLOP/s per GPU (eq. 3 FLOPs) with their ratio, its throughput
as a share of the planner's best, and how long each search took. Then times
search() for Llama-2 70B on 64 GPUs with the shape model, the notebook case.
Held out (not used to fit kernel_time's constants), printed for comparison:
Narayanan et al. 2021 Table 2's PTD-P rows, and Korthikanti et al. 2022
Table 5's iteration times. Then MT-NLG 530B and GPT-NeoX-20B with their era's techniques:
each published layout's share of the best. Then the runs beyond three axes
(threeaxes.cost.published_4d): Llama 3 405B's Table 4 (tensor, context, pipeline and data
parallelism) and a Megatron Core mixture-of-experts run, each with its predicted/reported
ratio and share of its era's best, the documented exceptions marked as such, and held out,
the same ModelZoo table's Qwen3 rows without FSDP. Exits 1 if a
row is off by more than 10% (15% for the 4D runs), does not fit, falls below 85% of the best
(the 18.4B row: 80%, for the reason tests/cost/test_cost_published.py::test_the_18b_row_...
documents; the 4D exceptions as tests/cost/test_cost_published_4d.py documents), or the 70B
search takes more than 1 s.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from threeaxes.cost import SHAPES, get_cluster, get_model, search
from threeaxes.cost.published import (
    KORTHIKANTI_2022_TABLE5,
    NARAYANAN_2021_TABLE1,
    NARAYANAN_2021_TABLE2_PTDP,
    OTHER_RUNS,
    predict,
    predict_iteration,
    predict_other,
)
from threeaxes.cost.published_4d import PUBLISHED_4D, QWEN3_MODELZOO_HELD_OUT, predict_4d

# the 4D runs outside the 15% band or below 0.85 of the best, and their documented bands
# (tests/cost/test_cost_published_4d.py says why for each)
EXCEPTIONS_4D = {"Llama 3 405B, 16384 GPUs, 128K": ((1.15, 1.25), (0.85, 1.0))}

# the one row allowed below 0.85 of its best (tests/cost/test_cost_published.py says why)
FLOOR = {18.4: 0.80}

SEARCH_LIMIT_S = 1.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    failed = False
    print(f"{'model':>8} {'GPUs':>5} {'configuration (published dp tp pp)':<42} {'fits':>4} "
          f"{'pred':>6} {'publ':>5} {'ratio':>6} {'of best':>7} {'search s':>8}  best")
    for run in NARAYANAN_2021_TABLE1:
        start = time.perf_counter()
        p = predict(run)
        elapsed = time.perf_counter() - start
        ok = (p.published.fits and 0.9 <= p.ratio <= 1.1
              and p.share_of_best >= FLOOR.get(run.params_billion, 0.85))
        failed |= not ok
        print(f"{run.params_billion:>7}B {run.n_gpus:>5} {p.published.label:<42} "
              f"{'yes' if p.published.fits else 'NO':>4} {p.tflops_per_gpu:>6.1f} "
              f"{run.tflops_per_gpu:>5} {p.ratio:>6.3f} {p.share_of_best:>7.3f} "
              f"{elapsed:>8.3f}  {p.best.label}{'' if ok else '  <-- OUT OF BOUNDS'}")
    print("held out: Narayanan et al. 2021, Table 2 (PTD-P, micro-batch 1)")
    for run in NARAYANAN_2021_TABLE2_PTDP:
        p = predict(run)
        print(f"{run.params_billion:>7}B {run.n_gpus:>5} {p.published.label:<42} "
              f"{'yes' if p.published.fits else 'NO':>4} {p.tflops_per_gpu:>6.1f} "
              f"{run.tflops_per_gpu:>5} {p.ratio:>6.3f} {p.share_of_best:>7.3f}")
    print("held out: Korthikanti et al. 2022, Table 5 (seconds per iteration; "
          "full recomputation | sequence parallel + selective)")
    for run in KORTHIKANTI_2022_TABLE5:
        full, present = predict_iteration(run)
        print(f"{run.name:>8} {run.n_gpus:>5} full {full.time.total:6.2f} s vs "
              f"{run.full_recompute_s:6.2f} ({full.time.total / run.full_recompute_s:.3f}) | "
              f"sp+selective {present.time.total:6.2f} s vs {run.present_work_s:6.2f} "
              f"({present.time.total / run.present_work_s:.3f}) | speed-up "
              f"{full.time.total / present.time.total:.3f} vs "
              f"{run.full_recompute_s / run.present_work_s:.3f}")
    print("MT-NLG and GPT-NeoX-20B, their era's techniques (ZeRO-1 at most)")
    for run in OTHER_RUNS:
        p = predict_other(run)
        ok = p.published.fits and p.share_of_best >= 0.85
        failed |= not ok
        published = f"{run.tflops_per_gpu:>5}" if run.tflops_per_gpu else "  n/a"
        ratio = f"{p.ratio:>6.3f}" if run.tflops_per_gpu else "   n/a"
        print(f"{run.name:>14} {run.cluster.n_gpus:>5} {p.published.label:<42} "
              f"{'yes' if p.published.fits else 'NO':>4} {p.tflops_per_gpu:>6.1f} {published} "
              f"{ratio} {p.share_of_best:>7.3f}  {p.best.label}"
              f"{'' if ok else '  <-- OUT OF BOUNDS'}")
    print("beyond three axes: Llama 3 405B (Dubey et al. 2024, Table 4) and a Megatron Core "
          "MoE run, H100 80GB; predicted/reported teraFLOP/s per GPU, share of the era's best")
    for run in PUBLISHED_4D:
        start = time.perf_counter()
        p = predict_4d(run)
        elapsed = time.perf_counter() - start
        ratio_band, best_band = EXCEPTIONS_4D.get(run.name, ((0.85, 1.15), (0.85, 1.0)))
        ok = (p.published.fits and ratio_band[0] <= p.ratio <= ratio_band[1]
              and best_band[0] <= p.share_of_best <= 1.0)
        failed |= not ok
        note = "  (documented exception)" if run.name in EXCEPTIONS_4D else ""
        print(f"{run.name:>30} {p.published.label:<58} "
              f"{'yes' if p.published.fits else 'NO':>4} {p.tflops_per_gpu:>6.1f} "
              f"{run.tflops_per_gpu:>5.0f} {p.ratio:>6.3f} {p.share_of_best:>7.3f} "
              f"{elapsed:>6.1f}s  {p.best.label}{note}{'' if ok else '  <-- OUT OF BOUNDS'}")
    print("held out: the same Megatron-MoE-ModelZoo table's Qwen3 rows without FSDP "
          "(the cross-node EP row within 15%; the two EP 8 rows with one sequence per "
          "micro-batch run at less than half of what the planner predicts)")
    for run in QWEN3_MODELZOO_HELD_OUT:
        p = predict_4d(run)
        print(f"{run.name:>30} {p.published.label:<58} "
              f"{'yes' if p.published.fits else 'NO':>4} {p.tflops_per_gpu:>6.1f} "
              f"{run.tflops_per_gpu:>5.0f} {p.ratio:>6.3f}")
    model, cluster = get_model("llama2-70b"), get_cluster("a100-80gb", n_gpus=64)
    for name, kwargs in (("constant 0.6", {}),
                         ("shapes", dict(compute_efficiency=SHAPES, pp_scatter_gather=True))):
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            results = search(model, cluster, 1024, **kwargs)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        ok = median <= SEARCH_LIMIT_S
        failed |= not ok
        print(f"search {model.name} on 64 GPUs, batch 1024 ({name}): {len(results)} "
              f"configurations, median {median:.3f} s (limit {SEARCH_LIMIT_S:.0f} s) "
              f"{'ok' if ok else 'TOO SLOW'}; best: {results[0].label}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
