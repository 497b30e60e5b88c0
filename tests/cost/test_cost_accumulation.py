"""Gradient accumulation in the planner: what ZeRO-2/3 exchange with m micro-batches a
step, how much of the data-parallel exchange can hide, and the interleaved schedule's
micro-batch group (issue 33, section 1).

Every expected value is worked by hand here from the ring formulas (Thakur et al. 2005:
reduce-scatter and all-gather (n - 1) alpha + (n - 1)/n S/B, all-reduce twice that) and
the sources the planner cites: ZeRO (Rajbhandari et al. 2020, Section 7.2: 2 Psi for
stages 1-2, 3 Psi for stage 3, per forward and backward), DeepSpeed's stage 2 reducing
after every backward (deepspeedai/DeepSpeed#2252), FSDP2 reduce-scattering every
micro-batch unless told not to (pytorch/pytorch#126166), Megatron Core's
``microbatch_group_size_per_vp_stage`` (p <= N <= m, m % N == 0 or >= p).
"""

import pytest

from threeaxes.cost import a100_cluster, custom_model, plan
from threeaxes.cost.activations import in_flight_micro_batches
from threeaxes.cost.bubble import bubble_fraction, bubble_overhead
from threeaxes.cost.constraints import interleave_group, violations

NVLINK, NVLINK_LATENCY = 300e9, 5e-6        # a100_cluster: 300 GB/s one way, 5 us per step
PEAK = 312e12
MODEL = custom_model("m", 8, 1024, 16, seq_len=512)
ONE_NODE = a100_cluster(1)
N = MODEL.n_params


def ring(n, size, steps_factor=1):
    """reduce-scatter or all-gather (steps_factor 1), all-reduce (2), on NVLink."""
    return steps_factor * ((n - 1) * NVLINK_LATENCY + (n - 1) / n * size / NVLINK)


def dp_only(zero, micro_batches, **kw):
    # dp = 8 inside one node, tp = pp = 1: 32 sequences, m = 32 / (8 x micro_batch)
    return plan(MODEL, ONE_NODE, 32, dp=8, micro_batch=32 // (8 * micro_batches),
                zero_stage=zero, **kw)


# -- pp = 1: the exchange per micro-batch -----------------------------------------------

def test_zero3_without_a_pipeline_gathers_and_scatters_every_micro_batch():
    S = 2 * N                                   # the fp16 gradients (and weights), bytes
    r = dp_only(3, 4)
    assert r.micro_batches == 4
    # per micro-batch: all-gather the weights for the forward and again for the backward,
    # reduce-scatter the gradients: 3 Psi, four times
    assert r.time.dp_comm == pytest.approx(4 * (ring(8, S) + 2 * ring(8, S)))


def test_zero2_without_a_pipeline_reduce_scatters_every_micro_batch():
    S = 2 * N
    r = dp_only(2, 4)
    # four reduce-scatters, one all-gather of the updated weights after the step
    assert r.time.dp_comm == pytest.approx(4 * ring(8, S) + ring(8, S))


@pytest.mark.parametrize("zero", [0, 1])
def test_zero0_and_zero1_reduce_once_a_step_however_many_micro_batches(zero):
    S = 2 * N
    for m in (1, 4):
        assert dp_only(zero, m).time.dp_comm == pytest.approx(ring(8, S, steps_factor=2))


def test_megatron_bf16_reduces_gradients_in_fp32_and_gathers_weights_in_bf16():
    # Megatron-LM with --bf16 accumulates and reduces gradients in fp32 (arguments.py:
    # "bfloat16 requires gradient accumulation and all-reduce to be done in fp32"), while
    # its distributed optimizer and FSDP gather the bf16 weights: 4 bytes a gradient,
    # 2 a weight, so the all-gathers move half of what the reduce-scatters move
    G, W = 4 * N, 2 * N
    mb = dict(precision="megatron-bf16")
    assert dp_only(3, 4, **mb).time.dp_comm == pytest.approx(4 * (ring(8, G) + 2 * ring(8, W)))
    assert dp_only(2, 4, **mb).time.dp_comm == pytest.approx(4 * ring(8, G) + ring(8, W))
    assert dp_only(1, 4, **mb).time.dp_comm == pytest.approx(ring(8, G) + ring(8, W))
    # plain data parallelism all-reduces the fp32 gradients: no weights gathered
    assert dp_only(0, 4, **mb).time.dp_comm == pytest.approx(ring(8, G, steps_factor=2))


def test_with_one_micro_batch_zero2_moves_what_zero1_moves():
    # ZeRO Section 7.2.1: reduce-scatter + all-gather = one all-reduce (2 Psi)
    assert dp_only(2, 1).time.dp_comm == pytest.approx(dp_only(1, 1).time.dp_comm)
    assert dp_only(3, 1).time.dp_comm == pytest.approx(1.5 * dp_only(1, 1).time.dp_comm)


