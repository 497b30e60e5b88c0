"""Reference checks for drop 9 (bytes per GPU under DP, ZeRO-1, ZeRO-2, ZeRO-3).

Two exercises:

* `bytes_per_gpu(n_params, regime, dp)`: the bytes of parameters, gradients
  and optimizer states one GPU holds under mixed-precision Adam. Judged by
  value against `threeaxes.cost.model_state_bytes` (ZeRO's Section 3.1 and
  Figure 1); `bytes_mistake` names the usual slips (no fp32 master copy,
  parameters sharded already under ZeRO-1, a term left unsharded, GB instead
  of bytes).
* `shard_flat(flat, dp_rank, dp)` and `gather_flat(shard, numel, dims)`: cut a
  flat parameter into dp equal shards (padded with zeros to a multiple of dp)
  and put it back together with one all-gather over dp. `check_shard_gather`
  runs them on fresh ranks against a reference written here, and reads the
  trace to see that the gather was one all-gather over the dp axis.

Only plain values come back from the ranks: {"ok": bool, "message": str}.
"""
from __future__ import annotations

from threeaxes.cost.memory import STATE_TERMS, ZERO_REGIMES
from threeaxes.grading import as_number

__all__ = ["expected_bytes", "plain_bytes", "bytes_mistake", "check_shard_gather"]



def expected_bytes(n_params, regime, dp) -> dict:
    """The reference, through the cost model: {"params", "grads", "optimizer"} in bytes."""
    from threeaxes.cost import model_state_bytes

    states = model_state_bytes(n_params, dp=dp, zero_stage=ZERO_REGIMES[regime], precision="mixed")
    return {term: float(getattr(states, term)) for term in STATE_TERMS}


def plain_bytes(answer, name="bytes_per_gpu(...)") -> dict:
    """The answer as a dict of three plain floats, or an AssertionError saying why not."""
    if type(answer) is not dict or set(answer) != set(STATE_TERMS):
        raise AssertionError(f"{name} should return a dict with exactly the keys {list(STATE_TERMS)}")
    return {term: as_number(answer[term], f"{name}[{term!r}]") for term in STATE_TERMS}


def _close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def bytes_mistake(got: dict, n_params, regime, dp) -> str | None:
    """None when `got` is right; otherwise a message naming the mistake."""
    want = expected_bytes(n_params, regime, dp)
    if all(_close(got[t], want[t]) for t in STATE_TERMS):
        return None
    where = f"for {n_params:,} parameters under {regime} with dp={dp}"
    stage = ZERO_REGIMES[regime]
    if all(_close(got[t] * 1e9, want[t]) or _close(got[t] * 2**30, want[t]) for t in STATE_TERMS):
        return f"{where} your numbers look like GB or GiB; return bytes"
    if _close(got["optimizer"] * 12 / 8, want["optimizer"]):
        per = "8 per parameter, divided over dp" if stage else "8 per parameter"
        return (f"{where} the optimizer holds {got['optimizer']:,.0f} bytes, {per}: remember the "
                f"fp32 master copy (4 bytes) beside Adam's two fp32 moments (4 + 4)")
    if stage < 3 and _close(got["params"] * dp, want["params"]) and dp > 1:
        return (f"{where} you sharded the parameters; only ZeRO-3 shards them, ZeRO-{stage or 'DP'} keeps "
                f"the whole 2-byte copy on every GPU")
    if stage < 2 and _close(got["grads"] * dp, want["grads"]) and dp > 1:
        return (f"{where} you sharded the gradients; they are sharded from ZeRO-2 on, so here "
                f"every GPU holds all of them")
    for term, first_stage in (("optimizer", 1), ("grads", 2), ("params", 3)):
        if stage >= first_stage and _close(got[term], want[term] * dp) and dp > 1:
            return f"{where} the {term} should be sharded over the dp={dp} GPUs: divide by dp"
    wrong = [t for t in STATE_TERMS if not _close(got[t], want[t])]
    return f"{where} {', '.join(wrong)} not right: expected {want}, got {got}"


# -- shard and gather a flat parameter, on ranks ---------------------------------------

def _reference_shard(flat, dp_rank, dp):
    import torch

    per_rank = -(-flat.numel() // dp)   # ceil: pad the tail with zeros up to dp equal shards
    padded = torch.zeros(per_rank * dp, dtype=flat.dtype)
    padded[:flat.numel()] = flat
    return padded[dp_rank * per_rank:(dp_rank + 1) * per_rank].clone()


def check_shard_gather(rank, world_size, shard_flat, gather_flat, sizes=(12, 10, 3)) -> dict:
    """On fresh ranks (dp = world_size): shard flat tensors of several sizes, gather them back."""
    import torch

    from threeaxes import trace
    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp=world_size)
    dp, me = dims.size("dp"), dims.coord("dp")
    for numel in sizes:
        flat = torch.arange(1.0, numel + 1, dtype=torch.float64)
        where = f"rank {rank}, a flat parameter of {numel} numbers over dp={dp}"
        want = _reference_shard(flat, me, dp)
        try:
            shard = shard_flat(flat.clone(), me, dp)
        except Exception as exc:  # noqa: BLE001 - the student's error becomes the message
            return {"ok": False, "message": f"{where}: shard_flat raised {type(exc).__name__}: {exc}"}
        if not isinstance(shard, torch.Tensor) or shard.dim() != 1:
            return {"ok": False, "message": f"{where}: shard_flat should return a 1-d tensor"}
        if shard.numel() != want.numel():
            hint = (" pad the flat tensor with zeros to a multiple of dp first, so every shard has "
                    f"the same size, ceil({numel}/{dp}) = {want.numel()}")
            return {"ok": False, "message": f"{where}: your shard holds {shard.numel()} numbers;{hint}"}
        if not torch.equal(shard.to(want.dtype), want):
            k = want.numel()
            return {"ok": False, "message": f"{where}: your shard is {shard.tolist()}, expected "
                                            f"{want.tolist()}: dp rank r keeps entries [r*{k}, (r+1)*{k}) "
                                            f"of the zero-padded tensor"}
        with trace.record() as recorded:
            try:
                full = gather_flat(shard, numel, dims)
            except Exception as exc:  # noqa: BLE001
                return {"ok": False, "message": f"{where}: gather_flat raised {type(exc).__name__}: {exc}"}
        if not isinstance(full, torch.Tensor) or full.shape != flat.shape or not torch.equal(full.to(flat.dtype), flat):
            got = list(full.shape) if isinstance(full, torch.Tensor) else type(full).__name__
            hint = " drop the padding at the end" if isinstance(full, torch.Tensor) and full.numel() > numel else ""
            return {"ok": False, "message": f"{where}: gather_flat gave {got}, not the {numel} numbers "
                                            f"back in order;{hint}"}
        gathers = recorded.comms("all_gather", "dp")
        if len(recorded.comms()) != 1 or len(gathers) != 1:
            made = [e.op for e in recorded.comms()]
            return {"ok": False, "message": f"{where}: gather_flat made {made or 'no collectives'}; "
                                            f"use exactly one comms.all_gather over the 'dp' axis"}
    return {"ok": True, "message": f"rank {rank}: every shard and every gather right"}
