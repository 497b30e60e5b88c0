"""References for drop 15 (context parallelism: the bytes one rank sends).

One exercise, `cp_bytes_per_rank(method, b, s, h, cp, bytes_per_value)`: the bytes
one cp rank sends for one attention layer in one training step, forward and
backward, under ring attention ("ring") or DeepSpeed-Ulysses ("all_to_all").
`expected_cp_bytes` takes the answer from the cost model the planner uses,
`threeaxes.cost.context.context_parallel_bytes` (tests/axes/test_context_parallel.py
holds it equal to the traced bytes of real runs); `draw_cp_bytes_cases` draws the
hidden cases, a toy-sized and a model-sized layer under each way.
"""
from __future__ import annotations

import random

from threeaxes.cost.context import context_parallel_bytes

__all__ = ["expected_cp_bytes", "draw_cp_bytes_cases"]


def expected_cp_bytes(method: str, b: int, s: int, h: int, cp: int, bytes_per_value: float) -> float:
    """Bytes one rank sends for one attention layer, forward + backward."""
    return context_parallel_bytes(s, b, h, cp, mode=method, dtype_bytes=bytes_per_value).total


def draw_cp_bytes_cases(rng: random.Random) -> list[tuple]:
    """Arguments (method, b, s, h, cp, bytes_per_value) for the hidden test, drawn with `rng`:
    s a multiple of 2 cp (the load-balanced split), a toy-sized and a model-sized layer, each
    under both ways."""
    cases: list[tuple] = []
    for small in (True, False):
        cp = rng.choice([2, 3, 4]) if small else rng.choice([2, 4, 8, 16])
        s = 2 * cp * (rng.randint(1, 8) if small else rng.randint(64, 1024))
        b = rng.randint(1, 4) if small else rng.randint(1, 8)
        h = 32 * rng.randint(1, 4) if small else 128 * rng.randint(8, 64)
        element = rng.choice([8, 4]) if small else rng.choice([2, 4])
        cases += [("ring", b, s, h, cp, element), ("all_to_all", b, s, h, cp, element)]
    return cases
