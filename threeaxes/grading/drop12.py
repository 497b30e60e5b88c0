"""Drop 12 on the student's side: how a check asks the `bubble(p, m, v)` answer, where a
refusal counts only when its ValueError names the interleaving rule (m a multiple of p).

The visible check (`visible.check("drop12", "bubble_answer", ...)`) and the hidden test
(`autograder/references/drop12.py`) both read the answer through `value_or_refusal`. The
scenario the notebook sizes is `threeaxes.scenarios.drop12`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threeaxes.grading import REFUSED, as_number

__all__ = ["REFUSED", "BARE_REFUSAL", "UNNAMED_REFUSAL", "names_the_rule", "value_or_refusal"]

BARE_REFUSAL = "raises ValueError without a message"
UNNAMED_REFUSAL = "raises ValueError whose message does not name the rule"
# the words a message uses when it names the rule "m must be a multiple of p" (or its group of p)
RULE_WORDS = ("multiple", "divis", "divide", "%", "group")


def names_the_rule(message: str) -> bool:
    """Whether a ValueError's message names the interleaving rule (m a multiple of p), in
    any of the usual words: a multiple, divisible, divides, m % p, groups of p."""
    return any(word in message.lower() for word in RULE_WORDS)


def value_or_refusal(bubble: Callable[[int, int, int], Any], p: int, m: int, v: int) -> float | str:
    """What `bubble(p, m, v)` answers, as a plain value: the number, or `REFUSED` when it
    raises ValueError naming the rule (`BARE_REFUSAL` when it says nothing, `UNNAMED_REFUSAL`
    when its message does not name the rule). Any other error,
    or an answer that is not a number, fails naming the call."""
    call = f"bubble({p}, {m}, {v})"
    try:
        value = bubble(p, m, v)
    except ValueError as error:
        message = str(error).strip()
        return BARE_REFUSAL if not message else REFUSED if names_the_rule(message) else UNNAMED_REFUSAL
    except Exception as error:  # noqa: BLE001 - the student's error, reported with its input
        raise AssertionError(f"{call} raised {type(error).__name__}: {error}") from None
    return as_number(value, call)
