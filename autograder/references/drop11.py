"""References for drop 11 (throughput lost on a bigger cluster).

The scenario (`OLD_SCENARIO`, `NEW_SCENARIO`, `OLD_CONFIG`, ...) is the
package's `threeaxes.scenarios.drop11`. Everything here is computed from
`threeaxes.cost` at grading time, so a change of the cost model changes the
answers with it:

* `tp_after_s` (the core's diagnosis): the seconds one step on the new cluster spends
  in tensor-parallel all-reduces with the old layout, a fixed answer whose value
  `tp_after_seconds` takes from the planner's `tp_comm` term (bytes over the link,
  plus each ring step's latency, which the student may leave out: `TP_AFTER_REL`).
* `moved_axis(old_dims, new_dims, old_gpus_per_node, new_gpus_per_node)`: the
  axis whose group ran inside a node before and crosses nodes after, or
  "none" (`cost.network.group_inside_node`); `moved_axes` lists them all.
  `AXIS_SLIPS` are the catalogued mistakes as functions, `draw_axis_cases(rng)`
  the layouts the hidden test asks about (every slip told apart), and
  `axis_mistake` names the slip a student's answers match.
* `tp_wire_bytes(...)`: bytes one GPU sends in its tp all-reduces per step,
  from `cost.network.bytes_sent_per_gpu`; `tp_bytes_mistake` names the usual
  slips against it; `draw_bytes_case(rng)` draws the shapes the hidden test asks
  about at grading time.
* `new_layout`: judged by `autograder.references.sizing.grade_configuration`
  against `NEW_SCENARIO`.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any  # Any: a student's answer

from threeaxes.cost import Cluster, bytes_sent_per_gpu, group_inside_node
from threeaxes.cost.network import group_strides
from threeaxes.grading import as_choice, as_number
from threeaxes.scenarios.drop11 import (  # noqa: F401
    AXES_BY_STRIDE,
    DROP_RANGE,
    MODEL,
    NEW_BATCH,
    NEW_CLUSTER,
    NEW_SCENARIO,
    OLD_BATCH,
    OLD_CLUSTER,
    OLD_CONFIG,
    OLD_SCENARIO,
    old_config_on,
)

__all__ = ["TP_AFTER_REL", "tp_after_seconds", "moved_axes", "moved_axis", "AXIS_SLIPS",
           "draw_axis_cases", "plain_axis", "axis_mistake", "tp_wire_bytes", "tp_bytes_mistake",
           "plain_bytes", "draw_bytes_case"]
TP_AFTER_REL = 0.1      # relative, as the notebook states; latency is 4% of the term here

Dims = tuple[int, int, int]                  # (dp, tp, pp)
Strides = Callable[[int, int, int], dict]   # (dp, tp, pp) -> {axis: (stride, size)}: group_strides
Inside = Callable[..., bool]   # (stride, size, GPUs per node): group_inside_node; called with a (stride, size) unpacked


def tp_after_seconds() -> float:
    """The planner's tensor-parallel term of one step: the old layout on the new cluster."""
    from threeaxes.cost import plan

    result = plan(MODEL, NEW_CLUSTER, NEW_BATCH, **old_config_on(NEW_CLUSTER), allow_tp_across_nodes=True)
    return result.time.tp_comm


def moved_axes(old_cluster: Cluster, new_cluster: Cluster, old_dims: Dims, new_dims: Dims) -> list:
    """Axes whose group ran inside one node before and crosses nodes after."""
    return _moved(old_dims, new_dims, old_cluster.gpus_per_node, new_cluster.gpus_per_node,
                  group_strides, group_inside_node)


def _moved(old_dims: Dims, new_dims: Dims, old_gpn: int, new_gpn: int, strides: Strides,
           inside: Inside) -> list:
    before, after = strides(*old_dims), strides(*new_dims)
    return [axis for axis in AXES_BY_STRIDE
            if inside(*before[axis], old_gpn) and not inside(*after[axis], new_gpn)]


def _first(moved: list) -> str:
    return moved[0] if moved else "none"


