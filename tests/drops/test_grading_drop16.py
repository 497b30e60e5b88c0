"""Drop 16's references: the bytes the hidden test expects, by hand, and the cases it draws."""
import math
import random

from autograder.references import drop16


def test_expected_bytes_by_hand():
    # the drop's toy: T=64 tokens per rank, E=4, k=1, cf=0.75 -> C = 12; S = 4 * 12 * 32 * 8 =
    # 12,288 bytes; four all-to-alls, half of each leaves the rank at ep=2
    assert drop16.expected_moe_bytes(64, 32, 4, 1, 0.75, 2, 8) == 4 * 12_288 // 2
    # 8 experts, top-2, 101 tokens, cf 1.25: k T cf / E = 31.5625 -> C = 32
    assert drop16.expected_moe_bytes(101, 64, 8, 2, 1.25, 4, 2) == 4 * 3 * (8 * 32 * 64 * 2) // 4
    assert drop16.expected_moe_bytes(64, 32, 4, 1, 1.0, 1, 8) == 0


def test_drawn_cases_hold_an_uneven_share_and_a_single_rank():
    for seed in range(20):
        cases = drop16.draw_moe_bytes_cases(random.Random(seed))
        uneven = [c for c in cases if (c[3] * c[0] * c[4] / c[2]) != math.floor(c[3] * c[0] * c[4] / c[2])]
        assert uneven and any(c[5] == 1 for c in cases)
        for _tokens, _d, E, k, cf, ep, _b in cases:
            assert E % ep == 0 and cf in drop16.CAPACITY_FACTORS and 1 <= k <= E
