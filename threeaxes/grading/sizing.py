"""Sizing configurations as plain values, on the student's side."""
from __future__ import annotations

from typing import Any

from threeaxes.grading import as_choice, as_int

__all__ = ["plain_config", "INT_KEYS", "RECOMPUTE_CHOICES"]

INT_KEYS = ("dp", "tp", "pp", "micro_batch", "micro_batches", "zero_stage", "virtual_stages")
RECOMPUTE_CHOICES = ("none", "selective", "full")


def plain_config(answer: Any, name: str = "my_config") -> dict[str, Any]:
    """The answer as a dict of plain values, or an AssertionError that says what to fix.

    `plain_config(answer)` turns a student's configuration into a dict of plain
    values, or fails saying what is expected. The scenarios a configuration is
    judged in are `threeaxes.scenarios` (each drop's `SCENARIO`, made by
    `threeaxes.scenarios.scenario`).

    What judges a configuration against the best a search finds
    (`judge_scenario`, `grade_configuration`) is on the instructor's side, in
    `autograder/references/sizing.py`; the visible check of a configuration is
    `threeaxes.grading.visible_config`.
    """
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
    plain: dict[str, Any] = {}
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
