"""Drop 15's references: the bytes one cp rank sends, against counts made by hand.

(tests/axes/test_context_parallel.py holds the cost model's count, which the reference
uses, equal to the bytes traced on real ranks.)"""
import random

from autograder.references import drop15

F64 = 8


def test_the_toy_layer_at_cp_4_by_hand():
    # one rank's block: b * (s / cp) * h = 2 * 4 * 32 values of 8 bytes = 2,048 bytes
    block = 2 * 4 * 32 * F64
    # ring: 3 forward sends of k and v (2 blocks), 6 backward (k and v again, dk and dv)
    assert drop15.expected_cp_bytes("ring", 2, 16, 32, 4, F64) == 9 * 2 * block == 36864
    # all-to-all: q, k, v and output forward, the same backward, 3/4 of each leaving the rank
    assert drop15.expected_cp_bytes("all_to_all", 2, 16, 32, 4, F64) == 8 * block * 3 / 4 == 12288


def test_one_rank_sends_nothing():
    assert drop15.expected_cp_bytes("ring", 1, 8, 16, 1, 2) == 0
    assert drop15.expected_cp_bytes("all_to_all", 1, 8, 16, 1, 2) == 0


def test_drawn_cases_split_into_2cp_chunks_and_cover_both_ways():
    rng = random.Random(0)
    for _ in range(20):
        cases = drop15.draw_cp_bytes_cases(rng)
        assert {c[0] for c in cases} == {"ring", "all_to_all"}
        for _method, b, s, h, cp, element in cases:
            assert s % (2 * cp) == 0 and b >= 1 and h % 32 == 0 and element in (2, 4, 8)
