"""plan() and search() with context parallelism (cp) and expert parallelism (ep), worked
by hand on a toy model and cluster; the rank layout against an independent enumeration
of Megatron-LM's order; the rules' errors."""
import itertools
from dataclasses import replace

import pytest

from threeaxes.cost import (
    LAYOUT_ORDER,
    Cluster,
    Model,
    MoE,
    custom_model,
    get_cluster,
    get_model,
    layout_strides,
    plan,
    search,
)
from threeaxes.cost.network import group_strides

TOY = Model("toy", n_layers=4, d_model=8, n_heads=2, vocab_size=16, seq_len=8,
            n_params=1000, layer_params=800)
# 4 layers of 4 experts, each 2 x 8 x 16 (4096 expert parameters), 904 dense ones
MOE_TOY = Model("moe toy", n_layers=4, d_model=8, n_heads=2, vocab_size=16, seq_len=8,
                n_params=5000, layer_params=4800, moe=MoE(4, 2, 16, gated=False))
TINY = Cluster("tiny", "toy-gpu", n_nodes=2, gpus_per_node=4, hbm_bytes=1e6,
               peak_flops=1e6, hbm_bandwidth=1e9, intra_node_bandwidth=1e3,
               inter_node_bandwidth=1e2, intra_node_latency=0.0, inter_node_latency=0.0)


def _cp_plan(mode):
    return plan(TOY, TINY, 4, dp=2, tp=1, cp=2, pp=2, micro_batch=1, zero_stage=1,
                compute_efficiency=0.5, cp_mode=mode)


def test_context_parallel_plan_by_hand():
    r = _cp_plan("all_gather")
    assert (r.dp, r.cp, r.pp, r.micro_batches) == (2, 2, 2, 2)
    # compute: 32 tokens * (6 * 1000 + 12 l h s = 3072) over 8 GPUs at 0.5e6
    assert r.time.compute == pytest.approx(32 * 9072 / (8 * 1e6 * 0.5))
    # cp group = ranks {0, 1}, in a node (1e3 B/s): all-gather K and V of the whole
    # sequence, 2 b s k 2 = 256 bytes, (1/2) 256 / 1e3 = 0.128 s, and reduce-scatter
    # their gradients, as much; 2 layers on the stage, 2 micro-batches
    assert r.time.cp_comm == pytest.approx(2 * 2 * 2 * 0.128)
    # PP: the stage boundary holds s/cp = 4 tokens: 2 b (s/cp) h = 64 bytes from rank 0
    # to rank 4 (pp stride tp*cp*dp = 4, the other node, 1e2 B/s), twice per micro-batch
    assert r.time.pp_comm == pytest.approx(2 * 2 * 0.64)
    # gradients: all-reduced over dp*cp = 4 ranks (0..3, one node): 2 * 1000 / pp bytes
    assert r.time.dp_comm == pytest.approx(2 * 3 / 4 * 1000 / 1e3)
    assert r.time.bubble == pytest.approx((r.time.compute + r.time.cp_comm) / 2)
    assert r.time.total == pytest.approx(r.time.compute + r.time.cp_comm + r.time.pp_comm
                                         + r.time.dp_comm + r.time.bubble)
    # ZeRO-1 shards the optimizer over the dp*cp = 4 ranks holding the same weights
    assert (r.memory.params, r.memory.grads, r.memory.optimizer) == (1000, 1000, 1500)
    # activations of s/cp = 4 tokens (flash attention: 34 sbh per layer), 2 layers,
    # 2 micro-batches in flight, plus the embedding dropout masks sbh * 2
    assert r.memory.activations == pytest.approx(34 * 32 * 2 * 2 + 32 * 2)
    assert "cp=2(all_gather)" in r.label


def test_ring_overlaps_its_sends_with_attention_and_ulysses_swaps_heads():
    ring, ulysses = _cp_plan("ring"), _cp_plan("all_to_all")
    # ring: 3 (cp - 1) sends of a 2 b (s/cp) k 2 = 128-byte block, less this rank's
    # attention, 12 h s b (s/cp) FLOPs at 0.5e6 FLOP/s, per layer and micro-batch
    exposed = 3 * 128 / 1e3 - 12 * 8 * 8 * 4 / 0.5e6
    assert ring.time.cp_comm == pytest.approx(4 * exposed)
    # Ulysses: Q, K, V and the output, 2 b (s/cp) h = 64 bytes each, half of each leaves,
    # forward and backward
    assert ulysses.time.cp_comm == pytest.approx(4 * 2 * 4 * 32 / 1e3)


