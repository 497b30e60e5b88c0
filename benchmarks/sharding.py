"""Memory regimes on the default toy (ToyConfig(), float32, Adam) on 4 gloo ranks.

Per regime (threeaxes.sharding.regimes): bytes rank 0 holds after a step,
measured beside predicted (cost.placement + ZeRO's accounting); ZeRO-3's
gathered peak; bytes sent per step beside the ZeRO paper's volume; and the
median step time, as a ratio to plain data parallelism in the same run.

    .venv/bin/python benchmarks/sharding.py
"""
import time

from threeaxes.cost.memory import ZERO_REGIMES
from threeaxes.launch import launch
from threeaxes.sharding.regimes import predicted_bytes, predicted_gathered_peak, predicted_wire_bytes
from threeaxes.toy import ToyConfig, make_batch

CFG = ToyConfig()
WORLD, BATCH, STEPS = 4, 8, 6
VARIANTS = {"dp": False, "zero1": False, "zero2": False, "zero3": False, "zero3_prefetch": True}


def _run(rank, world_size, cfg, batches):
    from threeaxes import sharding, trace
    from threeaxes.cost.network import bytes_sent_per_gpu
    from threeaxes.sharding.regimes import build_regime, step_regime

    out = {}
    for variant, prefetch in VARIANTS.items():
        regime = variant.split("_")[0]
        dims, model, opt = build_regime(regime, cfg, world_size, prefetch=prefetch)
        sharding.GATHERED.reset_peak()
        seconds = []
        with trace.record() as recorded:
            for inputs, targets in batches:
                start = time.perf_counter()
                step_regime(regime, dims, model, opt, inputs, targets)
                seconds.append(time.perf_counter() - start)
        wire = sum(bytes_sent_per_gpu(e.op, e.bytes, len(e.group)) for e in recorded.comms())
        later = sorted(seconds[1:])   # the first step pays for first-use imports
        out[variant] = {"held": tuple(sharding.held_bytes(model, opt)), "peak": sharding.GATHERED.peak,
                        "wire_per_step": wire / len(batches), "step_s": later[len(later) // 2]}
    return out


def main():
    batches = [make_batch(CFG, BATCH, seed=step) for step in range(STEPS)]
    launch(_run, WORLD, CFG, batches[:2])   # warm the forkserver and first-use imports
    results = launch(_run, WORLD, CFG, batches, timeout=120)
    print(f"ToyConfig() float32 Adam, {WORLD} ranks; bytes per rank (rank 0), measured / predicted")
    print(f"{'variant':<15} {'params':>15} {'grads':>15} {'optimizer':>17} | {'gathered peak':>17} | "
          f"{'sent/step':>9} {'paper':>9} | {'step ms':>7} {'vs dp':>6}")
    dp_step = results[0]["dp"]["step_s"]
    for variant, prefetch in VARIANTS.items():
        regime, r = variant.split("_")[0], results[0][variant]
        assert all(other[variant]["held"] == r["held"] for other in results)   # every rank alike
        pred = predicted_bytes(CFG, regime, WORLD)
        terms = [f"{got:,}/{pred[k]:,.0f}" for got, k in zip(r["held"], ("params", "grads", "optimizer"))]
        peak = f"{r['peak']:,}/{predicted_gathered_peak(CFG, prefetch):,.0f}" if regime == "zero3" else "-"
        print(f"{variant:<15} {terms[0]:>15} {terms[1]:>15} {terms[2]:>17} | {peak:>17} | "
              f"{r['wire_per_step']:>9,.0f} {predicted_wire_bytes(CFG, regime, WORLD):>9,.0f} | "
              f"{r['step_s'] * 1e3:>7.2f} {r['step_s'] / dp_step:>6.2f}")
    print(f"(zero1 sends 3 Psi, the paper 2 Psi: ZeroRedundancyOptimizer's interface all-reduces the "
          f"gradients, then all-gathers the updated shards; {sorted(ZERO_REGIMES)} are the ZeRO regimes)")


if __name__ == "__main__":
    main()
