"""Grade a student's (dp, tp, pp, ...) configuration by feasibility under the cost model.

    points = grade_configuration(my_config, SCENARIO, points=3)   # the last line of a test cell

`SCENARIO` is what `scenario(...)` makes: model, cluster, global batch,
sequence length, the planner's assumptions and what limits the search only;
each drop keeps its own in its grading module. The student's own tuple is evaluated
(`threeaxes.cost.judge`): an infeasible one fails with every broken rule
listed; a feasible one earns `points` times the verdict's score (full within
the margin of the best the search finds, partial otherwise). nbgrader reads a
number that a test cell ends with as that cell's score (partial credit).
"""
from __future__ import annotations

from threeaxes.grading import as_choice, as_int

__all__ = ["scenario", "judge_scenario", "plain_config", "grade_configuration"]

INT_KEYS = ("dp", "tp", "pp", "micro_batch", "micro_batches", "zero_stage", "virtual_stages")
RECOMPUTE_CHOICES = ("none", "selective", "full")


def scenario(model, cluster, global_batch: int, seq_len: int | None = None, *,
             assumptions: dict | None = None, search_options: dict | None = None) -> dict:
    """A sizing scenario, as a dict the notebooks can unpack: the planner's
    `assumptions` (e.g. {"usable_memory_fraction": 0.9}) go to plan and search
    alike, `search_options` (e.g. {"micro_batch_sizes": (1,)}) to the search only."""
    return {"model": model, "cluster": cluster, "global_batch": global_batch, "seq_len": seq_len,
            "assumptions": dict(assumptions or {}), "search_options": search_options}


def judge_scenario(scenario: dict, config: dict, **judge_options):
    """`threeaxes.cost.judge` of `config` in the scenario (margin, partial as options)."""
    from threeaxes.cost import judge

    return judge(scenario["model"], scenario["cluster"], scenario["global_batch"],
                 scenario.get("seq_len"), config=config,
                 search_options=scenario.get("search_options"), **judge_options,
                 **scenario.get("assumptions", {}))


def plain_config(answer, name: str = "my_config") -> dict:
    """The answer as a dict of plain values, or an AssertionError that says what to fix."""
    from threeaxes.cost import CONFIG_KEYS

    if type(answer) is not dict:
        raise AssertionError(f"{name} should be a dict such as {{'dp': 4, 'tp': 8, 'pp': 1, "
                             f"'micro_batch': 1, 'zero_stage': 1, 'recompute': 'none'}}; "
                             f"got {type(answer).__name__}")
    unknown = sorted(k for k in answer if k not in CONFIG_KEYS)
    if unknown:
        raise AssertionError(f"{name} has keys {unknown}; use only {list(CONFIG_KEYS)}")
    missing = [k for k in ("dp", "tp", "pp") if k not in answer]
    if missing or ("micro_batch" not in answer and "micro_batches" not in answer):
        raise AssertionError(f"{name} needs dp, tp, pp and micro_batch (or micro_batches); "
                             f"missing {missing or ['micro_batch']}")
    plain = {}
    for key, value in answer.items():
        if key in INT_KEYS:
            plain[key] = as_int(value, f"{name}[{key!r}]")
        elif key == "recompute":
            plain[key] = as_choice(value, RECOMPUTE_CHOICES, f"{name}['recompute']")
        else:   # sequence_parallel
            if type(value) is not bool:
                raise AssertionError(f"{name}['sequence_parallel'] should be True or False")
            plain[key] = value
    for key in ("dp", "tp", "pp", "micro_batch", "micro_batches", "virtual_stages"):
        if key in plain and plain[key] < 1:
            raise AssertionError(f"{name}[{key!r}]={plain[key]} should be a whole number >= 1")
    return plain


def grade_configuration(answer, scenario: dict, points: float, name: str = "my_config",
                        margin: float = 0.10, partial: float = 0.5) -> float:
    """Judge the answer for the scenario; print the verdict; return the points it earns.

    Raises AssertionError listing every broken constraint when it is infeasible."""
    from threeaxes.cost import GB

    config = plain_config(answer, name)
    verdict = judge_scenario(scenario, config, margin=margin, partial=partial)
    if not verdict.feasible:
        raise AssertionError(f"{name} is {verdict.feedback}")
    r = verdict.result
    print(f"{name}: {r.label}: {r.memory.total / GB:.1f} GB per GPU, step {r.time.total:.2f} s, "
          f"{r.tokens_per_second / scenario['cluster'].n_gpus:,.0f} tokens/s per GPU")
    print(verdict.feedback)
    earned = points * verdict.score
    print(f"{earned:g} of {points:g} points" + (" (full marks)" if verdict.score == 1.0 else ""))
    return earned
