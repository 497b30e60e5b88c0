"""The visible check of a configuration exercise (drops 10 to 14: `fix_config`,
`new_layout`, `my_config`)."""
from __future__ import annotations

import importlib
import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from threeaxes import progress
from threeaxes.grading.shown import in_one_line
from threeaxes.grading.sizing import plain_config
from threeaxes.grading.visible import CASES

if TYPE_CHECKING:  # for the hints only: the cost model is imported where it is used
    from threeaxes.cost.evaluate import PlanResult

__all__ = ["load", "evaluate", "diagnose", "check", "DEFAULTS", "PRINTED_ONLY"]

# the values `plan` assumes for what a configuration leaves out
DEFAULTS = {"zero_stage": 0, "recompute": "none", "virtual_stages": 1, "sequence_parallel": False}
PRINTED_ONLY = ("slow", "bubble", "micro_batch_fixed")   # cost part of the points, or another cell's
# what a printed-only rule earns the layout when the notebook is graded
COSTS = {"slow": "half marks when graded{points}: full marks need a step within {margin:.0%} of the fastest",
         "bubble": "the test cell that grades the bubble target scores 0 for it when graded",
         "micro_batch_fixed": "the test cell that grades the scenario's micro-batch scores 0 for it when graded"}


def load(drop: str) -> dict[str, Any]:
    return json.loads((CASES / f"{drop}.config.json").read_text())


def _scenario(path: str) -> dict[str, Any]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _micro_batch_kept(spec: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, str]]:
    """[("micro_batch_fixed", what is wrong)] when the scenario fixes the micro-batch and the
    config changes it, naming the micro-batch and what it does to m; else []."""
    fixed, b = spec.get("micro_batch"), config.get("micro_batch")
    if not fixed or b == fixed:
        return []
    return [("micro_batch_fixed", f"micro-batches of {b} sequences, where the scenario keeps {fixed}")]


def evaluate(spec: dict[str, Any], config: dict[str, Any]) -> tuple[list[tuple[str, str]], PlanResult | None]:
    """(broken rules as [(rule, library message)], plan's result or None) for a plain config.
    Every broken rule is listed, the most important first: the rules that stop the layout
    from running at all (`violations`), then a micro-batch the scenario fixes, then memory,
    then the scenario's bubble target, then the step time."""
    from threeaxes.cost import GB, plan, violations

    s = _scenario(spec["scenario"])
    flags = {k: s["assumptions"].get(k, False) for k in ("allow_tp_across_nodes", "allow_sharded_pp")}
    flags["interleave"] = s["assumptions"].get("interleave", "flexible")
    rules = {k: v for k, v in config.items() if k != "sequence_parallel"}
    broken = [(v.rule, v.message) for v in violations(s["model"], s["cluster"], s["global_batch"],
                                                      **rules, **flags, suggest_flags=False)]
    if broken:
        return broken + _micro_batch_kept(spec, config), None
    r = plan(s["model"], s["cluster"], s["global_batch"], s.get("seq_len"), **config, **s["assumptions"])
    broken += _micro_batch_kept(spec, config)
    if not r.fits:
        broken.append(("memory", f"needs {r.memory.total / GB:.1f} GB per GPU (parameters "
                                 f"{r.memory.params / GB:.1f}, gradients {r.memory.grads / GB:.1f}, "
                                 f"optimizer {r.memory.optimizer / GB:.1f}, activations "
                                 f"{r.memory.activations / GB:.1f}); a GPU holds {r.capacity / GB:.1f} GB"))
        return broken, r
    if spec.get("bubble_target") is not None and not r.bubble_fraction < spec["bubble_target"]:
        # m = B / (dp x micro_batch): the message shows which of the two set it
        broken.append(("bubble", f"m = {s['global_batch']} / (dp={r.dp} x micro_batch={r.micro_batch}) "
                                 f"= {r.micro_batches} micro-batches on p={r.pp} stages, "
                                 f"v={r.virtual_stages}, idles {r.bubble_fraction:.1%} of the step, "
                                 f"not under {spec['bubble_target']:.0%}"))
    slowdown = r.time.total / spec["best_step_s"]
    if slowdown > 1 + spec["margin"]:
        broken.append(("slow", f"{slowdown:.2f}x the fastest"))
    return broken, r