def moved_axis(old_dims: Dims, new_dims: Dims, old_gpus_per_node: int, new_gpus_per_node: int) -> str:
    """The reference: the axis whose group left the node ("none" when no group did)."""
    return _first(_moved(old_dims, new_dims, old_gpus_per_node, new_gpus_per_node,
                         group_strides, group_inside_node))


# The catalogued mistakes (grading.json), as functions: what each wrong rule answers.
def _slip(strides: Strides = group_strides, inside: Inside = group_inside_node,
          ignore_before: bool = False) -> Callable[[Dims, Dims, int, int], str]:
    def answer(old_dims: Dims, new_dims: Dims, old_gpn: int, new_gpn: int) -> str:
        if ignore_before:        # any axis that crosses now, whether or not it did before
            after = strides(*new_dims)
            return _first([a for a in AXES_BY_STRIDE if not inside(*after[a], new_gpn)])
        return _first(_moved(old_dims, new_dims, old_gpn, new_gpn, strides, inside))
    return answer


AXIS_SLIPS = {
    "always_tp": (lambda *case: "tp",
                  "you answered tp whatever the layouts; work it out from each group's stride and size"),
    "stride_ignored": (_slip(inside=lambda stride, size, gpn: size <= gpn),
                       "you compared the group's size with the node and ignored its stride: a group of "
                       "size ranks spaced stride apart spans stride * size GPUs"),
    "dp_numbered_fastest": (_slip(strides=lambda dp, tp, pp: {"tp": (dp, tp), "dp": (1, dp),
                                                               "pp": (dp * tp, pp)}),
                            "you numbered the ranks dp fastest; they go tp fastest (stride 1), then dp "
                            "(stride tp), then pp (stride tp * dp)"),
    "pp_numbered_fastest": (_slip(strides=lambda dp, tp, pp: {"tp": (pp * dp, tp), "dp": (pp, dp),
                                                               "pp": (1, pp)}),
                            "you numbered the ranks pp fastest; they go tp fastest (stride 1), then dp "
                            "(stride tp), then pp (stride tp * dp)"),
    "crosses_now_only": (_slip(ignore_before=True),
                         "you returned a group that crosses nodes after the move without checking that it "
                         "ran inside a node before; one that already crossed did not leave NVLink"),
    "pp_stride_without_tp": (_slip(strides=lambda dp, tp, pp: {"tp": (1, tp), "dp": (tp, dp),
                                                                "pp": (dp, pp)}),
                             "the pp group's stride is tp * dp (a whole data-parallel set of tp groups lies "
                             "between two stages), not dp"),
}

NODE_SIZES = ((16, 8), (8, 8), (8, 4), (8, 2), (4, 4), (4, 2))     # GPUs per node, before and after


def draw_axis_cases(rng: random.Random, n: int = 6) -> list:
    """`n` (old_dims, new_dims, old_gpus_per_node, new_gpus_per_node) for the hidden test, drawn
    from `rng` at grading time: powers of two, at most one group moving, and on the n
    together every slip of `AXIS_SLIPS` answers differently from the reference and from
    every other slip somewhere."""
    while True:
        cases: list[tuple[Dims, Dims, int, int]] = []
        while len(cases) < n:
            old_gpn, new_gpn = rng.choice(NODE_SIZES)
            tp, pp = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 4, 8, 16))
            dp = rng.choice((1, 2, 4, 8))
            new_dp = dp * rng.choice((1, 2))
            case = ((dp, tp, pp), (new_dp, tp, pp), old_gpn, new_gpn)
            if len(_moved(*case, group_strides, group_inside_node)) <= 1:
                cases.append(case)
        answers = [tuple(moved_axis(*c) for c in cases)]
        answers += [tuple(slip(*c) for c in cases) for slip, _ in AXIS_SLIPS.values()]
        if len(set(answers[0])) >= 3 and len(set(answers)) == len(answers):   # each slip named as itself
            return cases


def plain_axis(answer: Any, name: str = "moved_axis(...)") -> str:
    return as_choice(answer, {*AXES_BY_STRIDE, "none"}, name)


