"""The practice set beyond the three axes: the optional drops after drop 14 and the case of
self-check q8 (which axis to trade eight replicas for at 64K tokens), judged by the cost model."""
from __future__ import annotations

from typing import Any

from .cost import get_cluster, get_model, plan
from .cost.planner import PlanResult

__all__ = ["BEYOND_DROPS", "LONG_CASE", "TRADES", "long_case_plans", "q8_answer"]

# the optional drops after drop 14 (their titles and minutes: threeaxes.course.COURSE_MAP)
BEYOND_DROPS = (
    ("drop15-context-parallel", "cp: each sequence split over ranks; ring attention and "
                                "Ulysses' all-to-all on the toy"),
    ("drop16-expert-parallel", "ep: a mixture of experts' experts split over ranks; tokens "
                               "dispatched and combined with all-to-all on the toy"),
)

# q8's case: Llama-2 70B at 64K tokens on 64 H100s, tp = 8 with sequence parallelism and
# ZeRO-1, eight data-parallel replicas; each candidate trades the replicas for 8 of its axis
LONG_CASE: dict[str, Any] = dict(model="70B", gpu="h100-80gb", n_gpus=64, global_batch=32, seq_len=65536,
                 layout=dict(dp=8, tp=8, pp=1, micro_batch=1, zero_stage=1,
                             sequence_parallel=True))
TRADES: dict[str, dict[str, int]] = {"dp": {}, "cp": dict(dp=1, cp=8), "pp": dict(dp=1, pp=8), "tp": dict(dp=1, tp=64),
           "ep": dict(ep=8)}


def long_case_plans() -> dict:
    """q8's case under each candidate axis: {axis: PlanResult, or the planner's refusal
    (its ValueError's message) when the rules forbid it}."""
    c = LONG_CASE
    model, cluster = get_model(c["model"]), get_cluster(c["gpu"], n_gpus=c["n_gpus"])
    out: dict[str, PlanResult | str] = {}
    for axis, trade in TRADES.items():
        try:
            out[axis] = plan(model, cluster, c["global_batch"], c["seq_len"],
                             **{**c["layout"], **trade})
        except ValueError as refused:
            out[axis] = str(refused)
    return out


def q8_answer() -> str:
    """The one axis whose trade makes q8's case fit, by the cost model."""
    fitting = [axis for axis, r in long_case_plans().items() if not isinstance(r, str) and r.fits]
    if len(fitting) != 1:
        raise RuntimeError(f"q8 needs exactly one axis that makes the case fit, the cost model "
                           f"gives {fitting}: choose another case")
    return fitting[0]
