"""The graded defence of drops 13 and 14 (the instructor's side): a student's numbers for
their own configuration, and their verdict on the rivals the drop names, judged against
the cost model.

    defence.judge_numbers("drop13", SCENARIO, my_config, my_defence)
    defence.judge_rivals("drop13", SCENARIO, RIVALS, rivals)

The numbers (`numbers_reference`), for the student's `my_config` as `plan` prices it:

* `state_gb`: weights, gradients and optimizer state on one GPU (GB of 1e9 bytes),
* `activation_gb`: the activations the first pipeline stage keeps at its peak,
* `bubble`: the share of the step each stage sits idle,
* `slow_link_gb`: what one GPU sends over the links between nodes in one step: the
  pipeline's sends when its stages sit on different nodes (an activation forward and its
  gradient back per micro-batch and model chunk, 1/tp of it with sequence parallelism), and
  the data-parallel exchange when a replica group crosses nodes (ring bytes per GPU,
  Thakur et al. 2005: all-reduce 2(n-1)/n S, reduce-scatter and all-gather (n-1)/n S; by
  ZeRO stage as `threeaxes.cost.dp_exchange` prices it: stage 3 gathers the weights twice
  and scatters the gradients for every micro-batch).

The cost model prices time, not bytes, so `slow_link_bytes` counts the bytes of exactly
the transfers `threeaxes.cost.evaluate` puts on an inter-node link (`group_link`).

Tolerances (NUMBER_REL): the activations within 3% of the reference (the student's count leaves
out the embedding's few extra bytes, under 2% here), the other three within 1% (exact
counts, rounded); a rival's number within 3%. Every catalogued mistake is off by more than
twice its tolerance (tests/drops/test_defence.py checks it on each drop).

A rival's verdict is (reason, number): the first rule it breaks (a rule of
`threeaxes.cost.violations`, with the number the rule compares: query or key/value heads
per tensor-parallel rank, nodes one tensor-parallel group spans, layers per stage; a rival
that breaks several may be answered with any of them), else "memory" if it does not fit
(the GB per GPU it needs), else the step-time term that costs it most beyond compute
("slow_links", the data-parallel or pipeline traffic over the network, with its
`slow_link_gb`; "bubble", with the idle share; "tp_comm", with the GB one GPU sends a step
in tensor-parallel all-reduces).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any  # Any: a student's answer

from threeaxes.cost import GB, bytes_sent_per_gpu, plan
from threeaxes.grading.defence import KEYS, REASONS, plain_numbers, plain_rivals

# the cost model's four numbers, the rules a layout breaks and the tolerances, counted once, in the
# package: the reveal after the answers shows them (tests/drops/test_defence.py checks them by hand)
from threeaxes.grading.defence_reveal import NUMBER_REL, RIVAL_REL, broken_rules, slow_link_bytes
from threeaxes.grading.defence_reveal import numbers as numbers_reference

if TYPE_CHECKING:
    from threeaxes.cost.evaluate import PlanResult

__all__ = ["NUMBER_REL", "KEYS", "REASONS", "numbers_reference", "slow_link_bytes", "rival_reference",
           "broken_rules", "judge_numbers", "judge_rivals"]

def _plan(scenario: dict, config: dict) -> PlanResult:
    return plan(scenario["model"], scenario["cluster"], scenario["global_batch"],
                scenario.get("seq_len"), **config, **scenario.get("assumptions", {}))


def rival_reference(scenario: dict, config: dict) -> tuple:
    """(reason, number) for a rival: its first broken rule, else memory, else its costliest
    term beyond compute (tp_comm's number: GB one GPU sends in tensor-parallel all-reduces
    a step, 4 per layer and micro-batch, 2(t - 1)/t of b s h 16-bit values each)."""
    broken = broken_rules(scenario, config)
    if broken:
        return next(iter(broken.items()))
    r = _plan(scenario, config)
    if not r.fits:
        return "memory", r.memory.total / GB
    t = r.time
    terms = {"slow_links": t.dp_comm + t.pp_comm, "bubble": t.bubble, "tp_comm": t.tp_comm}
    reason = max(terms, key=terms.__getitem__)
    return reason, {"slow_links": slow_link_bytes(scenario, config) / GB,
                    "bubble": r.bubble_fraction,
                    "tp_comm": _tp_bytes(scenario, config, r.micro_batches) / GB}[reason]


def _tp_bytes(scenario: dict, config: dict, m: int) -> float:
    model, tp, pp = scenario["model"], config["tp"], config["pp"]
    seq = scenario.get("seq_len") or model.seq_len
    per_layer = 6 if config.get("recompute") == "full" else 4
    one = bytes_sent_per_gpu("all_reduce", 2 * config["micro_batch"] * seq * model.d_model, tp)
    return per_layer * model.n_layers / pp * m * one


def _close(got: float, want: float, rel: float = RIVAL_REL) -> bool:
    return math.isfinite(got) and math.isclose(got, want, rel_tol=rel, abs_tol=1e-6)


def _mistake_values(drop: str, answer: str, name: str) -> dict:
    """{mistake name: (what its code binds to `name`, what the student is told)} for the
    catalogued mistakes of the `name` part ("part": "my_defence" or "rivals" in grading.json;
    the attacks have none), the code run after the notebook lines it needs first (the drop's
    reference module's DEFENCE_SETUP)."""
    import importlib

    from autograder.cases import defined
    from autograder.references import catalogue

    setup = importlib.import_module(f"autograder.references.{drop}").DEFENCE_SETUP
    out = {}
    for m in catalogue.record(drop, answer).mistakes:
        if m.part != name:
            continue
        try:
            out[m.name] = (defined(m.code, name, setup), m.says)
        except Exception:  # noqa: BLE001 - a mistake whose cell fails binds nothing to compare
            out[m.name] = (None, m.says)
    return out


def judge_numbers(drop: str, scenario: dict, my_config: Any, my_defence: Any,
                  answer: str = "my_defence_answer") -> None:
    """AssertionError naming what is wrong in the student's numbers for their own config:
    the catalogued mistake whose cell gives the student's numbers (a mistake is named by
    its numbers alone, so it is named whatever my_config is), else which number is off."""
    from threeaxes.grading.sizing import plain_config

    config = plain_config(my_config, "my_config")
    got = plain_numbers(my_defence)
    valid = not broken_rules(scenario, config)
    want = numbers_reference(scenario, config) if valid else None
    off = [k for k in KEYS if want is None or not _close(got[k], want[k], NUMBER_REL[k])]
    if not off:
        print("my_defence: every number within its tolerance of the cost model's for my_config "
              "(activations 3%, the others 1%)")
        return
    for value, says in _mistake_values(drop, answer, "my_defence").values():
        try:
            theirs = plain_numbers(value)
        except AssertionError:
            continue
        if all(_close(got[k], theirs[k], 1e-9) for k in KEYS) and (
                want is None or any(not _close(theirs[k], want[k], NUMBER_REL[k]) for k in KEYS)):
            raise AssertionError(f"my_defence[{off[0]!r}] = {got[off[0]]:.4g}: {says}")
    if not valid:
        raise AssertionError("my_config breaks a rule of the job (its own check says which), so "
                             "it has no numbers to defend: fix my_config first")
    raise AssertionError(f"my_defence[{off[0]!r}] = {got[off[0]]:.4g} is not within {NUMBER_REL[off[0]]:.0%} of "
                         f"the cost model's figure for {config}; count it again with the formulas above")


def judge_rivals(drop: str, scenario: dict, rival_configs: dict, rivals: Any,
                 answer: str = "my_defence_answer") -> None:
    """AssertionError naming the first rival whose reason or number is wrong. A rival that
    breaks several rules may be answered with any of them, with that rule's number."""
    got = plain_rivals(rivals, list(rival_configs))
    mistakes = _mistake_values(drop, answer, "rivals")
    for key, config in rival_configs.items():
        said, value = got[key]
        broken = broken_rules(scenario, config)
        right = dict([rival_reference(scenario, config)], **broken)
        if said in right and _close(value, right[said]):
            continue
        for value_m, says in mistakes.values():
            try:
                theirs = plain_rivals(value_m, list(rival_configs))[key]
            except AssertionError:
                continue
            if theirs[0] == said and _close(theirs[1], value, 1e-9):
                raise AssertionError(f"rivals[{key!r}] = {got[key]}: {says}")
        if said not in right:
            raise AssertionError(f"rivals[{key!r}]: {said!r} is not what stops or slows {config} "
                                 "first; check the rules, then the memory, then the terms of its step")
        raise AssertionError(f"rivals[{key!r}]: the reason is right, the number {value:.4g} is not "
                             f"within {RIVAL_REL:.0%} of the cost model's")
    print(f"rivals: every reason right and every number within {RIVAL_REL:.0%}")
