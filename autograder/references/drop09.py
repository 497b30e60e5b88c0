"""References for drop 9 (bytes per GPU under DP, ZeRO-1, ZeRO-2, ZeRO-3).

Two exercises:

* `bytes_per_gpu(n_params, regime, dp)`: the bytes of parameters, gradients
  and optimizer states one GPU holds under mixed-precision Adam. Judged by
  value against `threeaxes.cost.model_state_bytes` (ZeRO's Section 3.1 and
  Figure 1); `bytes_mistake` names the usual slips (no fp32 master copy,
  parameters sharded already under ZeRO-1, a term left unsharded, GB instead
  of bytes).
* `shard_flat(flat, dp_rank, dp)` and `gather_flat(shard, numel, dims)`: cut a
  flat parameter into dp equal shards (padded with zeros to a multiple of dp)
  and put it back together with one all-gather over dp. The hidden test
  judges in the grader: `shard_mistake` calls `shard_flat` for every rank
  against the reference cut here, `shard_gather_raw` (`threeaxes.grading.drop09`,
  the student's side) sends back from the ranks only raw values (shards,
  gathered vectors, collectives) and `gather_mistake` compares them with the
  vectors the grader drew (`draw_flat_vectors`).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: what a rank or a student sent

from threeaxes.cost.memory import STATE_TERMS, ZERO_REGIMES
from threeaxes.grading import as_number, ask_student
from threeaxes.grading.drop09 import shard_gather_raw

if TYPE_CHECKING:
    import torch

__all__ = ["expected_bytes", "plain_bytes", "ask_bytes", "bytes_mistake", "draw_bytes_cases",
           "draw_flat_vectors", "shard_mistake", "shard_gather_raw", "gather_mistake"]

def expected_bytes(n_params: int, regime: str, dp: int) -> dict:
    """The reference, through the cost model: {"params", "grads", "optimizer"} in bytes."""
    from threeaxes.cost import model_state_bytes

    states = model_state_bytes(n_params, dp=dp, zero_stage=ZERO_REGIMES[regime], precision="mixed")
    return {term: float(getattr(states, term)) for term in STATE_TERMS}


def plain_bytes(answer: Any, name: str = "bytes_per_gpu(...)") -> dict:
    """The answer as a dict of three plain floats, or an AssertionError saying why not."""
    if type(answer) is not dict or set(answer) != set(STATE_TERMS):
        raise AssertionError(f"{name} should return a dict with exactly the keys {list(STATE_TERMS)}")
    return {term: as_number(answer[term], f"{name}[{term!r}]") for term in STATE_TERMS}


def ask_bytes(bytes_per_gpu: Callable[..., object], n_params: int, regime: str, dp: int) -> dict:
    """The answer for one case as plain floats; any error names the call."""
    call = f"bytes_per_gpu({n_params!r}, {regime!r}, {dp})"
    return plain_bytes(ask_student(bytes_per_gpu, call, n_params, regime, dp), call)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def bytes_mistake(got: dict, n_params: int, regime: str, dp: int) -> str | None:
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


def draw_bytes_cases(rng: random.Random) -> list[tuple]:
    """Random (n_params, regime, dp) cases: a small model, one in the billions and one given
    as a float (7e9-style), each under every regime over two dp sizes above 1."""
    sizes = [rng.randint(1, 10**6), rng.randint(10**9, 2 * 10**11), rng.randint(1, 500) * 1e9]
    dps = [rng.randint(2, 8), rng.randint(9, 512)]
    return [(n, regime, dp) for n in sizes for regime in ZERO_REGIMES for dp in dps]


# -- shard and gather a flat parameter, on ranks ---------------------------------------

def _reference_shard(flat: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    import torch

    per_rank = -(-flat.numel() // dp)   # ceil: pad the tail with zeros up to dp equal shards
    padded = torch.zeros(per_rank * dp, dtype=flat.dtype)
    padded[:flat.numel()] = flat
    return padded[dp_rank * per_rank:(dp_rank + 1) * per_rank].clone()


# -- the hidden test: raw values from the ranks, judged in the grader ----------------------

def draw_flat_vectors(rng: random.Random) -> tuple[int, list[list[float]]]:
    """A dp size from 2 to 4 and three flat vectors of random numbers (exact in float32, so a
    float32 buffer is no mistake here): a length that is not a multiple of dp, one that is,
    and one shorter than dp (some shards are all padding)."""
    dp = rng.randint(2, 4)
    sizes = [dp * rng.randint(1, 6) + rng.randint(1, dp - 1), dp * rng.randint(1, 6), rng.randint(1, dp - 1)]
    return dp, [[rng.randint(-800, 800) / 8 for _ in range(n)] for n in sizes]


def _where(values: list[float], dp: int) -> str:
    shown = f" {values}" if len(values) <= 12 else ""
    return f"a flat parameter of {len(values)} numbers{shown} over dp={dp}"


def shard_mistake(shard_flat: Callable[..., object], dp: int, vectors: list[list[float]]) -> str | None:
    """Call `shard_flat` for every dp rank and vector (no communication: one process) and
    compare with the zero-padded reference cut here; None when all are right."""
    import torch

    for values in vectors:
        flat = torch.tensor(values, dtype=torch.float64)
        for dp_rank in range(dp):
            want = _reference_shard(flat, dp_rank, dp)
            where = f"shard_flat(<{_where(values, dp)}>, {dp_rank}, {dp})"
            shard = ask_student(shard_flat, where, flat.clone(), dp_rank, dp)
            if not isinstance(shard, torch.Tensor) or shard.dim() != 1:
                return f"{where} should return a 1-d tensor, got {type(shard).__name__}"
            if shard.numel() != want.numel():
                return (f"{where} holds {shard.numel()} numbers; pad the flat tensor with zeros to a "
                        f"multiple of dp first, so every shard has ceil({flat.numel()}/{dp}) = "
                        f"{want.numel()}")
            if not torch.equal(shard.to(want.dtype), want):
                k = want.numel()
                return (f"{where} is {shard.tolist()}, expected {want.tolist()}: dp rank r keeps "
                        f"entries [r*{k}, (r+1)*{k}) of the zero-padded tensor")
    return None


def gather_mistake(raw: Any, dp: int, vectors: list[list[float]]) -> str | None:
    """Judge what `shard_gather_raw` sent back from dp ranks against the drawn vectors and the
    reference shards; None when every rank shows the right shard, the whole vector back
    without padding, and exactly one all-gather over dp."""
    import torch

    keys = {"shard", "gathered", "collectives", "error"}
    if (type(raw) is not list or len(raw) != dp
            or any(type(r) is not tuple or len(r) != len(vectors) for r in raw)
            or any(type(e) is not dict or set(e) != keys for r in raw for e in r)):
        shown = repr(raw)[:200]
        return (f"the {dp} ranks sent back {shown}, not the shards and gathered vectors of your "
                f"functions: was check_on_ranks or threeaxes changed in the notebook?")
    for rank, entries in enumerate(raw):
        for values, entry in zip(vectors, entries):
            where = f"rank {rank}, {_where(values, dp)}"
            if entry["error"]:
                return f"{where}: {entry['error']}"
            want = _reference_shard(torch.tensor(values, dtype=torch.float64), rank, dp)
            if entry["shard"] != (tuple(want.shape), want.tolist()):
                return f"{where}: the shard on the rank was {entry['shard']}, expected {want.tolist()}"
            got = entry["gathered"]
            if got is None:
                return f"{where}: another rank's shard_flat failed, so nothing was gathered"
            if got != ((len(values),), [float(v) for v in values]):
                hint = ""
                if type(got) is tuple and len(got[1]) > len(values) and got[1][:len(values)] == values:
                    hint = " drop the padding at the end (return the first numel numbers)"
                shown = f"a tensor of shape {got[0]}" if type(got) is tuple else got
                return (f"{where}: gather_flat gave {shown}, not the {len(values)} numbers back in "
                        f"order;{hint}")
            if entry["collectives"] != (("all_gather", "dp"),):
                made = [op for op, _ in entry["collectives"]] or "no collectives"
                return (f"{where}: gather_flat made {made}; use exactly one comms.all_gather over "
                        f"the 'dp' axis")
    return None
