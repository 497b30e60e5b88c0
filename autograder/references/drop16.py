"""References for drop 16 (expert parallelism: the all-to-alls of one MoE layer).

One exercise: `moe_bytes_per_layer(tokens, d_model, n_experts, top_k, capacity_factor, ep,
bytes_per_element)`, the bytes one ep rank sends for one MoE layer's all-to-alls in one
training step. `expected_moe_bytes` takes it from `threeaxes.expert_parallel.traffic`
(tested against the trace of real runs in tests/axes/test_expert_parallel.py);
`draw_moe_bytes_cases` draws the hidden cases. The catalogue of mistakes lives in the drop's
grading.json (`catalogue.telling` / `catalogue.judge`).
"""
from __future__ import annotations

import random

from threeaxes.expert_parallel.traffic import moe_all_to_all_bytes

__all__ = ["CAPACITY_FACTORS", "expected_moe_bytes", "draw_moe_bytes_cases"]

# Factors whose products with whole numbers are exact in floating point, so that a student's
# math.ceil(k * T * cf / E) and the reference agree to the last slot.
CAPACITY_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def expected_moe_bytes(tokens: int, d_model: int, n_experts: int, top_k: int, capacity_factor: float, ep: int,
                       bytes_per_element: int) -> float:
    """Bytes one ep rank sends for one MoE layer in one step: four padded all-to-alls."""
    return moe_all_to_all_bytes(tokens, d_model, n_experts, ep, top_k=top_k,
                                capacity_factor=capacity_factor,
                                bytes_per_element=bytes_per_element)["sent_per_layer"]


def draw_moe_bytes_cases(rng: random.Random) -> list[tuple]:
    """(tokens, d_model, n_experts, top_k, capacity_factor, ep, bytes_per_element) for the
    hidden test: a toy-sized and a model-sized layer, the even share k T / E made uneven on
    purpose in one (so that rounding up and down differ), and one with ep = 1."""
    cases = []
    for small in (True, False):
        n_experts = rng.choice([4, 8]) if small else rng.choice([8, 16, 64])
        ep = rng.choice([d for d in (2, 4, 8) if n_experts % d == 0])
        top_k = rng.choice([1, 2])
        tokens = rng.randint(8, 128) if small else 512 * rng.randint(1, 16)
        cases.append((tokens, 32 * rng.randint(1, 4) if small else 1024 * rng.randint(1, 8),
                      n_experts, top_k, rng.choice(CAPACITY_FACTORS), ep, rng.choice([2, 4, 8])))
    # k T cf / E not a whole number: T odd, cf 1.25, so floor and ceil part
    cases.append((2 * rng.randint(4, 60) + 1, 64, 8, rng.choice([1, 2]), 1.25, 4, 2))
    cases.append((rng.randint(8, 64), 32, 4, 1, rng.choice(CAPACITY_FACTORS), 1, 4))
    return cases
