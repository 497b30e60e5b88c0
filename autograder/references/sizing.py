"""Grade a student's (dp, tp, pp, ...) configuration by feasibility under the cost model
(the instructor's side: the hidden tests of drops 10 to 14).

    points = grade_configuration(my_config, SCENARIO, points=3)   # the last line of a test cell

`SCENARIO` is what `threeaxes.scenarios.scenario(...)` makes; each drop keeps its
own in its package module. The student's own tuple is evaluated
(`threeaxes.cost.judge`): an infeasible one fails with every broken rule
listed; a feasible one earns `points` times the verdict's score (full within
the margin of the best the search finds, partial otherwise). nbgrader reads a
number that a test cell ends with as that cell's score (partial credit).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from threeaxes.grading.sizing import plain_config
from threeaxes.scenarios import scenario

if TYPE_CHECKING:
    from threeaxes.cost.evaluate import PlanResult
    from threeaxes.cost.verdict import Verdict

__all__ = ["scenario", "judge_scenario", "best_in_scenario", "plain_config", "grade_configuration"]


def best_in_scenario(scenario: dict) -> PlanResult:
    """The search's fastest fitting configuration in the scenario (a PlanResult)."""
    from threeaxes.cost import best_configuration

    return best_configuration(scenario["model"], scenario["cluster"], scenario["global_batch"],
                              scenario.get("seq_len"), search_options=scenario.get("search_options"),
                              **scenario.get("assumptions", {}))


def judge_scenario(scenario: dict, config: dict, **judge_options: float) -> Verdict:
    """`threeaxes.cost.judge` of `config` in the scenario (margin, partial as options)."""
    from threeaxes.cost import judge

    return judge(scenario["model"], scenario["cluster"], scenario["global_batch"],
                 scenario.get("seq_len"), config=config,
                 search_options=scenario.get("search_options"), **judge_options,
                 **scenario.get("assumptions", {}))


def grade_configuration(answer: object, scenario: dict, points: float, name: str = "my_config",
                        margin: float = 0.10, partial: float = 0.5) -> float:
    """Judge the answer for the scenario; print the verdict; return the points it earns.

    Raises AssertionError listing every broken constraint when it is infeasible."""
    from threeaxes.cost import GB

    config = plain_config(answer, name)
    verdict = judge_scenario(scenario, config, margin=margin, partial=partial)
    if not verdict.feasible:
        raise AssertionError(f"{name} is {verdict.feedback}")
    r = verdict.result
    assert r is not None, "a feasible verdict holds its result"
    print(f"{name}: {r.label}: {r.memory.total / GB:.1f} GB per GPU, step {r.time.total:.2f} s, "
          f"{r.tokens_per_second / scenario['cluster'].n_gpus:,.0f} tokens/s per GPU")
    print(verdict.feedback)
    earned = points * verdict.score
    print(f"{earned:g} of {points:g} points" + (" (full marks)" if verdict.score == 1.0 else ""))
    return earned
