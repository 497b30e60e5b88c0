"""References for drop 6 (tensor parallelism's collectives, layer by layer).

Two exercises:

* `tp_wire_bytes_per_block(b, s, h, t, bytes_per_element, sequence_parallel)`:
  the bytes one GPU sends for the tp collectives of one block in one training
  step (forward and backward). `expected_wire_bytes` builds the answer from
  `threeaxes.cost.network.bytes_sent_per_gpu`, collective by collective;
  `wire_bytes_mistake` names the usual slips (forward only, the tensor size S
  instead of wire bytes, the missing (t-1)/t, an all-gather counted as an
  all-reduce).
* `sp_mlp_sublayer(x, shard, dims)`: the MLP half of a sequence-parallel block,
  written with the provided maps. `sp_mlp_results` runs it on fresh ranks and
  sends back its raw output and gradients; `judge_sp_mlp` compares them, in the
  grader, with one process.

Ranks started from a student's notebook run there, so whatever verdict they
returned could be forged; they return raw numbers and the grader decides.
"""
from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any  # Any: what a rank or a student sent

from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.grading import as_number
from threeaxes.grading.drop06 import CUTS, one_process_mlp, sp_mlp_config, sp_mlp_results

if TYPE_CHECKING:
    import torch

__all__ = ["SEQUENCE_PARALLEL_COLLECTIVES", "TENSOR_PARALLEL_COLLECTIVES", "expected_wire_bytes",
           "wire_bytes_mistake", "draw_wire_bytes_cases", "sp_mlp_results", "judge_sp_mlp"]

# The tp collectives of one block in one step, each about one whole (b, s, h) activation.
# Plain TP (Megatron's g forward, f backward, once per sublayer, two sublayers):
TENSOR_PARALLEL_COLLECTIVES = {"forward": ("all_reduce",) * 2, "backward": ("all_reduce",) * 2}
# TP + SP (Korthikanti et al. 2022, figure 5): an all-gather and a reduce-scatter per
# sublayer forward, their conjugates backward.
SEQUENCE_PARALLEL_COLLECTIVES = {"forward": ("all_gather", "reduce_scatter") * 2,
                                 "backward": ("all_gather", "reduce_scatter") * 2}


def expected_wire_bytes(b: int, s: int, h: int, t: int, bytes_per_element: int, sequence_parallel: bool,
                        passes: tuple[str, ...] = ("forward", "backward")) -> float:
    """Bytes one GPU sends (ring algorithms) for one block's tp collectives."""
    size = b * s * h * bytes_per_element  # S: one whole activation
    plan = SEQUENCE_PARALLEL_COLLECTIVES if sequence_parallel else TENSOR_PARALLEL_COLLECTIVES
    return sum(bytes_sent_per_gpu(op, size, t) for p in passes for op in plan[p])


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def wire_bytes_mistake(answer: Any, b: int, s: int, h: int, t: int, bytes_per_element: int,
                       sequence_parallel: bool) -> str | None:
    """None when the answer is right; otherwise a message naming the mistake."""
    args = f"tp_wire_bytes_per_block({b}, {s}, {h}, {t}, {bytes_per_element}, {sequence_parallel})"
    got = as_number(answer, args)
    want = expected_wire_bytes(b, s, h, t, bytes_per_element, sequence_parallel)
    if _same(got, want):
        return None
    size = b * s * h * bytes_per_element
    n_collectives = 8 if sequence_parallel else 4
    if t == 1:
        return f"{args} = {got:g}: with t=1 there is no other rank, so nothing is sent"
    if _same(got, want / 2):
        return (f"{args} = {got:g}, half the answer: you counted only the forward collectives; "
                f"backward makes as many again (the conjugate of each map)")
    if _same(got, n_collectives * size) or _same(got, n_collectives * size / 2):
        return (f"{args} = {got:g}: you counted the tensor size S = b*s*h*bytes per collective; "
                f"the question asks what one GPU sends, which a ring collective makes a fraction "
                f"of S: (t-1)/t S for an all-gather or a reduce-scatter, 2(t-1)/t S for an all-reduce")
    if not sequence_parallel and (_same(got, 4 * 2 * size) or _same(got, 2 * 2 * size)):
        return (f"{args} = {got:g}: you counted 2 S per all-reduce; the ring sends 2(t-1)/t S, "
                f"you forgot the (t-1)/t factor")
    if sequence_parallel and (_same(got, 2 * want) or _same(got, want * 2 * t / (t - 1))):
        return (f"{args} = {got:g}: an all-gather or a reduce-scatter sends (t-1)/t S, half of "
                f"what an all-reduce of S sends; you counted each as an all-reduce")
    return f"{args} = {got:g} is not what one GPU sends per block per step"


def draw_wire_bytes_cases(rng: random.Random) -> list[tuple]:
    """Arguments (b, s, h, t, bytes_per_element, sequence_parallel) for the hidden
    test, drawn with `rng`: a toy-sized and a model-sized block, each with and
    without sequence parallelism, and one tp size of 1 (nothing to send)."""
    cases: list[tuple] = []
    for small in (True, False):
        b = rng.randint(1, 4) if small else rng.randint(1, 16)
        t = rng.choice([2, 3, 4]) if small else rng.choice([2, 4, 8])
        s = t * (rng.randint(2, 16) if small else rng.randint(64, 1024))
        h = (32 * rng.randint(1, 4)) if small else 128 * rng.randint(8, 64)
        element = rng.choice([8, 4]) if small else rng.choice([2, 4])
        cases += [(b, s, h, t, element, False), (b, s, h, t, element, True)]
    cases.append((rng.randint(1, 8), rng.randint(1, 64), rng.randint(1, 64), 1, rng.choice([2, 4, 8]),
                  rng.choice([False, True])))
    return cases


