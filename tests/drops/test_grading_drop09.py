"""Drop 9's grading references: the hidden tests' draws, and the raw shard/gather results
from the ranks judged in the grader. Byte counts by hand from ZeRO (Rajbhandari et al.
2020) Section 3.1 and Figure 1: 2 + 2 + 12 bytes per parameter, the 12 sharded from
stage 1, the gradients from stage 2, the parameters at stage 3."""
import random
import sys

import cloudpickle
import pytest
import torch

from autograder.references import drop09
from threeaxes import comms
from threeaxes.grading import check_on_ranks


def by_hand(n, regime, dp, optimizer=12, params_from=3):
    stage = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3}[regime]
    return {"params": 2 * n / (dp if stage >= params_from else 1),
            "grads": 2 * n / (dp if stage >= 2 else 1),
            "optimizer": optimizer * n / (dp if stage >= 1 else 1)}


@pytest.mark.parametrize("seed", range(20))
def test_every_bytes_draw_passes_the_hand_count_and_catches_both_graded_slips(seed):
    cases = drop09.draw_bytes_cases(random.Random(seed))
    assert len(cases) == 24 and all(dp > 1 for _, _, dp in cases)
    assert {regime for _, regime, _ in cases} == {"dp", "zero1", "zero2", "zero3"}
    assert all(drop09.bytes_mistake(by_hand(*c), *c) is None for c in cases)
    for slip, named in ((dict(optimizer=8), "master copy"), (dict(params_from=1), "only ZeRO-3")):
        messages = [drop09.bytes_mistake(by_hand(*c, **slip), *c) for c in cases]
        assert any(m and named in m for m in messages), slip


@pytest.mark.parametrize("seed", range(20))
def test_every_vector_draw_has_a_ragged_an_even_and_a_short_length(seed):
    dp, vectors = drop09.draw_flat_vectors(random.Random(seed))
    lengths = [len(v) for v in vectors]
    assert 2 <= dp <= 4 and lengths[0] % dp and not lengths[1] % dp and lengths[2] < dp
    assert all(float(torch.tensor(v, dtype=torch.float32).double()[i]) == x
               for v in vectors for i, x in enumerate(v))


def shard(flat, dp_rank, dp):
    k = -(-flat.numel() // dp)
    return torch.cat([flat, flat.new_zeros(k * dp - flat.numel())])[dp_rank * k:(dp_rank + 1) * k].clone()


def shard_unpadded(flat, dp_rank, dp):
    return flat.tensor_split(dp)[dp_rank].clone()


def gather(shard, numel, dims):
    return comms.all_gather(shard, "dp", dims=dims)[:numel]


def gather_padded(shard, numel, dims):
    return comms.all_gather(shard, "dp", dims=dims)


def test_shards_are_judged_in_one_process():
    vectors = [[1.5, -2.0, 3.0, 4.25, 5.0], [7.0]]
    assert drop09.shard_mistake(shard, 3, vectors) is None
    assert "pad the flat tensor with zeros" in drop09.shard_mistake(shard_unpadded, 3, vectors)


@pytest.mark.slow
def test_raw_results_from_the_ranks_are_judged_against_the_drawn_vectors():
    # Send the student-like functions by value, so the ranks need not import this test module.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    dp, vectors = 3, [[1.5, -2.0, 3.0, 4.25, 5.0], [1.0, 2.0, 3.0], [0.5]]
    raw = check_on_ranks(drop09.shard_gather_raw, dp, shard, gather, vectors)
    assert drop09.gather_mistake(raw, dp, vectors) is None
    padded = check_on_ranks(drop09.shard_gather_raw, dp, shard, gather_padded, vectors)
    assert "drop the padding" in drop09.gather_mistake(padded, dp, vectors)
    # a shard_flat that fails on one rank: no rank waits in the all-gather, the error comes back
    failing = check_on_ranks(drop09.shard_gather_raw, dp, shard_unpadded_on_rank_0_fails, gather, vectors)
    assert "shard_flat raised ZeroDivisionError" in drop09.gather_mistake(failing, dp, vectors)


def shard_unpadded_on_rank_0_fails(flat, dp_rank, dp):
    return shard(flat, dp_rank, dp) if dp_rank else 1 / 0


def test_a_forged_reply_is_refused():
    forged = [{"ok": True, "message": "fine"}] * 3
    assert "was check_on_ranks or threeaxes changed" in drop09.gather_mistake(forged, 3, [[1.0]])
    wrong_values = [({"shard": ((1,), [1.0]), "gathered": ((1,), [2.0]),
                      "collectives": (("all_gather", "dp"),), "error": None},)]
    assert "not the 1 numbers back" in drop09.gather_mistake(wrong_values, 1, [[1.0]])


def test_an_error_in_the_answer_names_the_drawn_call():
    with pytest.raises(AssertionError, match=r"bytes_per_gpu\(12345, 'zero2', 7\) raised KeyError"):
        drop09.ask_bytes(lambda n, regime, dp: {}[regime], 12345, "zero2", 7)
    raised = r"2 numbers \[1.0, 2.0\] over dp=2>, 0, 2\) raised ZeroDivisionError"
    with pytest.raises(AssertionError, match=raised):
        drop09.shard_mistake(lambda flat, r, dp: 1 / 0, 2, [[1.0, 2.0]])
