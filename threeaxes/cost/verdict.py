"""The cost model as a grader: judge one configuration against the best a search finds.

    verdict = judge(get_model("30B"), get_cluster("a100", n_nodes=4), 512,
                    config=dict(dp=4, tp=8, pp=1, micro_batch=1, zero_stage=1))
    verdict.score       # 0.0 infeasible, `partial` when it fits, 1.0 when near the best
    verdict.feedback    # every reason, in words"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from .constraints import Violation, violations
from .memory import GB
from .planner import PlanResult, plan, search

if TYPE_CHECKING:
    from .presets import Cluster, Model

__all__ = ["CONFIG_KEYS", "Verdict", "judge", "best_configuration"]

# what a configuration is made of: the keyword arguments of `plan` a student chooses
CONFIG_KEYS = ("dp", "tp", "pp", "micro_batch", "micro_batches", "zero_stage", "recompute",
               "virtual_stages", "sequence_parallel")
RULE_KEYS = ("dp", "tp", "pp", "micro_batch", "micro_batches", "zero_stage", "recompute",
             "virtual_stages")


class Verdict(NamedTuple):
    score: float                 # 0.0, `partial` or 1.0
    feasible: bool
    violations: list             # every broken rule, and "memory" when it does not fit
    result: PlanResult | None    # the configuration's evaluation (None when a rule is broken)
    best: PlanResult             # the fastest fitting configuration the search found
    slowdown: float              # step time / the best's (inf when infeasible)
    feedback: str


@functools.lru_cache(maxsize=64)
def _best(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None,
          assumptions: tuple[tuple[str, Any], ...], options: tuple[tuple[str, Any], ...]) -> PlanResult:
    found = search(model, cluster, global_batch, seq_len, only_fitting=True, top=1,
                   **dict(assumptions), **dict(options))
    if not found:
        raise ValueError(f"no configuration of {model.name} fits on {cluster}; the scenario needs "
                         f"more GPUs or GPU memory")
    return found[0]


def best_configuration(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *,
                       search_options: dict | None = None, **assumptions: Any) -> PlanResult:
    """The search's fastest fitting configuration (cached per scenario). `search_options`
    go to `search` only, e.g. {"micro_batch_sizes": (1,)} when the scenario fixes them."""
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in (search_options or {}).items()}
    return _best(model, cluster, global_batch, seq_len, tuple(sorted(assumptions.items())),
                 tuple(sorted(options.items())))


def _memory_violation(result: PlanResult) -> Violation:
    m = result.memory
    return Violation("memory", (
        f"needs {m.total / GB:.1f} GB per GPU (parameters {m.params / GB:.1f}, gradients "
        f"{m.grads / GB:.1f}, optimizer {m.optimizer / GB:.1f}, activations {m.activations / GB:.1f}) "
        f"but a GPU holds {result.capacity / GB:.1f} GB; shard more (zero_stage, tp, pp), "
        f"recompute activations, or use smaller micro-batches"))


def judge(model: Model, cluster: Cluster, global_batch: int, seq_len: int | None = None, *, config: dict,
          margin: float = 0.10, partial: float = 0.5, search_options: dict | None = None,
          **assumptions: Any) -> Verdict:
    """Score `config` (a dict of `CONFIG_KEYS`) for the scenario (model, cluster, global
    batch, sequence length, and the planner's `assumptions`, passed to plan and search alike;
    `search_options` limit the search only, e.g. to the micro-batch sizes a scenario allows).

    0.0 when infeasible; `partial` when it fits but its predicted step time is more
    than (1 + margin) times the best's; 1.0 within the margin.

    Feasible means: no rule broken (`constraints.violations`) and the memory per
    GPU within the GPU's (`plan(...).fits`; a "memory" violation otherwise). The
    student's own configuration is what is evaluated; any feasible tuple whose
    predicted step time is within `margin` of the search's best scores in full,
    so there is never one right answer.
    """
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"config has {unknown}; a configuration is made of {list(CONFIG_KEYS)}")
    if not 0 <= partial <= 1 or margin < 0:
        raise ValueError(f"partial={partial} must be in [0, 1] and margin={margin} >= 0")
    best = best_configuration(model, cluster, global_batch, seq_len, search_options=search_options,
                              **assumptions)
    rules = {k: config[k] for k in RULE_KEYS if k in config}
    broken = violations(model, cluster, global_batch, **rules,
                        allow_tp_across_nodes=assumptions.get("allow_tp_across_nodes", False),
                        allow_sharded_pp=assumptions.get("allow_sharded_pp", False),
                        interleave=assumptions.get("interleave", "flexible"),
                        suggest_flags=False)
    result = None
    if not broken:
        result = plan(model, cluster, global_batch, seq_len, **config, **assumptions)
        if not result.fits:
            broken = [_memory_violation(result)]
    if broken:
        reasons = "\n".join(f"- {v.message}" for v in broken)
        return Verdict(0.0, False, broken, result, best, math.inf,
                       f"not feasible ({len(broken)} problem{'s' if len(broken) > 1 else ''}):\n{reasons}")
    assert result is not None   # planned whenever no rule is broken
    slowdown = result.time.total / best.time.total
    near = slowdown <= 1 + margin
    feedback = (f"fits ({result.memory.total / GB:.1f} GB per GPU); predicted step {result.time.total:.2f} s, "
                f"{slowdown:.2f}x the best found ({best.label}: {best.time.total:.2f} s)"
                + ("" if near else f"; within {margin:.0%} of it earns full marks"))
    return Verdict(1.0 if near else partial, True, [], result, best, slowdown, feedback)