def test_activation_memory_falls_by_cp():
    model = get_model("70B")
    cluster = get_cluster("h100-80gb", n_gpus=64)
    kw = dict(tp=8, pp=1, micro_batch=1, recompute="none", sequence_parallel=True)
    one = plan(model, cluster, 64, 32768, dp=8, **kw)
    for cp in (2, 4, 8):
        r = plan(model, cluster, 64, 32768, dp=8 // cp, cp=cp, **kw)
        # Korthikanti's per-token bytes (34 sbh/t with sequence parallelism), s/cp tokens
        # each, the same micro-batches in flight; the embedding dropout also per token
        assert r.memory.activations == pytest.approx(one.memory.activations / cp)


def test_expert_parallel_plan_by_hand():
    r = plan(MOE_TOY, TINY, 8, dp=8, tp=1, pp=1, ep=4, micro_batch=1, zero_stage=1,
             compute_efficiency=0.5)
    # compute on the active parameters: 5000 - 4 layers x (4 - 2) experts x 256 = 2952
    assert r.time.compute == pytest.approx(64 * (6 * 2952 + 12 * 4 * 8 * 8) / (8 * 1e6 * 0.5))
    # four all-to-alls per MoE layer of 8 tokens x top-2 x h 8 x 2 bytes = 256 bytes over
    # the ep group {0..3} (in a node): 3/4 of it leaves, 0.192 s each; 4 layers, 1 micro-batch
    assert r.time.ep_comm == pytest.approx(4 * 4 * 0.75 * 256 / 1e3)
    # gradients: 904 dense parameters all-reduced over dp = 8 (two nodes, 4 NICs' worth,
    # 400 B/s); 4096 / ep expert parameters over edp = 2 (ranks 0 and 4, one NIC, 1e2)
    dense = 2 * 7 / 8 * (2 * 904) / 400
    experts = 2 * 1 / 2 * (2 * 4096 / 4) / 1e2
    assert r.time.dp_comm == pytest.approx(dense + experts)
    # states: dense 904 whole (ZeRO-1 over 8), experts 1024 a rank (ZeRO-1 over edp = 2)
    assert r.memory.params == 2 * 904 + 2 * 1024
    assert r.memory.grads == 2 * 904 + 2 * 1024
    assert r.memory.optimizer == pytest.approx(12 * 904 / 8 + 12 * 1024 / 2)
    assert "ep=4" in r.label


def _groups(sizes, order, axis):
    """Rank groups along ``axis`` when ranks are numbered by ``order`` (fastest first),
    by enumerating every rank's coordinates: an independent reading of Megatron-LM's
    RankGenerator."""
    names = list(order)
    dims = [sizes[a] for a in names]
    rank_of = {}
    for coords in itertools.product(*[range(d) for d in dims]):
        rank, stride = 0, 1
        for c, d in zip(coords, dims):
            rank, stride = rank + c * stride, stride * d
        rank_of[coords] = rank
    i = names.index(axis)
    out = set()
    for coords in rank_of:
        out.add(tuple(sorted(rank_of[coords[:i] + (k,) + coords[i + 1:]]
                             for k in range(dims[i]))))
    return out


def _from_strides(stride, size, n):
    """The groups a (stride, size) pair describes: rank r's group starts at the block of
    stride * size ranks it sits in, offset by r % stride, and steps by stride."""
    groups = set()
    for r in range(n):
        base = r // (stride * size) * (stride * size) + r % stride
        groups.add(tuple(base + k * stride for k in range(size)))
    return groups


@pytest.mark.parametrize("tp, cp, dp, pp, ep, etp", [(2, 2, 2, 2, 4, 1), (2, 1, 4, 2, 8, 1),
                                                     (4, 2, 1, 2, 2, 4), (1, 4, 2, 2, 2, 2)])
def test_layout_strides_match_megatron_order(tp, cp, dp, pp, ep, etp):
    assert LAYOUT_ORDER == ("tp", "cp", "ep", "dp", "pp")
    n = tp * cp * dp * pp
    g = layout_strides(tp, cp, dp, pp, ep=ep, etp=etp)
    # the attention's generator: Megatron's order with ep = 1
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    for axis in ("tp", "cp", "dp", "pp"):
        assert _from_strides(*g[axis], n) == _groups(dense, LAYOUT_ORDER, axis), axis
    # the experts' generator: etp, ep, edp, pp (Liu et al. 2025's folding)
    edp = n // (etp * ep * pp)
    experts = {"etp": etp, "ep": ep, "edp": edp, "pp": pp}
    for axis in ("etp", "ep", "edp"):
        assert _from_strides(*g[axis], n) == _groups(experts, ("etp", "ep", "edp", "pp"),
                                                     axis), axis
    # with cp = ep = 1 the three-axis groups are the course's
    three = layout_strides(tp, 1, dp, pp)
    assert {k: three[k] for k in ("tp", "dp", "pp")} == group_strides(dp, tp, pp)


def test_rules_say_what_to_change():
    cluster = get_cluster("h100-80gb", n_gpus=64)
    model = get_model("70B")
    with pytest.raises(ValueError, match=r"dp\(2\) \* tp\(8\) \* cp\(2\) \* pp\(1\) = 32 != "
                                         r"n_gpus\(64\); try dp=4"):
        plan(model, cluster, 64, dp=2, tp=8, cp=2, micro_batch=1)
    with pytest.raises(ValueError, match="divisible by 16"):
        plan(model, cluster, 64, 4104, dp=1, tp=8, cp=8, micro_batch=1)
    with pytest.raises(ValueError, match="cp_mode='all_to_all' gives each rank whole heads"):
        plan(model, cluster, 64, dp=4, tp=8, cp=2, micro_batch=1, cp_mode="all_to_all")
    with pytest.raises(ValueError, match="needs memory-efficient attention"):
        plan(model, cluster, 64, dp=4, tp=8, cp=2, micro_batch=1, flash_attention=False)
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        plan(model, cluster, 64, dp=8, tp=8, ep=2, micro_batch=1)
    with pytest.raises(ValueError, match="ep=3 does not divide n_experts=4"):
        plan(MOE_TOY, replace(TINY, gpus_per_node=6), 12, dp=12, ep=3, micro_batch=1)
    with pytest.raises(ValueError, match="needs sequence parallelism"):
        plan(MOE_TOY, TINY, 8, dp=4, tp=2, ep=2, etp=1, micro_batch=1)
    with pytest.raises(ValueError, match=r"etp\(2\) \* ep\(4\) = 8 does not divide"):
        plan(MOE_TOY, TINY, 8, dp=2, tp=2, cp=1, pp=2, ep=4, etp=2, micro_batch=1,
             sequence_parallel=True)


def test_search_over_cp_and_ep_keeps_to_the_rules_and_the_defaults_to_three_axes():
    model = custom_model("m", 8, 512, 8, vocab_size=1024, seq_len=4096,
                         moe=MoE(8, 2, 1024, gated=False))
    cluster = get_cluster("h100-80gb", n_gpus=16)
    three = search(model, cluster, 32, zero_stages=(0, 1), micro_batch_sizes=(1,))
    assert {(r.cp, r.ep) for r in three} == {(1, 1)}
    more = search(model, cluster, 32, zero_stages=(0, 1), micro_batch_sizes=(1,),
                  cps=(1, 2, 4), cp_modes=("ring", "all_to_all"), eps=(1, 2, 4, 8))
    assert {(r.cp, r.ep) for r in more} > {(1, 1), (2, 1), (1, 2), (4, 8)}
    for r in more:
        assert r.dp * r.tp * r.cp * r.pp == 16
        assert (r.tp * r.cp * r.dp) % ((r.etp or r.tp) * r.ep) == 0 and 8 % r.ep == 0
        assert 4096 % (2 * r.cp) == 0 or r.cp_mode == "all_to_all"
        assert r.ep == 1 or r.tp == 1 or r.sequence_parallel
    # the three-axis rows are the same PlanResults either way
    assert [r for r in more if (r.cp, r.ep) == (1, 1)] == three


def test_expert_tensor_parallelism_pays_the_mlp_half_of_the_regions():
    # tp = 1 for attention, etp = 2 for the experts: of the 4 regions per layer (2 in
    # attention, 2 in the MLP, Shoeybi et al. 2019), the MLP's 2 run over ranks {0, 1} (a
    # node, 1e3 B/s): all-reduce of b s h = 64 values, 128 bytes, 2 (1/2) 128 / 1e3 each;
    # 4 layers
    r = plan(MOE_TOY, TINY, 8, dp=8, tp=1, pp=1, ep=2, etp=2, micro_batch=1,
             compute_efficiency=0.5)
    assert r.time.tp_comm == pytest.approx(4 * 2 * 128 / 1e3)
    assert r.etp == 2 and "etp=2" in r.label
