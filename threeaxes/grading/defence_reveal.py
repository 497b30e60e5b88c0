"""The reveal of drops 13 and 14's defence: the student's numbers for their own `my_config`
and their verdict on the rivals, beside the cost model's, with what is off named."""
from __future__ import annotations

import math
from typing import Any

from threeaxes.cost import GB, bytes_sent_per_gpu, group_inside_node, plan, violations
from threeaxes.cost.evaluate import PlanResult
from threeaxes.grading.defence import KEYS
from threeaxes.grading.slips import GIB_OVER_GB

# the grader's tolerances: activations within 3%, the other numbers 1%, a rival's number 3%
NUMBER_REL = {"state_gb": 0.01, "activation_gb": 0.03, "bubble": 0.01, "slow_link_gb": 0.01}
RIVAL_REL = 0.03


def _plan(scenario: dict[str, Any], config: dict[str, Any]) -> PlanResult:
    return plan(scenario["model"], scenario["cluster"], scenario["global_batch"],
                scenario.get("seq_len"), **config, **scenario.get("assumptions", {}))


def slow_link_bytes(scenario: dict[str, Any], config: dict[str, Any]) -> float:
    """Bytes one GPU sends over inter-node links in one step: the pipeline's sends where its
    stages sit on different nodes, a replica group's exchange where it crosses nodes."""
    model, cluster = scenario["model"], scenario["cluster"]
    dp, tp, pp, b = (config[k] for k in ("dp", "tp", "pp", "micro_batch"))
    zero, v = config.get("zero_stage", 0), config.get("virtual_stages", 1)
    sp = config.get("sequence_parallel", False)
    m = scenario["global_batch"] // (dp * b)
    seq = scenario.get("seq_len") or model.seq_len
    total = 0.0
    if pp > 1 and not group_inside_node(tp * dp, pp, cluster.gpus_per_node):
        total += 2 * v * m * 2 * b * seq * model.d_model / (tp if sp else 1)    # forward and back
    if dp > 1 and not group_inside_node(tp, dp, cluster.gpus_per_node):
        weights = 2 * model.n_params / (tp * pp)
        rs, ag = (bytes_sent_per_gpu(op, weights, dp) for op in ("reduce_scatter", "all_gather"))
        total += {0: bytes_sent_per_gpu("all_reduce", weights, dp), 1: rs + ag,
                  2: m * rs + ag, 3: m * (rs + 2 * ag)}[zero]
    return total


def numbers(scenario: dict[str, Any], config: dict[str, Any]) -> dict[str, float]:
    """The cost model's four numbers for a configuration that follows the rules."""
    r = _plan(scenario, config)
    mem = r.memory
    return {"state_gb": (mem.params + mem.grads + mem.optimizer) / GB, "activation_gb": mem.activations / GB,
            "bubble": r.bubble_fraction, "slow_link_gb": slow_link_bytes(scenario, config) / GB}


def broken_rules(scenario: dict[str, Any], config: dict[str, Any]) -> dict[str, float]:
    """{rule: the number it compares} for each rule of `violations` the layout breaks."""
    model, cluster, tp = scenario["model"], scenario["cluster"], config["tp"]
    rules = {k: v for k, v in config.items() if k != "sequence_parallel"}
    flags = {k: v for k, v in scenario.get("assumptions", {}).items()
             if k in ("allow_tp_across_nodes", "allow_sharded_pp")}
    compared = {"tp_heads": model.n_heads / tp, "tp_kv_heads": model.kv_heads / tp,
                "tp_node": tp / cluster.gpus_per_node, "pp_layers": model.n_layers / config["pp"]}
    return {v.rule: compared.get(v.rule, float(tp * config["pp"] * config["dp"]))
            for v in violations(model, cluster, scenario["global_batch"], **rules, **flags)}


def rival(scenario: dict[str, Any], config: dict[str, Any]) -> dict[str, float]:
    """{reason: number} the grader accepts for a rival: each rule it breaks, else memory, else
    the costliest term of its step beyond compute."""
    broken = broken_rules(scenario, config)
    if broken:
        return broken
    r = _plan(scenario, config)
    if not r.fits:
        return {"memory": r.memory.total / GB}
    t, model = r.time, scenario["model"]
    terms = {"slow_links": t.dp_comm + t.pp_comm, "bubble": t.bubble, "tp_comm": t.tp_comm}
    reason = max(terms, key=terms.__getitem__)
    seq = scenario.get("seq_len") or model.seq_len
    one = bytes_sent_per_gpu("all_reduce", 2 * config["micro_batch"] * seq * model.d_model, config["tp"])
    tp_bytes = (6 if config.get("recompute") == "full" else 4) * model.n_layers / config["pp"] * r.micro_batches * one
    return {reason: {"slow_links": slow_link_bytes(scenario, config) / GB, "bubble": r.bubble_fraction,
                     "tp_comm": tp_bytes / GB}[reason]}


