"""ZeRO stages on the default toy (ToyConfig(), float32, Adam) on 4 gloo ranks: what
each rank holds, measured (threeaxes.sharding.held_bytes) beside what
threeaxes.cost.memory.model_state_bytes predicts; the peak of gathered
parameters under ZeRO-3; the bytes each rank sends per step (from the trace)
beside the ZeRO paper's volumes; and the time per step.

    .venv/bin/python benchmarks/sharding.py
"""
import time

import torch

from threeaxes.cost.memory import model_state_bytes
from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, ToyTransformer, make_batch

CFG = ToyConfig()
WORLD, BATCH, STEPS = 4, 8, 5
STAGES = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "zero3_prefetch": 3}


def _run(rank, world_size, cfg, batches):
    from threeaxes import sharding, trace
    from threeaxes.data_parallel import average_gradients, shard_batch
    from threeaxes.dims import ParallelDims
    from threeaxes.toy import lm_loss

    dims = ParallelDims.init(dp=world_size)
    out = {}
    for variant in STAGES:
        model = ToyTransformer(cfg, seed=0)
        if variant == "dp":
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        elif variant == "zero1":
            opt = sharding.ZeroOptimizer(model.parameters(), torch.optim.Adam, dims, lr=1e-3)
        elif variant == "zero2":
            opt = sharding.Zero2Optimizer(model.parameters(), torch.optim.Adam, dims, lr=1e-3)
        else:
            for block in model.blocks:
                sharding.fully_shard(block, dims, prefetch=variant.endswith("prefetch"))
            sharding.fully_shard(model, dims, prefetch=variant.endswith("prefetch"))
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        sharding.GATHERED.reset_peak()
        seconds = []
        with trace.record() as recorded:
            for inputs, targets in batches:
                start = time.perf_counter()
                inputs, targets = shard_batch(inputs, targets, dims)
                opt.zero_grad()
                lm_loss(model(inputs), targets).backward()
                if variant in ("dp", "zero1"):
                    average_gradients(model, dims)
                opt.step()
                seconds.append(time.perf_counter() - start)
        wire = sum(bytes_sent_per_gpu(e.op, e.bytes, world_size) for e in recorded.comms())
        out[variant] = {"held": sharding.held_bytes(model, opt), "peak": sharding.GATHERED.peak,
                        "wire_per_step": wire / len(batches),
                        "step_s": sorted(seconds[1:])[len(seconds[1:]) // 2]}   # median, first left out
    return out


def main():
    psi = sum(p.numel() for p in ToyTransformer(CFG).parameters())
    batches = [make_batch(CFG, BATCH, seed=step) for step in range(STEPS)]
    launch(_run, WORLD, CFG, batches[:2])   # warm the forkserver and first-use imports
    results = launch(_run, WORLD, CFG, batches, timeout=120)
    ring = (WORLD - 1) / WORLD
    paper = {0: 2, 1: 2, 2: 2, 3: 3}   # Psi units per step (Rajbhandari et al. 2020, Section 7)
    print(f"ToyConfig() float32 Adam, Psi = {psi:,} parameters, {WORLD} ranks; bytes per rank (rank 0)")
    print(f"{'variant':<15} {'params':>8} {'grads':>8} {'optim':>8} {'total':>8} | "
          f"{'predicted p/g/o/total':>31} | {'gathered peak':>13} | {'sent/step':>9} "
          f"{'paper':>9} | {'step ms':>7}")
    for variant, stage in STAGES.items():
        r = results[0][variant]
        assert all(other[variant]["held"] == r["held"] for other in results)   # every rank alike
        pred = model_state_bytes(psi, dp=WORLD, zero_stage=stage, precision="fp32")
        predicted = "/".join(f"{v:,.0f}" for v in pred)
        print(f"{variant:<15} {r['held'].params:>8,} {r['held'].grads:>8,} {r['held'].optimizer:>8,} "
              f"{r['held'].total:>8,} | {predicted:>31} | {r['peak']:>13,} | "
              f"{r['wire_per_step']:>9,.0f} {paper[stage] * ring * 4 * psi:>9,.0f} | "
              f"{r['step_s'] * 1e3:>7.2f}")


if __name__ == "__main__":
    main()
