"""Drops 5 and 6: the grading references judge raw results, never a verdict from the ranks.

Ranks started from a student's notebook run in the student's kernel, so the
hidden tests have them return raw numbers (gradients, outputs) and compare those
here with a reference computed in one process. Fast tests build such results in
one process (right, wrong in the usual ways, forged); the slow ones run the rank
functions on real gloo ranks. The hidden tests draw their inputs at grading
time: every draw must have one right answer, which the formulas written out
here (by hand, from the papers) reach.
"""
from __future__ import annotations

import random
import sys

import cloudpickle
import pytest
import torch
import torch.nn.functional as F

from autograder.references import drop05, drop06
from threeaxes.grading import check_on_ranks

SEEDS = range(60)


# -- drop 5: all_reduce_sizes ------------------------------------------------------------

def _sizes_by_hand(param_bytes, bucket_bytes):
    """The rule of the exercise: walk backward's order, close a bucket before it overflows."""
    sizes, open_bytes = [], 0
    for size in reversed(param_bytes):
        if open_bytes and open_bytes + size > bucket_bytes:
            sizes.append(open_bytes)
            open_bytes = 0
        open_bytes += size
    return sizes + ([open_bytes] if open_bytes else [])


def test_drop05_every_drawn_bucket_case_has_the_hand_answer_and_catches_forward_order():
    for seed in SEEDS:
        cases = drop05.draw_bucket_cases(random.Random(seed))
        caught = 0
        for sizes, cap in cases:
            assert drop05.expected_all_reduce_bytes(sizes, cap) == _sizes_by_hand(sizes, cap)
            assert drop05.bucket_mistake(_sizes_by_hand(sizes, cap), sizes, cap) is None
            forward = _sizes_by_hand(sizes[::-1], cap)          # filled in registration order
            mistake = drop05.bucket_mistake(forward, sizes, cap)
            caught += mistake is not None and "registration" in mistake
        assert caught, f"seed {seed}: no drawn case tells forward order from backward order"


def test_drop05_bucket_draws_fill_a_bucket_exactly_and_put_tensors_alone():
    cases = drop05.draw_bucket_cases(random.Random(1))
    assert any(cap == 1 for _, cap in cases)                       # every tensor alone
    assert any(cap >= sum(sizes) for sizes, cap in cases)          # one bucket for all
    exact = [(s, c) for s, c in cases if c in {sum(s[::-1][:k]) for k in range(1, len(s) + 1)}]
    assert exact                                                   # some bucket filled to the byte


# -- drop 5: launch_bucket, judged from raw results ------------------------------------------

def _raw(grads, world_size, buckets, pending="Pending"):
    """What every rank of a right run returns (all ranks end with the same gradients)."""
    return [{"error": None, "pending": [pending] * buckets, "all_reduces": buckets,
             "grads": {n: g.reshape(-1).tolist() for n, g in grads.items()}} for _ in range(world_size)]


def _bucket_count(world_size, bucket_bytes):
    from threeaxes.data_parallel import plan_buckets

    mean, _ = drop05.reference_gradients(world_size)
    return len(plan_buckets([g.numel() * 8 for g in mean.values()][::-1], bucket_bytes))


def test_drop05_judge_passes_the_average_and_names_a_sum_or_a_local_gradient():
    world_size, bucket_bytes = 3, 2048
    mean, own = drop05.reference_gradients(world_size)
    buckets = _bucket_count(world_size, bucket_bytes)
    assert "equals the whole batch's gradient" in drop05.judge_launch_bucket(
        _raw(mean, world_size, buckets), world_size, bucket_bytes)
    summed = _raw({n: g * world_size for n, g in mean.items()}, world_size, buckets)
    with pytest.raises(AssertionError, match=r"3x the average.*divide the flat buffer by dp"):
        drop05.judge_launch_bucket(summed, world_size, bucket_bytes)
    local = [_raw(o, 1, buckets)[0] for o in own]
    with pytest.raises(AssertionError, match="this rank's own"):
        drop05.judge_launch_bucket(local, world_size, bucket_bytes)


