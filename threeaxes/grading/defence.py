"""The visible check of the defence drops 13 and 14 grade: a student's numbers for their own
configuration (`my_defence`) and their verdict on the drop's rivals (`rivals`).

Only the form is checked here (the keys, numbers where numbers belong, a reason from the
list, a bubble between 0 and 1): the values depend on the student's own configuration and
are judged when the notebook is graded, against the cost model, by the hidden half of the
test cell (`autograder/references/defence.py`). A check that said which number is off would
let a student find each one by trial, so it says nothing about the values.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from threeaxes import progress
from threeaxes.grading import as_choice, as_number
from threeaxes.grading.shown import in_one_line

__all__ = ["KEYS", "RULES", "REASONS", "check_numbers", "check_rivals"]

KEYS = ("state_gb", "activation_gb", "bubble", "slow_link_gb")
# the rules of threeaxes.cost.violations, then what stops or slows a layout that obeys them
RULES = ("gpus", "tp_heads", "tp_kv_heads", "tp_node", "pp_layers", "zero_pp", "batch_dp",
         "micro_batch", "interleave")
REASONS = RULES + ("memory", "slow_links", "bubble", "tp_comm")


def plain_numbers(answer: Any, name: str = "my_defence") -> dict[str, float]:
    """The four numbers as plain floats, or an AssertionError saying what is expected."""
    if type(answer) is not dict or set(answer) != set(KEYS):
        got = sorted(map(str, answer)) if type(answer) is dict else type(answer).__name__
        raise AssertionError(f"{name} should be a dict with exactly the keys {list(KEYS)}; got {got}")
    numbers = {k: as_number(answer[k], f"{name}[{k!r}]") for k in KEYS}
    for key, value in numbers.items():
        if value < 0:
            raise AssertionError(f"{name}[{key!r}] = {value:g} is negative; it counts GB or a share")
    if not numbers["bubble"] < 1:
        raise AssertionError(f"{name}['bubble'] = {numbers['bubble']:g} should be the idle share "
                             "of the step, below 1: (p - 1) / (m + p - 1)")
    return numbers


def plain_rivals(answer: Any, names: Iterable[str], name: str = "rivals") -> dict[str, tuple[str, float]]:
    """{rival: (reason, number)} as plain values, or an AssertionError saying what is expected."""
    if type(answer) is not dict or set(answer) != set(names):
        raise AssertionError(f"{name} should be a dict with exactly the keys {list(names)}")
    out: dict[str, tuple[str, float]] = {}
    for key in names:
        pair = answer[key]
        if type(pair) not in (tuple, list) or len(pair) != 2:
            raise AssertionError(f"{name}[{key!r}] should be a pair (reason, number), such as "
                                 "('memory', 95.0)")
        out[key] = (as_choice(pair[0], REASONS, f"{name}[{key!r}][0]"),
                    as_number(pair[1], f"{name}[{key!r}][1]"))
    return out


@in_one_line
@progress.recorded(form_only=True)
def check_numbers(drop: str, answer: str, my_defence: Any, part: str = "numbers") -> None:
    """The form of `my_defence`; its values are judged when the notebook is graded. `part`
    names what the student's progress records (the answer cell binds two values)."""
    plain_numbers(my_defence)
    print("my_defence has the form it should have; its numbers are compared with the cost "
          "model's for your my_config when your notebook is graded")


@in_one_line
@progress.recorded(form_only=True)
def check_rivals(drop: str, answer: str, rivals: Any, names: Iterable[str], part: str = "rivals") -> None:
    """The form of `rivals`; the reasons and numbers are judged when the notebook is graded."""
    plain_rivals(rivals, list(names))
    print("rivals has the form it should have; each reason and number is checked when your "
          "notebook is graded")