def axis_mistake(got: list, cases: list) -> str | None:
    """None when every answer is right; otherwise the first wrong call and, when the
    answers are those of a catalogued slip on every case, what that slip is."""
    wrong = [(c, g) for c, g in zip(cases, got) if g != moved_axis(*c)]
    if not wrong:
        return None
    case, answer = wrong[0]
    where = f"moved_axis{case} = {answer!r}"
    for slip, says in AXIS_SLIPS.values():
        if [slip(*c) for c in cases] == got:
            return f"{where}: {says}"
    return (f"{where} is not the axis whose group ran inside one node before and crosses nodes "
            "after; work out each group's stride and size before and after")


def tp_wire_bytes(n_layers: int, d_model: int, seq_len: int, micro_batch: int, micro_batches: int, tp: int, pp: int,
                  bytes_per_value: int = 2) -> float:
    """Bytes one GPU sends in its tensor-parallel all-reduces in one step.

    Each layer all-reduces the (micro_batch, seq_len, d_model) activation twice
    forward and twice backward (Shoeybi et al. 2019, Section 3; sequence
    parallelism's reduce-scatter + all-gather moves the same bytes), for every
    micro-batch, on the n_layers / pp layers of this GPU's stage; a ring
    all-reduce of S bytes sends 2 (tp - 1) / tp * S per GPU (Thakur et al. 2005).
    """
    activation = bytes_per_value * micro_batch * seq_len * d_model
    per_all_reduce = bytes_sent_per_gpu("all_reduce", activation, tp)
    return (n_layers // pp) * micro_batches * 4 * per_all_reduce


def tp_bytes_mistake(got: float, args: tuple) -> str | None:
    """None when `got` equals the reference for `args`; else the slip it matches."""
    want = tp_wire_bytes(*args)
    if math.isclose(got, want, rel_tol=1e-9):
        return None
    n_layers, d_model, seq_len, mbs, m, tp, pp = args[:7]
    activation = 2 * mbs * seq_len * d_model
    where = (f"for n_layers={n_layers}, d_model={d_model}, seq_len={seq_len}, "
             f"micro_batch={mbs}, micro_batches={m}, tp={tp}, pp={pp}")
    slips = [
        (want / 2, "half the bytes: either you counted only the two forward all-reduces per "
                   "layer (backward makes two more), or (tp - 1) / tp of the activation per "
                   "all-reduce, an all-gather's share (an all-reduce sends 2 (tp - 1) / tp)"),
        (want * pp, f"you counted all {n_layers} layers; this GPU holds only its stage's "
                    f"n_layers / pp = {n_layers // pp}"),
        (want / m, f"you counted one micro-batch; the stage runs all {m} of them each step"),
        (want * 2, "you counted 4-byte values; the activations travel in 2-byte bf16"),
        (want * tp / (2 * (tp - 1)) if tp > 1 else None,
         "you counted the whole activation per all-reduce; a ring all-reduce sends "
         "2 (tp - 1) / tp of it from each GPU"),
    ]
    for value, message in slips:
        if value is not None and math.isclose(got, value, rel_tol=1e-9):
            return f"{where}: {message}"
    return (f"{where}: got {got:.4g} bytes, expected {want:.4g}; one all-reduce here is of "
            f"{activation:g} bytes")


def plain_bytes(answer: Any, name: str) -> float:
    return as_number(answer, name)


def draw_bytes_case(rng: random.Random) -> tuple:
    """A (n_layers, d_model, seq_len, micro_batch, micro_batches, tp, pp) for the hidden
    test, drawn from `rng` (a `random.Random`) at grading time: pp divides the layers
    (each stage holds n_layers / pp of them) and tp >= 2 (tp = 1 sends nothing)."""
    pp = rng.choice((1, 2, 4, 8, 16))
    n_layers = pp * rng.randint(1, 12)
    d_model = 128 * rng.randint(4, 96)
    return (n_layers, d_model, rng.choice((512, 1024, 2048, 4096, 8192)), rng.randint(1, 4),
            rng.randint(1, 64), rng.choice((2, 4, 8)), pp)


def draw_bytes_cases(rng: random.Random, n: int = 3) -> list[tuple]:
    """`n` cases of `draw_bytes_case`, for catalogue.telling, the last with 4-byte values."""
    return [draw_bytes_case(rng) for _ in range(n - 1)] + [draw_bytes_case(rng) + (4,)]