def test_drop05_judge_rejects_forged_verdicts_and_wrong_counts():
    world_size, bucket_bytes = 2, 2048
    mean, _ = drop05.reference_gradients(world_size)
    buckets = _bucket_count(world_size, bucket_bytes)
    forged = [{"ok": True, "message": "every gradient equals DDP's"}] * world_size
    with pytest.raises(AssertionError):
        drop05.judge_launch_bucket(forged, world_size, bucket_bytes)
    one_short = _raw(mean, world_size, buckets)
    one_short[1]["all_reduces"] = buckets - 1
    with pytest.raises(AssertionError, match="exactly one comms.all_reduce"):
        drop05.judge_launch_bucket(one_short, world_size, bucket_bytes)
    with pytest.raises(AssertionError, match="as pending"):
        drop05.judge_launch_bucket(_raw(mean, world_size, buckets, "Tensor"), world_size, bucket_bytes)
    strings = _raw(mean, world_size, buckets)
    strings[0]["grads"]["head.weight"] = [str(v) for v in strings[0]["grads"]["head.weight"]]
    with pytest.raises(AssertionError, match="malformed"):
        drop05.judge_launch_bucket(strings, world_size, bucket_bytes)
    with pytest.raises(AssertionError, match=r"dp=3, bucket_bytes=2048"):   # the input is named
        drop05.judge_launch_bucket(_raw(mean, 2, buckets), 3, bucket_bytes)


# -- drop 6: wire bytes --------------------------------------------------------------------

def _wire_bytes_by_hand(b, s, h, t, element, sequence_parallel):
    """Ring: all-reduce 2(t-1)/t S, all-gather and reduce-scatter (t-1)/t S each; per block and
    step, TP makes 4 all-reduces (Megatron's g twice forward, f twice backward), TP + SP one
    all-gather and one reduce-scatter in their place (Korthikanti et al. 2022)."""
    size = b * s * h * element
    return 8 * (t - 1) / t * size if sequence_parallel else 4 * 2 * (t - 1) / t * size


def test_drop06_every_drawn_case_has_the_hand_answer_and_catches_forward_only():
    for seed in SEEDS:
        cases = drop06.draw_wire_bytes_cases(random.Random(seed))
        assert {sp for *_, sp in cases} == {False, True} and any(c[3] == 1 for c in cases)
        for args in cases:
            assert drop06.wire_bytes_mistake(_wire_bytes_by_hand(*args), *args) is None
        assert any("only the forward" in (drop06.wire_bytes_mistake(_wire_bytes_by_hand(*a) / 2, *a) or "")
                   for a in cases)


# -- drop 6: the sequence-parallel MLP, judged from raw results ---------------------------

def _sp_raw(t, seq_len=8, batch=2, seed=0, d_model=32, bias_times=1):
    """Per-rank results built in one process: each rank's output slice and gradients;
    a whole tensor's gradient all on rank 0 (the judge sums them over the ranks)."""
    block, x, _, y = drop06.one_process_mlp(drop06.sp_mlp_config(seq_len, d_model), batch, seed)
    params = dict(block.named_parameters())
    y = y + (bias_times - 1) * params["mlp.fc2.bias"].detach()
    results = []
    for rank in range(t):
        grads = {"x": x.grad.chunk(t, 1)[rank]}
        for key, (name, dim) in drop06.CUTS.items():
            g = params[name].grad
            grads[key] = (g if rank == 0 else torch.zeros_like(g)) if dim is None else g.chunk(t, dim)[rank]
        out = y.chunk(t, 1)[rank]
        results.append({"error": None, "type": "Tensor", "shape": tuple(out.shape), "requires_grad": True,
                        "output": out.reshape(-1).tolist(),
                        "grads": {k: g.reshape(-1).tolist() for k, g in grads.items()}})
    return results