def _matches(mistake: dict[str, Any], config: dict[str, Any]) -> bool:
    full = {**DEFAULTS, **config}
    return all(full.get(k) == v for k, v in (mistake.get("when") or {}).items())


def diagnose(spec: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """[(rule, mistake name or None, what to tell the student)] for every rule the plain
    config breaks; the most specific catalogued mistake of each rule is named."""
    broken, _ = evaluate(spec, config)
    found = []
    for rule, message in broken:
        fitting = sorted((m for m in spec["mistakes"] if m["rule"] == rule and _matches(m, config)),
                         key=lambda m: -len(m.get("when") or {}))
        if fitting:
            found.append((rule, fitting[0]["name"], f"{fitting[0]['says']} ({message})"))
        else:
            found.append((rule, None, message))
    return found


@in_one_line
@progress.recorded
def check(drop: str, answer: str, config: Any, fail_on: Collection[str] = (), points: float | None = None) -> None:
    """Fail naming each rule the configuration breaks; print what plan says of it, and
    whether it is slower than full marks allow (the points are the hidden test's to give).
    `fail_on`: rules of PRINTED_ONLY that this test cell's points hang on (drop 12's
    bubble target and micro-batch), which then fail too. `points`: what the test cell is worth,
    for the line that says what a slower layout earns.

    There is no single right configuration: any layout that follows the rules,
    fits in memory and runs near the fastest one scores in full. So this check
    evaluates the student's own dict with the library's public `plan` (which
    students may call too) in the drop's scenario, and compares it with data
    computed once on the instructor's side by the search
    (`python -m autograder.apps.config_cases`, stored in
    `threeaxes/grading/cases/dropNN.config.json`): the fastest fitting layout's
    step time, and the margin within which a layout earns full marks. The best
    layout itself is not stored. The hidden test judges again with the search.

    A stored exercise:

        {"name": "fix_config",                          # the variable the answer binds
         "scenario": "threeaxes.scenarios.drop10.SCENARIO",
         "best_step_s": 4.3, "margin": 0.1,
         "micro_batch": null | 1,                       # a micro-batch size the scenario fixes
         "bubble_target": null | 0.25,                  # an idle share the layout must stay under
         "mistakes": [{"name", "rule", "when", "says"}],
         "passed": "..."}

    Each catalogued mistake breaks one rule: one of `threeaxes.cost.violations`'
    ("gpus", "tp_heads", "tp_kv_heads", "tp_node", "pp_layers", "zero_pp",
    "batch_dp", "micro_batch", "interleave"), or "memory" (does not fit), or
    "micro_batch_fixed", "bubble" (the scenario's own targets), or "slow" (fits,
    more than the margin slower than the best). `when` (optional) narrows it to
    configurations holding those values, e.g. the very layout that crashed. A
    broken rule fails the check naming each mistake it matches; "slow",
    "bubble" and "micro_batch_fixed" only print (a slow layout loses part of the
    points, not all, and the scenario's own targets are another test cell's:
    that cell passes them in `fail_on`).
    """
    from threeaxes.cost import GB

    spec = load(drop)[answer]
    name = spec["name"]
    config = plain_config(config, name)
    found = diagnose(spec, config)
    failing = [said for rule, _, said in found if rule not in PRINTED_ONLY or rule in fail_on]
    if failing:
        raise AssertionError(f"{name} = {config}:\n" + "\n".join(f"- {said}" for said in failing))
    _, r = evaluate(spec, config)      # it follows the rules and fits: plan has its figures
    assert r is not None               # a rule of `violations` (no plan) failed above: none is PRINTED_ONLY
    print(f"{name}: {r.label}: {r.memory.total / GB:.1f} GB per GPU of {r.capacity / GB:.1f}, "
          f"step {r.time.total:.2f} s, {r.time.total / spec['best_step_s']:.2f}x the fastest "
          f"layout the search found")
    for rule, _, said in found:      # what each costs when graded, and the part it costs
        earns = f" ({points / 2:g} of {points:g} points)" if points else ""
        print(f"{name}: ✗ {said}: {COSTS[rule].format(points=earns, margin=spec['margin'])}")
    if not found:
        print(spec["passed"])
