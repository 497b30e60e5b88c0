"""Context and expert parallelism's bytes, times and rules (threeaxes.cost.context,
threeaxes.cost.experts), against hand counts and small simulations of the exchanges.

Expected values come from the papers' own counts (Liu et al. 2023's ring, Jacobs et
al. 2023's 4Nh/P, Lepikhin et al. 2021's dispatch) or from simulating which block or
token leaves which rank; none is the function's output pasted back.
"""

import pytest

from threeaxes.cost.context import CP_MODES, context_parallel_bytes, context_parallel_time, context_violations
from threeaxes.cost.experts import (
    MoE,
    active_params,
    expert_all_to_all_bytes,
    expert_all_to_all_time,
    expert_params,
    expert_violations,
)
from threeaxes.cost.network import Link, all_to_all_time, bytes_sent_per_gpu


def _ring_sends(cp):
    """Simulate the ring: rank r starts with block r and, each step, sends what it holds to
    r + 1. Return, per rank, (how many blocks it sent, which blocks it has seen)."""
    holding = list(range(cp))
    seen = [{r} for r in range(cp)]
    sent = [0] * cp
    for _ in range(cp - 1):
        nxt = [None] * cp
        for r in range(cp):
            nxt[(r + 1) % cp] = holding[r]
            sent[r] += 1
        holding = nxt
        for r in range(cp):
            seen[r].add(holding[r])
    return sent, seen


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_ring_forward_sends_one_block_per_step_until_every_rank_saw_every_block(cp):
    s, b, h, k, d = 48, 2, 64, 16, 2
    sent, seen = _ring_sends(cp)
    assert all(x == set(range(cp)) for x in seen)          # every query met every key
    block = 2 * b * (s // cp) * k * d                     # this rank's K and V
    got = context_parallel_bytes(s, b, h, cp, mode="ring", kv_width=k, dtype_bytes=d)
    assert got.forward == sent[0] * block
    # backward: the blocks go round again and their gradients with them
    assert got.backward == 2 * got.forward and got.total == 3 * got.forward


@pytest.mark.parametrize("cp", [2, 4, 16])
def test_all_gather_way_moves_the_ring_all_gather_of_the_whole_k_and_v(cp):
    s, b, h, k, d = 128, 1, 256, 32, 2
    whole = 2 * b * s * k * d                              # K and V of the whole sequence
    got = context_parallel_bytes(s, b, h, cp, mode="all_gather", kv_width=k, dtype_bytes=d)
    assert got.forward == pytest.approx(bytes_sent_per_gpu("all_gather", whole, cp))
    assert got.backward == pytest.approx(bytes_sent_per_gpu("reduce_scatter", whole, cp))


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ulysses_sends_4Nh_over_P_per_rank_and_pass(cp):
    # Jacobs et al. 2023, Section 3.2: with multi-head attention each all-to-all of Q, K,
    # V and the output moves N h / P per GPU for a sequence of N over P GPUs, 4 N h / P in
    # all; the rank keeps its own 1/P share, so it sends (P - 1)/P of it
    N, h, d = 1024, 128, 2
    got = context_parallel_bytes(N, 1, h, cp, mode="all_to_all", dtype_bytes=d)
    assert got.forward == pytest.approx(4 * N * h / cp * d * (cp - 1) / cp)
    assert got.backward == got.forward
    # what it saves against Megatron's sequence parallelism (4 N h per GPU, whatever P)
    assert got.forward < 4 * N * h * d / cp


def test_one_rank_sends_nothing_and_the_modes_are_named():
    for mode in CP_MODES:
        assert context_parallel_bytes(64, 1, 32, 1, mode=mode).total == 0
    with pytest.raises(ValueError, match="choose cp_mode in"):
        context_parallel_bytes(64, 1, 32, 2, mode="ulysses")
    with pytest.raises(ValueError, match="cp=3 does not divide seq_len=64"):
        context_parallel_bytes(64, 1, 32, 3)


def test_ring_hides_behind_attention_and_all_gather_does_not():
    link = Link(50e9, 10e-6, False)
    s, b, h, k, cp = 131072, 1, 16384, 1024, 16
    block = 2 * b * (s / cp) * k * 2
    sends = 3 * (cp - 1) * (10e-6 + block / 50e9)         # alpha + S/B per send
    assert context_parallel_time(s, b, h, cp, link, kv_width=k) == pytest.approx(sends)
    assert context_parallel_time(s, b, h, cp, link, kv_width=k,
                                 attention_seconds=sends / 2) == pytest.approx(sends / 2)
    assert context_parallel_time(s, b, h, cp, link, kv_width=k, attention_seconds=1.0) == 0
    whole = 2 * b * s * k * 2
    gather = 2 * ((cp - 1) * 10e-6 + (cp - 1) / cp * whole / 50e9)   # all-gather + reduce-scatter
    assert context_parallel_time(s, b, h, cp, link, mode="all_gather", kv_width=k,
                                 attention_seconds=1.0) == pytest.approx(gather)


def test_context_rules_name_what_to_change():
    assert context_violations(128, 8, 131072, cp=16, tp=8) == []
    (rule, msg), = context_violations(32, 8, 8200, cp=8)
    assert rule == "cp_seq" and "divisible by 16" in msg and "2*cp chunks" in msg
    assert context_violations(32, 8, 8200, cp=8, mode="all_to_all") == []   # 8200 = 8 x 1025
    # Llama 3 405B: 8 key/value heads over tp = 8 leaves one per rank: no Ulysses split
    (rule, msg), = context_violations(128, 8, 131072, cp=16, tp=8, mode="all_to_all")
    assert rule == "cp_heads" and "1 key/value heads" in msg and "cp_mode='ring'" in msg


# -- experts ----------------------------------------------------------------------------

MIXTRAL = MoE(n_experts=8, top_k=2, expert_hidden=14336)   # Jiang et al. 2024, Table 1


def test_mixtral_8x7b_has_its_published_46_7b_and_12_9b_parameters():
    # Jiang et al. 2024, Section 2.1: 47B parameters, 13B active per token; the released
    # model card counts 46.7B and 12.9B. Dense part by hand: embeddings and output
    # (2 x 32000 x 4096), attention (2 x 4096^2 + 2 x 4096 x 1024 per layer, 32 layers),
    # norms, routers (4096 x 8 per layer)
    h, l, v = 4096, 32, 32000
    dense = 2 * v * h + l * (2 * h * h + 2 * h * 1024 + 2 * h + 8 * h) + h
    experts = l * 8 * 3 * h * 14336
    assert expert_params(MIXTRAL, h, l) == experts
    total = dense + experts
    assert total / 1e9 == pytest.approx(46.7, abs=0.05)
    assert active_params(total, MIXTRAL, h, l) / 1e9 == pytest.approx(12.9, abs=0.05)


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_dispatch_bytes_count_the_routed_copies_that_leave_the_rank(ep):
    # simulate a balanced router: token t's j-th choice is expert (2t + j) % E, experts
    # e * E/ep .. on rank e; count the hidden states that go to another rank
    tokens, h, k, d, E = 64, 32, 2, 2, 8

    def rank_of(e):
        return e // (E // ep)

    me = 0
    leaving = sum(1 for t in range(tokens) for j in range(k) if rank_of((2 * t + j) % E) != me)
    assert expert_all_to_all_bytes(tokens, h, k, ep, dtype_bytes=d) == leaving * h * d
    link = Link(100e9, 5e-6, True)
    buffer = tokens * k * h * d
    assert expert_all_to_all_time(tokens, h, k, ep, link) == pytest.approx(
        4 * ((ep - 1) * 5e-6 + (ep - 1) / ep * buffer / 100e9))
    assert expert_all_to_all_time(tokens, h, k, ep, link) == pytest.approx(
        4 * all_to_all_time(buffer, ep, 100e9, 5e-6).total)


def test_expert_rules_name_what_to_change():
    assert expert_violations(MIXTRAL, ep=8, etp=1, tp=2, cp=1, dp=4) == []
    rules = [r for r, _ in expert_violations(MIXTRAL, ep=3, etp=1, tp=2, cp=1, dp=4)]
    assert rules == ["ep_experts", "ep_fold"]
    (rule, msg), = expert_violations(MIXTRAL, ep=8, etp=2, tp=2, cp=1, dp=2)
    assert rule == "ep_fold" and "etp(2) * ep(8) = 16 does not divide" in msg
    (rule, msg), = expert_violations(None, ep=2, etp=1, tp=1, cp=1, dp=2)
    assert rule == "ep_moe"
    assert expert_violations(None, ep=1, etp=4, tp=4, cp=1, dp=2) == []
    with pytest.raises(ValueError, match="top_k=3 is more than n_experts=2"):
        MoE(2, 3, 128)