def test_sharded_memory_is_what_the_exchange_per_micro_batch_buys():
    r3, r1 = dp_only(3, 4), dp_only(1, 4)
    assert r3.memory.params == pytest.approx(2 * N / 8) and r3.memory.grads == pytest.approx(2 * N / 8)
    # keeping weights and gradients whole between micro-batches (FSDP2's
    # set_reshard_after_backward(False), set_requires_gradient_sync(False)) holds ZeRO-1's
    # bytes for ZeRO-1's traffic: the ZeRO-1 row
    assert r1.memory.params == pytest.approx(2 * N) and r1.memory.grads == pytest.approx(2 * N)
    assert r1.memory.optimizer == pytest.approx(r3.memory.optimizer)


# -- pp > 1 --------------------------------------------------------------------------------

def test_zero3_with_a_pipeline_exchanges_each_stage_every_micro_batch():
    S = 2 * N / 2                               # each of the 2 stages holds half the model
    r = plan(MODEL, ONE_NODE, 32, dp=4, pp=2, micro_batch=1, zero_stage=3,
             allow_sharded_pp=True)
    assert r.micro_batches == 8
    assert r.time.dp_comm == pytest.approx(8 * 3 * ring(4, S))
    r2 = plan(MODEL, ONE_NODE, 32, dp=4, pp=2, micro_batch=1, zero_stage=2,
              allow_sharded_pp=True)
    assert r2.time.dp_comm == pytest.approx(8 * ring(4, S) + ring(4, S))
    r1 = plan(MODEL, ONE_NODE, 32, dp=4, pp=2, micro_batch=1, zero_stage=1)
    assert r1.time.dp_comm == pytest.approx(ring(4, S, steps_factor=2))


# -- overlap is bounded by the backward it runs beside --------------------------------------

def test_overlap_of_the_all_reduce_is_bounded_by_the_last_micro_batch_backward():
    S = 2 * N
    t = ring(8, S, steps_factor=2)
    tokens = 32 * 512
    compute = tokens * (6 * N + 12 * 8 * 1024 * 512) / (8 * PEAK * 0.6)   # PaLM App. B
    backward_last = compute / 4 * 2 / 3          # one of m = 4 micro-batches, 4N of 6N
    r = dp_only(1, 4, dp_overlap=1.0)
    assert r.time.dp_comm == pytest.approx(t - min(t, backward_last))
    half = dp_only(1, 4, dp_overlap=0.5)
    assert half.time.dp_comm == pytest.approx(t - 0.5 * min(t, backward_last))
    # with one micro-batch the whole backward is there to hide it
    one = dp_only(1, 1, dp_overlap=1.0)
    assert one.time.dp_comm == pytest.approx(t - min(t, compute * 2 / 3))


def test_zero2_reduce_scatters_hide_beside_every_backward():
    S = 2 * N
    t = 4 * ring(8, S) + ring(8, S)
    compute = 32 * 512 * (6 * N + 12 * 8 * 1024 * 512) / (8 * PEAK * 0.6)
    r = dp_only(2, 4, dp_overlap=1.0)
    assert r.time.dp_comm == pytest.approx(t - min(t, 4 * compute / 4 * 2 / 3))


# -- the interleaved schedule's micro-batch group --------------------------------------------

@pytest.mark.parametrize("p, m, flexible, group_p", [
    (8, 13, 13, None),     # drop 12's layout: one group of 13 (Megatron Core >= 0.10)
    (8, 16, 8, 8),         # a multiple of p: the default group works
    (8, 20, 10, None),     # 20 % 8 = 4 < p, 20 % 9 = 2 < p, 20 % 10 = 0
    (4, 7, 7, None),       # N = 4, 5, 6 leave 3, 2, 1 (each < p = 4); N = 7 leaves 0
    (8, 7, None, None),    # fewer micro-batches than stages: no group
])
def test_interleave_group_follows_megatron_core(p, m, flexible, group_p):
    assert interleave_group(p, m) == flexible
    assert interleave_group(p, m, "group_p") == group_p


def test_a_group_of_13_holds_all_13_micro_batches_and_idles_7_of_33():
    # warm-up: 2 (p - 1) + (v - 1) N + 1 = 14 + 13 + 1 = 28 chunks, capped at m v = 26
    assert in_flight_micro_batches(8, 13, virtual_stages=2, group=13) == 13
    assert in_flight_micro_batches(8, 16, virtual_stages=2) == (14 + 8 + 1) / 2
    assert bubble_fraction(8, 13, virtual_stages=2, interleave="flexible") == pytest.approx(7 / 33)
    assert bubble_overhead(8, 13, virtual_stages=2, interleave="flexible") == pytest.approx(7 / 26)
    with pytest.raises(ValueError, match="default group of p"):
        bubble_fraction(8, 13, virtual_stages=2)


def test_the_planner_names_whose_interleaving_rule_it_applies():
    model = custom_model("m", 16, 1024, 16, seq_len=512)
    kw = dict(dp=1, tp=1, pp=8, micro_batch=1, virtual_stages=2)
    cluster = a100_cluster(1)
    assert violations(model, cluster, 13, **kw) == []
    (v,) = violations(model, cluster, 13, interleave="group_p", **kw)
    assert v.rule == "interleave" and "Megatron Core 0.10" in v.message
    (v,) = violations(model, cluster, 7, **kw)
    assert "fewer than pp=8" in v.message
    r = plan(model, cluster, 13, **kw)
    assert r.bubble_fraction == pytest.approx(7 / 33)
