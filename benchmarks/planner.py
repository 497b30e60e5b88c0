"""How long search() takes over every configuration of a 70B model.

    python benchmarks/planner.py [--runs 3] [--global-batch 1024]

Searches Llama-2 70B (seq_len 4096) on 64 and on 1,024 A100 80GB GPUs and
prints the best (median) time of each, with how many configurations were
evaluated and the best one found. Then the same 64-GPU search at 32K tokens
with context parallelism (cp in 1, 2, 4, 8, ring and all-gather), and Mixtral
8x7B (Jiang et al. 2024) on 64 H100s with expert parallelism (ep in 1, 2, 4,
8), timed once each. Exits 1 if the 64-GPU search takes more than 1 s or the
1,024-GPU search more than 5 s (the cp and ep searches are printed, not bounded).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from threeaxes.cost import MoE, custom_model, get_cluster, get_model, search

LIMITS_S = {64: 1.0, 1024: 5.0}


def time_search(model, cluster, global_batch):
    start = time.perf_counter()
    results = search(model, cluster, global_batch)
    return time.perf_counter() - start, results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=1024,
                        help="sequences per step (Llama 2: 4M tokens = 1024 x 4096)")
    args = parser.parse_args(argv)
    model = get_model("llama2-70b")
    failed = False
    for n_gpus, limit in LIMITS_S.items():
        cluster = get_cluster("a100-80gb", n_gpus=n_gpus)
        times, results = [], []
        for _ in range(args.runs):
            elapsed, results = time_search(model, cluster, args.global_batch)
            times.append(elapsed)
        median = statistics.median(times)
        fitting = [r for r in results if r.fits]
        best = fitting[0].label if fitting else "nothing fits"
        ok = median <= limit
        failed |= not ok
        print(f"search {model.name} on {n_gpus:>5} GPUs: {len(results):>6} configurations, "
              f"{len(fitting):>5} fit, median {median:.3f} s (limit {limit:.0f} s) "
              f"{'ok' if ok else 'TOO SLOW'}; best: {best}")
    # beyond three axes: the sequence split (cp) and the experts split (ep)
    mixtral = custom_model("Mixtral 8x7B", 32, 4096, 32, vocab_size=32000, seq_len=4096,
                           learned_positions=False, n_kv_heads=8, gated_mlp=True, biases=False,
                           norm="rmsnorm", tied_embeddings=False, final_norm=True,
                           moe=MoE(8, 2, 14336))
    for name, m, cluster, batch, kwargs in (
            ("cp at 32K", model, get_cluster("a100-80gb", n_gpus=64), 128,
             dict(seq_len=32768, cps=(1, 2, 4, 8), cp_modes=("ring", "all_gather"))),
            ("ep", mixtral, get_cluster("h100-80gb", n_gpus=64), 1024,
             dict(eps=(1, 2, 4, 8), etps=(1, 2, 4, 8)))):
        start = time.perf_counter()
        results = search(m, cluster, batch, **kwargs)
        elapsed = time.perf_counter() - start
        fitting = [r for r in results if r.fits]
        print(f"search {m.name} on {cluster.n_gpus} GPUs ({name}): {len(results):>6} "
              f"configurations, {len(fitting):>5} fit, {elapsed:.3f} s; best: "
              f"{fitting[0].label if fitting else 'nothing fits'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