# -- exercise 2: the MLP half of a sequence-parallel block ---------------------------

def judge_sp_mlp(results: Any, world_size: int, seq_len: int = 8, batch: int = 2, seed: int = 0,
                 d_model: int = 32) -> str:
    """The line to print when every rank's `sp_mlp_results` equal one process (the
    output slice, the gradient of x, of each shard, and of the whole tensors summed
    over the ranks); otherwise an AssertionError naming the mistake."""

    t = world_size
    where = f"(tp={t}, batch={batch}, seq_len={seq_len}, d_model={d_model}, seed={seed})"
    block, x, _, y = one_process_mlp(sp_mlp_config(seq_len, d_model), batch, seed)
    params = dict(block.named_parameters())
    if type(results) is not list or len(results) != t or any(type(r) is not dict for r in results):
        raise AssertionError(f"expected one result per rank {where}")
    grads = []
    for rank, r in enumerate(results):
        at = f"rank {rank} {where}"
        want = y.chunk(t, 1)[rank]
        if r.get("error"):
            raise AssertionError(f"{at}: {r['error']}")
        if r.get("type") != "Tensor":
            raise AssertionError(f"{at}: sp_mlp_sublayer should return a torch.Tensor, got {r.get('type')}")
        shape = tuple(r.get("shape") or ())
        if shape != tuple(want.shape):
            raise AssertionError(f"{at}: the output has shape {shape}; it should be this rank's slice of "
                                 f"the sequence, {tuple(want.shape)}: reduce-scatter fc2's partial sums "
                                 f"back to the slice")
        got = _floats(r.get("output"), want, f"{at}: the output")
        diff = (got - want).abs().max().item()
        if diff > 1e-10:
            extra = want + (t - 1) * params["mlp.fc2.bias"].detach()
            if (got - extra).abs().max().item() < 1e-10:
                raise AssertionError(f"{at}: the output is off by exactly {t - 1} times fc2's bias: the "
                                     f"bias is added on every rank before the reduce-scatter sums them; "
                                     f"add it once, after")
            raise AssertionError(f"{at}: the output differs from one process by {diff:.2e}; each rank "
                                 f"holds only s/t positions, so all-gather the LayerNorm output before "
                                 f"fc1 (gather_from_sequence_region) and reduce-scatter fc2's partial sums "
                                 f"(reduce_scatter_to_sequence_region)")
        if r.get("requires_grad") is not True or type(r.get("grads")) is not dict:
            raise AssertionError(f"{at}: the output carries no gradient; compute it with torch operations "
                                 f"and the provided maps (no torch.no_grad, no .detach())")
        grads.append(r["grads"])
    # the reference gradients, cut as the ranks hold them; whole tensors' are summed over the ranks
    worst = 0.0
    cuts: list[tuple[str, tuple[str | None, int | None]]] = [("x", (None, 1)), *CUTS.items()]
    for key, (name, d) in cuts:
        full = x.grad if name is None else params[name].grad     # only x has no parameter's name
        assert full is not None, f"{key} takes part in the one-process backward"
        if any(g.get(key) is None for g in grads):
            rank = next(i for i, g in enumerate(grads) if g.get(key) is None)
            raise AssertionError(f"rank {rank} {where}: {key} got no gradient; use every tensor of "
                                 f"`shard` and the provided maps")
        pieces: list[tuple[str, torch.Tensor | int, torch.Tensor]]   # int: sum() over no rank is 0
        if d is None:   # LayerNorm and fc2.bias saw this rank's positions only: their sum is the gradient
            pieces = [(f"the sum over the ranks of {key}'s gradient",
                       sum(_floats(g[key], full, f"{key}'s gradient {where}") for g in grads), full)]
        else:
            pieces = [(f"rank {rank}'s gradient of {key}", _floats(g[key], want, f"{key}'s gradient {where}"),
                       want) for rank, (g, want) in enumerate(zip(grads, full.chunk(t, d)))]
        for label, sent, want in pieces:
            gdiff = (sent - want).abs().max().item()
            if gdiff > 1e-10:
                raise AssertionError(f"{where}: the forward is right but {label} is off by {gdiff:.2e}: a "
                                     f"collective called directly has no backward; use the maps, whose "
                                     f"backward runs the conjugate collective")
            worst = max(worst, gdiff)
    return (f"on {t} fresh ranks your output and every gradient equal one process "
            f"(largest difference {worst:.1e})")


def _floats(values: Any, like: torch.Tensor, what: str) -> torch.Tensor:
    """Returned floats as a float64 tensor shaped like `like`, or an AssertionError."""
    import torch

    if type(values) is not list or len(values) != like.numel() or any(type(v) is not float for v in values):
        raise AssertionError(f"{what} came back malformed")
    return torch.tensor(values, dtype=torch.float64).reshape(like.shape)
