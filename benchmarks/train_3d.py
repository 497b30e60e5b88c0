"""The 3D trainer on every layout of the issue: wall time of one launch (2 steps)
against single-process training of the same batches, and the largest difference
of any parameter from one process.

    .venv/bin/python benchmarks/train_3d.py
"""
import time

import torch

from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch, train_steps
from threeaxes.train import full_state, train_3d

LAYOUTS = [(2, 2, 2), (1, 2, 2), (2, 1, 2), (2, 2, 1), (4, 1, 2)]


def main():
    cfg = ToyConfig(dtype=torch.float64)
    batches = [make_batch(cfg, 8, seed=step) for step in range(2)]
    train_steps(ToyTransformer(cfg, seed=0), batches, lr=0.1)  # warm: first-use imports
    start = time.perf_counter()
    single = ToyTransformer(cfg, seed=0)
    train_steps(single, batches, lr=0.1)
    single_s = time.perf_counter() - start
    reference = dict(single.named_parameters())
    launch(train_3d, 2, cfg, batches, dp=2, lr=0.1)  # warm the forkserver once
    print(f"one process, 2 steps: {single_s * 1e3:.1f} ms")
    print(f"{'layout (dp, tp, pp)':<20} {'ranks':>5} {'launch + 2 steps':>17} {'vs one process':>15} "
          f"{'max |diff|':>11}")
    for dp, tp, pp in LAYOUTS:
        start = time.perf_counter()
        results = launch(train_3d, dp * tp * pp, cfg, batches, dp=dp, tp=tp, pp=pp, m=2, lr=0.1,
                         timeout=120)
        seconds = time.perf_counter() - start
        full = full_state(results)
        diff = max((full[n] - reference[n]).abs().max().item() for n in reference)
        print(f"{str((dp, tp, pp)):<20} {dp * tp * pp:>5} {seconds:>15.2f} s {seconds / single_s:>14.1f}x "
              f"{diff:>11.1e}")


if __name__ == "__main__":
    main()