def test_drop06_judge_passes_one_process_and_names_the_bias_added_t_times():
    assert "equal one process" in drop06.judge_sp_mlp(_sp_raw(2), 2)
    assert "equal one process" in drop06.judge_sp_mlp(_sp_raw(3, 6, 1, 9, 12), 3, 6, 1, 9, 12)
    with pytest.raises(AssertionError, match="exactly 1 times fc2's bias"):
        drop06.judge_sp_mlp(_sp_raw(2, bias_times=2), 2)


def test_drop06_judge_rejects_forged_verdicts_missing_gradients_and_wrong_shapes():
    with pytest.raises(AssertionError):
        drop06.judge_sp_mlp([{"ok": True, "message": "output and every gradient equal one process"}] * 2, 2)
    missing = _sp_raw(2)
    missing[1]["grads"]["fc1.weight"] = None
    with pytest.raises(AssertionError, match="fc1.weight got no gradient"):
        drop06.judge_sp_mlp(missing, 2)
    halved = _sp_raw(2)
    halved[0]["grads"]["x"] = [v / 2 for v in halved[0]["grads"]["x"]]
    with pytest.raises(AssertionError, match="rank 0's gradient of x is off"):
        drop06.judge_sp_mlp(halved, 2)
    whole = _sp_raw(2)
    whole[0]["shape"] = (2, 8, 32)
    with pytest.raises(AssertionError, match=r"shape \(2, 8, 32\).*\(2, 4, 32\)"):
        drop06.judge_sp_mlp(whole, 2)
    with pytest.raises(AssertionError, match=r"tp=2, batch=2, seq_len=8, d_model=32, seed=7"):
        drop06.judge_sp_mlp(_sp_raw(2), 2, seed=7)      # other data: the input is named


# -- on real ranks ---------------------------------------------------------------------------

def _hook_right(grads, dims):
    from threeaxes import comms

    flat = torch.cat([g.reshape(-1) for g in grads]) / dims.size("dp")
    return flat, comms.all_reduce(flat, "dp", dims=dims, async_op=True)


def _hook_sums(grads, dims):
    from threeaxes import comms

    flat = torch.cat([g.reshape(-1) for g in grads])
    return flat, comms.all_reduce(flat, "dp", dims=dims, async_op=True)


def _sp_mlp_right(x, shard, dims):
    from threeaxes.tensor_parallel import gather_from_sequence_region, reduce_scatter_to_sequence_region

    a = F.layer_norm(x, (x.shape[-1],), shard["ln.weight"], shard["ln.bias"])
    hidden = F.gelu(F.linear(gather_from_sequence_region(a, dims), shard["fc1.weight"], shard["fc1.bias"]))
    partial = F.linear(hidden, shard["fc2.weight"])
    return x + reduce_scatter_to_sequence_region(partial, dims) + shard["fc2.bias"]


@pytest.fixture(scope="module")
def by_value():
    # send the student-like functions by value, so the ranks need not import this module (and pytest)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_drop05_rank_results_judged_here(by_value):
    config = {"d_model": 16, "n_layers": 1, "vocab_size": 24, "seq_len": 4}
    right = check_on_ranks(drop05.launch_bucket_results, 3, _hook_right, 1000, config, 1, 77)
    assert "equals the whole batch's gradient" in drop05.judge_launch_bucket(right, 3, 1000, config, 1, 77)
    sums = check_on_ranks(drop05.launch_bucket_results, 2, _hook_sums, 2048)
    with pytest.raises(AssertionError, match="2x the average"):
        drop05.judge_launch_bucket(sums, 2, 2048)


@pytest.mark.slow
def test_drop06_rank_results_judged_here(by_value):
    results = check_on_ranks(drop06.sp_mlp_results, 3, _sp_mlp_right, 6, 1, 4, 12)
    assert "equal one process" in drop06.judge_sp_mlp(results, 3, 6, 1, 4, 12)
