"""The reveal of a sealed diagnosis (drops 10-12): the student's value beside the cost model's,
and the catalogued mistake it matches, named."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from threeaxes.grading import as_number
from threeaxes.grading.visible import load

if TYPE_CHECKING:
    from threeaxes.cost.evaluate import PlanResult
    from threeaxes.cost.presets import Cluster, Model

GIB_OVER_GB = 1e9 / 2**30     # a GB in GiB: the slip of giving GiB where GB is asked


def oom_terms(right: dict[str, float], model: Model, layout: dict[str, int], seq_before: int,
              seq_after: int) -> dict[str, dict[str, float]]:
    """Drop 10's mistakes: what each gives, from the right {"linear", "scores"} GB of `layout`
    (its tp and micro_batch) at `seq_after` tokens."""
    lin, sc = right["linear"], right["scores"]
    n, a, b, tp = model.n_layers, model.n_heads, layout["micro_batch"], layout["tp"]
    shrink = seq_before / seq_after
    return {
        "oom_scores_not_divided_by_tp": {"linear": lin, "scores": sc * tp},
        "oom_scores_linear_in_s": {"linear": lin, "scores": sc / seq_after},
        "oom_at_the_old_length": {"linear": lin * shrink, "scores": sc * shrink**2},
        "oom_one_layer_only": {"linear": lin / n, "scores": sc / n},
        "oom_all_linear_over_tp": {"linear": lin * (34 / tp) / (10 + 24 / tp), "scores": sc},
        "oom_micro_batch_forgotten": {"linear": lin / b, "scores": sc / b},
        "oom_heads_forgotten": {"linear": lin, "scores": sc / a},
        "oom_gib_not_gb": {"linear": lin * GIB_OVER_GB, "scores": sc * GIB_OVER_GB},
    }


def tp_after(result: PlanResult, old_cluster: Cluster, new_cluster: Cluster) -> dict[str, float]:
    """Drop 11's mistakes: what each gives, from `result` (the planner's step of the old layout on
    the new cluster, whose tp groups cross nodes) and the old cluster's NVLink."""
    right, tp = result.time.tp_comm, result.tp
    return {
        "tp_time_at_nvlink_speed": right * new_cluster.inter_node_bandwidth / old_cluster.intra_node_bandwidth,
        "tp_no_ring_factor": right * tp / (2 * (tp - 1)),
        "tp_forward_only": right / 2,
        "tp_all_layers": right * result.pp,
        "tp_one_micro_batch": right / result.micro_batches,
        "tp_fp32_values": right * 2,
        "tp_quarter_of_the_card": right * min(tp, new_cluster.gpus_per_node),   # members sharing a card
    }


def lever_bubbles(shapes: dict[str, tuple[int, int]], current: tuple[int, int]) -> dict[str, dict[str, float]]:
    """Drop 12's mistakes: what each gives, from each lever's (p, m) and the current (p, m)."""
    p0, m0 = current

    def each(formula: Callable[[int, int], float]) -> dict[str, float]:
        return {lever: formula(p, m) for lever, (p, m) in shapes.items()}
    return {
        "lever_overhead_not_share": each(lambda p, m: (p - 1) / m),
        "lever_m_not_updated": each(lambda p, m: (p - 1) / (m0 + p - 1)),
        "lever_percent": each(lambda p, m: 100 * (p - 1) / (m + p - 1)),
        "lever_busy_share": each(lambda p, m: 1 - (p - 1) / (m + p - 1)),
        "lever_p_not_p_minus_1": each(lambda p, m: p / (m + p - 1)),
        "lever_stages_not_updated": each(lambda p, m: (p0 - 1) / (m + p0 - 1)),
    }


def _close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def named(yours: float, right: float, mistakes: dict[str, Any], key: str | None, rel: float) -> str | None:
    """The first mistake whose value (its `key` part, where it has parts) is `yours` and not
    the right one; None if none is."""
    for name, value in mistakes.items():
        v = value if key is None else value[key]
        if _close(yours, v, rel) and not _close(v, right, rel):
            return name
    return None


def _whole(yours: Any, mistakes: dict[str, Any], parts: Sequence[str | None], rel: float) -> str | None:
    def part(value: Any, key: str | None) -> Any:
        return value if key is None else (value.get(key) if type(value) is dict else None)

    for name, value in mistakes.items():
        if all(type(part(yours, k)) in (int, float) and _close(part(yours, k), part(value, k), rel)
               for k in parts):
            return name
    return None


def verdicts(drop: str, answer: str, yours: Any, right: Any, mistakes: dict[str, Any],
             rel: float) -> list[tuple[str | None, Any, float, str | None]]:
    """[(part, yours, right, what to say or None where yours is right)] for each part of the
    answer (one, None, for a single number).

    A sealed answer's visible check sees only its form (`threeaxes.grading.visible`), so it cannot
    say what is wrong. The reveal cell, which comes after the exercise's test cell, can: it has the
    cost model's value (computed there, after the graded answer) and the pieces the value is made
    of, and each catalogued mistake is a formula over those pieces. Nothing here holds a value: the
    mistakes' sentences come from the drop's stored cases ("slips"), the numbers from the cell.

        slips.beside("drop10", "oom_terms_answer", oom_terms, right, slips.oom_terms(right, model, ...))

    Each formula is checked against the catalogue's own code for the mistake in
    tests/checks/test_slips.py, so that a mistake named here is the one the grader names.
    """
    says = load(drop)[answer].get("slips", {})
    parts = [None] if type(right) is not dict else list(right)
    whole = _whole(yours, mistakes, parts, rel)     # a mistake that gives every part as the student did
    out: list[tuple[str | None, Any, float, str | None]] = []
    for key in parts:
        mine = yours if key is None else (yours.get(key) if type(yours) is dict else None)
        want = right if key is None else right[key]
        try:
            mine = as_number(mine, answer if key is None else f"{answer}[{key!r}]")
        except AssertionError as exc:
            out.append((key, mine, want, str(exc)))
            continue
        if _close(mine, want, rel):
            out.append((key, mine, want, None))
            continue
        name = whole or named(mine, want, mistakes, key, rel)
        out.append((key, mine, want, says.get(name) if name else
                    f"{mine / want:.3g}x the cost model's and not one of the catalogued mistakes: "
                    "go through the formula above term by term" if want else "recheck the formula"))
    return out


def beside(drop: str, answer: str, yours: Any, right: Any, mistakes: dict[str, Any], *, rel: float | None = None,
           unit: str = "") -> None:
    """Print the student's value beside the cost model's, part by part, and name the catalogued
    mistake where one matches (within `rel`, by default the grader's tolerance, stored)."""
    rel = load(drop)[answer].get("rel", 0.01) if rel is None else rel
    for key, mine, want, said in verdicts(drop, answer, yours, right, mistakes, rel):
        label = "" if key is None else f"{key}: "
        shown = f"{mine:.4g}" if type(mine) in (int, float) else repr(mine)
        print(f"{label}yours {shown}{unit}, the cost model's {want:.4g}{unit}  "
              + ("✓" if said is None else f"✗ {said}"))