def _close(a: float, b: float, rel: float) -> bool:
    return math.isfinite(a) and math.isclose(a, b, rel_tol=rel, abs_tol=1e-6)


def what_is_off(key: str, got: float, want: float, config: dict[str, Any]) -> str:
    """A number's usual slips, told by how it relates to the cost model's; else the factor.

    It runs in the reveal, after the defence's test cells, where the planner may be called. The
    cost model's figures are counted here as the grader counts them (`autograder/references/
    defence.py`; tests/checks/test_defence_reveal.py keeps the two equal); the visible check before the
    graded answer sees only the form (`threeaxes.grading.defence`).

        defence_reveal.beside(SCENARIO, my_config, my_defence, drop13.RIVALS, rivals)
    """
    p, tp, dp = config["pp"], config["tp"], config["dp"]
    m = None
    if want and _close(got, want * GIB_OVER_GB, NUMBER_REL[key]):
        return "that is GiB (2^30 bytes); give GB, 10^9 bytes"
    if key == "bubble":
        m = (p - 1) * (1 - want) / want if want else None
        if _close(got, 100 * want, 0.01):
            return "give a fraction of the step (0.25 for 25%), not a percentage"
        if _close(got, 1 - want, 0.01):
            return "that is the busy share; the bubble is the idle share, (p - 1)/(m + p - 1)"
        if m and _close(got, (p - 1) / m, 0.01):
            return "that is idle over busy time, (p - 1)/m; the share of the step is (p - 1)/(m + p - 1)"
    if key == "activation_gb" and p > 1 and _close(got, want / p, 0.03):
        return "that is one micro-batch's; under 1F1B the first stage holds p of them, each for its L/p layers"
    if key == "activation_gb" and p > 1 and _close(got, want * p, 0.03):
        return "each of the p micro-batches the first stage holds covers its L/p layers, not all L"
    if key in ("state_gb", "activation_gb") and tp > 1 and _close(got, want * tp, 0.03):
        return f"not divided by tp = {tp}: each tensor-parallel rank keeps its share"
    if key == "state_gb" and dp > 1 and config.get("zero_stage", 0) and not _close(got, want, 0.01):
        return (f"{got / want:.3g}x the cost model's: ZeRO-{config['zero_stage']} shards its part of the "
                f"16 bytes a parameter over dp = {dp}")
    if key == "slow_link_gb" and (want == 0) != (got == 0):
        return ("nothing of this layout crosses nodes: every group it exchanges in sits in a node" if want == 0
                else "something does cross nodes: check which groups span more than one node (ranks tp, dp, pp)")
    return f"{got / want:.3g}x the cost model's" if want else "the cost model's is 0"


def beside(scenario: dict[str, Any], my_config: dict[str, Any], my_defence: Any,
           rival_configs: dict[str, dict[str, Any]], rivals: Any) -> None:
    """Print the student's defence beside the cost model's, each number and each rival marked
    ✓ within the grader's tolerance, or ✗ with what is off; an answer of the wrong form is
    said, not raised (the reveal is no check)."""
    try:
        _beside(scenario, my_config, my_defence, rival_configs, rivals)
    except AssertionError as exc:
        print(f"✗ {exc}")


def _beside(scenario: dict[str, Any], my_config: dict[str, Any], my_defence: Any,
            rival_configs: dict[str, dict[str, Any]], rivals: Any) -> None:
    from threeaxes.grading import as_number
    from threeaxes.grading.defence import plain_rivals

    if type(my_defence) is not dict or set(my_defence) != set(KEYS):
        print(f"my_defence should be a dict with exactly the keys {list(KEYS)}")
    elif broken_rules(scenario, my_config):
        print(f"my_config breaks {', '.join(broken_rules(scenario, my_config))}: no numbers to compare")
    else:
        want = numbers(scenario, my_config)
        got = {k: as_number(my_defence[k], f"my_defence[{k!r}]") for k in KEYS}   # a percentage too
        for key in KEYS:
            ok = _close(got[key], want[key], NUMBER_REL[key])
            print(f"{key:14s} yours {got[key]:9.4g}, the cost model's {want[key]:9.4g}  "
                  + ("✓" if ok else f"✗ {what_is_off(key, got[key], want[key], my_config)}"))
    got_r = plain_rivals(rivals, list(rival_configs))
    for key, config in rival_configs.items():
        (said, value), right = got_r[key], rival(scenario, config)
        first, number = next(iter(right.items()))
        if said in right and _close(value, right[said], RIVAL_REL):
            verdict = "✓"
        elif said in right:
            verdict = (f"✗ the reason is right; {value:.4g} is {value / right[said]:.3g}x the cost model's "
                       f"{right[said]:.4g}")
        else:
            verdict = f"✗ the cost model says {first!r} first, with {number:.4g}"
        print(f"rival {key}: yours ({said!r}, {value:.4g})  {verdict}")
