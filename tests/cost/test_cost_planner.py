"""plan() on a hand-worked case, its constraint errors, and search()."""
import itertools

import pytest

from threeaxes.cost import Cluster, Model, a100_cluster, custom_model, get_cluster, get_model, plan, search

# A toy model and cluster with round numbers, so every term can be worked by hand.
TOY = Model("toy", n_layers=4, d_model=8, n_heads=2, vocab_size=16, seq_len=4,
            n_params=1000, layer_params=800)
TINY = Cluster("tiny", "toy-gpu", n_nodes=2, gpus_per_node=4, hbm_bytes=1e6,
               peak_flops=1e6, hbm_bandwidth=1e9, intra_node_bandwidth=1e3,
               inter_node_bandwidth=1e2, intra_node_latency=0.0, inter_node_latency=0.0)


def test_plan_by_hand():
    r = plan(TOY, TINY, 8, dp=2, tp=2, pp=2, micro_batch=1, zero_stage=1,
             compute_efficiency=0.5, flash_attention=False)
    assert r.micro_batches == 4                       # 8 / (dp 2 * mbs 1)
    # compute: 32 tokens * (6 * 1000 + 12 l h s = 1536) FLOPs over 8 GPUs at 0.5e6
    assert r.time.compute == pytest.approx(32 * 7536 / (8 * 1e6 * 0.5))
    # TP: b s h = 32 values, 64 bytes; ring all-reduce over 2 in-node GPUs at 1e3 B/s
    # = 2 * 1/2 * 64 / 1e3 = 0.064 s; 4 per layer, 2 layers per stage, 4 micro-batches
    assert r.time.tp_comm == pytest.approx(2 * 4 * 4 * 0.064)
    # PP: ranks 0 and 4 are on different nodes: 64 B / 1e2 B/s, twice per micro-batch
    assert r.time.pp_comm == pytest.approx(2 * 4 * 0.64)
    # DP: ranks 0 and 2 share a node; grads 2 bytes * 1000 / (tp*pp) = 500 B
    assert r.time.dp_comm == pytest.approx(2 * 0.5 * 500 / 1e3)
    # bubble: (p - 1)/m = 1/4 of compute + TP communication
    assert r.time.bubble == pytest.approx((r.time.compute + r.time.tp_comm) / 4)
    assert r.time.total == pytest.approx(sum(r.time[:5]))
    # memory: psi = 250 per model-parallel rank; ZeRO-1 shards the optimizer over dp=2
    assert (r.memory.params, r.memory.grads, r.memory.optimizer) == (500, 500, 1500)
    # activations: sbh = 32; Table 2 with t=2: 32 (10 + 12) + 5 a s^2 b / t = 704 + 80,
    # 2 layers x 2 micro-batches in flight, plus the embedding dropout 32 * 2 / 2
    assert r.memory.activations == pytest.approx(784 * 2 * 2 + 32)
    assert r.fits and r.capacity == 1e6
    assert r.tokens_per_second == pytest.approx(32 / r.time.total)
    assert r.mfu == pytest.approx(32 * 7536 / (r.time.total * 8 * 1e6))
    assert r.bubble_fraction == pytest.approx(1 / 5)
    # memory-efficient attention (the default) stores no scores: the 80 bytes go
    flash = plan(TOY, TINY, 8, dp=2, tp=2, pp=2, micro_batch=1, zero_stage=1,
                 compute_efficiency=0.5)
    assert flash.memory.activations == pytest.approx(704 * 2 * 2 + 32)
    assert flash.time == r.time


def test_sequence_parallel_stages_send_their_shard():
    # Megatron-LM's get_tensor_shapes: with sequence parallelism each TP rank sends its
    # s/t of the activation on its own link; ranks 0 and 4 sit on different nodes:
    # 64 B / 2 = 32 B at 1e2 B/s, twice per micro-batch, 4 micro-batches
    r = plan(TOY, TINY, 8, dp=2, tp=2, pp=2, micro_batch=1, zero_stage=1,
             compute_efficiency=0.5, sequence_parallel=True)
    assert r.time.pp_comm == pytest.approx(2 * 4 * 0.32)


def test_plan_memory_matches_the_parts():
    from threeaxes.cost import first_stage_activation_bytes, model_state_bytes
    m, c = get_model("70B"), get_cluster("a100-80gb", n_gpus=64)
    r = plan(m, c, 512, dp=2, tp=8, pp=4, micro_batch=1, zero_stage=1,
             recompute="selective", sequence_parallel=True)
    states = model_state_bytes(m.n_params, dp=2, tp=8, pp=4, zero_stage=1)
    acts = first_stage_activation_bytes(4096, 1, 8192, 64, n_layers=80, tp=8, pp=4,
                                        micro_batches=256, sequence_parallel=True,
                                        recompute="selective", vocab_size=32000)
    assert r.memory.total == pytest.approx(states.total + acts.total)
    assert r.fits == (r.memory.total <= 80e9)


def test_recompute_trades_memory_for_time():
    m, c = get_model("70B"), get_cluster("a100-80gb", n_gpus=64)
    kw = dict(dp=2, tp=8, pp=4, micro_batch=1, zero_stage=1, flash_attention=False)
    none, sel, full = (plan(m, c, 512, recompute=x, **kw) for x in ("none", "selective", "full"))
    assert none.memory.activations > sel.memory.activations > full.memory.activations
    assert none.time.compute < sel.time.compute < full.time.compute
    # memory-efficient attention already drops the score term selective recomputation drops
    flash = plan(m, c, 512, recompute="none", **dict(kw, flash_attention=True))
    assert flash.memory.activations == pytest.approx(sel.memory.activations)
    assert flash.time.compute == none.time.compute


def test_tp_across_nodes_runs_on_infiniband_when_allowed():
    m, c = get_model("175B"), get_cluster("a100-80gb", n_gpus=64)
    inside = plan(m, c, 64, dp=1, tp=8, pp=8, micro_batch=1)
    across = plan(m, c, 64, dp=1, tp=16, pp=4, micro_batch=1, allow_tp_across_nodes=True)
    per_layer_inside = inside.time.tp_comm / (96 / 8)
    per_layer_across = across.time.tp_comm / (96 / 4)
    # one NIC per GPU: the 16-GPU ring has 8 members per node and crosses over 8 NICs,
    # 8 x 25 = 200 GB/s against NVLink's 300; the 15 ring steps pay the 10 us latency
    b_s_h = 2 * 1 * 2048 * 12288
    by_hand = 4 * 64 * (2 * 15 / 16 * b_s_h / 200e9 + 2 * 15 * 10e-6)   # 4 per layer, m = 64
    assert per_layer_across == pytest.approx(by_hand)
    assert per_layer_across > per_layer_inside
    # one NIC per node: the same ring crosses at 25 GB/s, far slower than NVLink
    one_nic = get_cluster("a100-80gb", n_gpus=64, nics_per_node=1)
    slow = plan(m, one_nic, 64, dp=1, tp=16, pp=4, micro_batch=1, allow_tp_across_nodes=True)
    assert slow.time.tp_comm / (96 / 4) > 5 * per_layer_inside


SEVENTY = get_model("70B")
A64 = get_cluster("a100-80gb", n_gpus=64)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dp=2, tp=2, pp=3), r"dp\(2\) \* tp\(2\) \* pp\(3\) = 12 != n_gpus\(64\)"),
    (dict(dp=2, tp=3, pp=8, cluster=get_cluster("a100-80gb", n_gpus=48)),
     r"tp=3 does not divide n_heads=64; choose tp in \{1, 2, 4, 8\}"),
    (dict(dp=4, tp=16, pp=1), r"tp=16 does not divide n_kv_heads=8"),
    (dict(dp=2, tp=16, pp=2, model=get_model("175B")),
     r"tp=16 does not fit in one node of 8 GPUs; choose tp in \{1, 2, 4, 8\}"),
    # 3 is smaller than a node of 8 but does not divide it: the rule broken is the division
    (dict(dp=1, tp=3, pp=16, model=custom_model("h96", n_layers=16, d_model=1536, n_heads=96,
                                                 vocab_size=50257, seq_len=2048)),
     r"tp=3 does not divide the 8 GPUs of a node, so some tp groups would straddle two nodes"),
    (dict(dp=2, tp=8, pp=3, cluster=get_cluster("a100-80gb", n_gpus=48)),
     r"pp=3 does not divide n_layers=80; choose pp in \{1, 2, 4, 5, 8, 10, 16, 20, 40, 80\}"),
    (dict(dp=8, tp=8, pp=1, global_batch=100), r"global_batch=100 does not split evenly"),
    (dict(dp=8, tp=8, pp=1, micro_batch=3),
     r"micro_batch=3 does not divide the per-replica batch 16.*\{1, 2, 4, 8, 16\}"),
    (dict(dp=4, tp=8, pp=2, zero_stage=3), r"choose zero_stage in \{0, 1\} or pp=1"),
    (dict(dp=4, tp=8, pp=2, virtual_stages=3), r"choose virtual_stages in"),
    (dict(dp=8, tp=8, pp=1, recompute="some"), r"choose recompute"),
    (dict(dp=8, tp=8, pp=1, micro_batch=2, micro_batches=4), r"gives 8 micro-batches"),
])
def test_constraint_errors_say_what_to_change(kwargs, message):
    args = dict(model=SEVENTY, cluster=A64, global_batch=128, micro_batch=1)
    args.update(kwargs)
    model, cluster, batch = args.pop("model"), args.pop("cluster"), args.pop("global_batch")
    with pytest.raises(ValueError, match=message):
        plan(model, cluster, batch, **args)


def test_micro_batch_count_can_be_given_instead():
    r = plan(SEVENTY, A64, 128, dp=8, tp=8, pp=1, micro_batches=4)
    assert (r.micro_batch, r.micro_batches) == (4, 4)


def _valid_by_brute_force(model, cluster, batch):
    """Every configuration plan() accepts, found by trying all small integers."""
    n, found = cluster.n_gpus, set()
    for dp, tp, pp in itertools.product(range(1, n + 1), repeat=3):
        if dp * tp * pp != n:
            continue
        for mbs, zero, rc, v, sp in itertools.product(
                range(1, batch + 1), range(4), ("none", "selective", "full"),
                range(1, model.n_layers + 1), (False, True)):
            if sp and tp == 1:
                continue
            try:
                plan(model, cluster, batch, dp=dp, tp=tp, pp=pp, micro_batch=mbs,
                     zero_stage=zero, recompute=rc, virtual_stages=v, sequence_parallel=sp)
            except ValueError:
                continue
            found.add((dp, tp, pp, mbs, zero, rc, v, sp))
    return found


def test_search_finds_exactly_the_valid_configurations():
    model = Model("small", n_layers=4, d_model=64, n_heads=4, vocab_size=100, seq_len=32,
                  n_params=300_000, layer_params=200_000)
    cluster = a100_cluster(1)
    results = search(model, cluster, 8)
    got = {(r.dp, r.tp, r.pp, r.micro_batch, r.zero_stage, r.recompute, r.virtual_stages,
            r.sequence_parallel) for r in results}
    assert len(got) == len(results)
    assert got == _valid_by_brute_force(model, cluster, 8)


def test_search_ranks_fitting_then_fastest_and_agrees_with_plan():
    results = search(SEVENTY, A64, 256)
    keys = [(not r.fits, -r.tokens_per_second, r.memory.total) for r in results]
    assert keys == sorted(keys)
    assert results[0].fits
    for r in results[:: max(1, len(results) // 25)]:
        again = plan(SEVENTY, A64, 256, dp=r.dp, tp=r.tp, pp=r.pp, micro_batch=r.micro_batch,
                     zero_stage=r.zero_stage, recompute=r.recompute,
                     virtual_stages=r.virtual_stages, sequence_parallel=r.sequence_parallel)
        assert again == r
        assert r.dp * r.tp * r.pp == 64 and 64 % r.tp == 0 and r.tp <= 8
        assert SEVENTY.n_heads % r.tp == 0 and SEVENTY.n_layers % r.pp == 0
        assert r.dp * r.micro_batch * r.micro_batches == 256


def test_search_filters():
    fitting = search(SEVENTY, A64, 256, only_fitting=True)
    assert fitting and all(r.fits for r in fitting)
    assert len(search(SEVENTY, A64, 256, top=5)) == 5
    one = search(SEVENTY, A64, 256, micro_batch_sizes=[1], zero_stages=[1],
                 recomputes=["selective"], sequence_parallel=[True], max_virtual_stages=1)
    assert {(r.micro_batch, r.zero_stage, r.recompute, r.virtual_stages) for r in one} \
        == {(1, 1, "selective", 1)}


def test_70b_does_not_fit_on_one_gpu_worth_of_memory_without_splitting():
    # 16 bytes per parameter (ZeRO Section 3.1): 69B * 16 = 1.1 TB >> 80 GB
    r = plan(SEVENTY, A64, 64, dp=64, tp=1, pp=1, micro_batch=1)
    assert not r.fits and r.memory.params + r.memory.grads + r.memory.optimizer > 1e12




@pytest.mark.parametrize("kwargs", [
    dict(compute_efficiency=0), dict(dp_overlap=2), dict(usable_memory_fraction=0),
    dict(precision="fp8"),
])
def test_bad_assumptions_raise(kwargs):
    with pytest.raises(ValueError):
        plan(SEVENTY, A64, 128, dp=8, tp=8, pp=1, micro_batch=1, **kwargs)


def test_the_as_built_count_asks_for_a_swiglu_model():
    with pytest.raises(ValueError, match="choose activation_count in"):
        plan(SEVENTY, A64, 128, dp=8, tp=8, pp=1, micro_batch=1, activation_count="measured")
    with pytest.raises(ValueError, match="MLP is not gated: use 'korthikanti'"):
        plan(TOY, TINY, 8, dp=2, tp=2, pp=2, micro_batch=1, activation_count="as_built")
    # Llama 2 70B counted as built keeps a little less than Korthikanti's GPT layer:
    # 12 + 4 x 8/64 K/V heads + 6 x 28672/8192 = 12 + 0.5 + 21 = 33.5 sbh/t against 34
    kw = dict(dp=8, tp=8, pp=1, micro_batch=1, sequence_parallel=True)
    built = plan(SEVENTY, A64, 128, activation_count="as_built", **kw)
    gpt = plan(SEVENTY, A64, 128, **kw)
    assert built.memory.activations < gpt.memory.activations
    # the same embedding and output terms; 80 layers, s b h / t = 4096 x 8192 / 8 bytes each
    assert gpt.memory.activations - built.memory.activations == pytest.approx(
        80 * (34 - 33.5) * 4096 * 8192 / 8)


def test_fp32_counts_four_byte_states_and_activations():
    kw = dict(dp=8, tp=8, pp=1, micro_batch=1)
    mixed = plan(SEVENTY, A64, 128, **kw)
    fp32 = plan(SEVENTY, A64, 128, precision="fp32", **kw)
    assert fp32.memory.activations == pytest.approx(2 * mixed.memory.activations)
    assert fp32.memory.params == pytest.approx(2 * mixed.memory.params)      # 4 vs 2 bytes
    # twice the bytes on the wire, the same per-step latency
    assert mixed.time.tp_comm < fp32.time.tp_comm < 2 * mixed.time.tp_comm


# -- ZeRO-2/3 with pipelining: DeepSpeed's rule by default, allowed on request ------------

def test_sharded_pp_is_deepspeeds_rule_and_can_be_lifted():
    kw = dict(dp=4, tp=8, pp=2, micro_batch=1, zero_stage=3)
    with pytest.raises(ValueError, match=r"DeepSpeed.*allow_sharded_pp=True"):
        plan(SEVENTY, A64, 128, **kw)
    r = plan(SEVENTY, A64, 128, allow_sharded_pp=True, **kw)
    assert r.zero_stage == 3 and r.micro_batches == 32
    # priced per micro-batch (Llama 3, Dubey et al. 2024 Section 3.3.2, and torchtitan
    # combine FSDP with pipelining): reduce-scatter + 2 all-gathers of the stage's 2-byte
    # gradients over dp = 4 (stride 8: one rank per node, its own 25 GB/s NIC), m = 32 times
    grads = 2 * SEVENTY.n_params / (8 * 2)
    one = 3 * (3 / 4 * grads / 25e9 + 3 * 10e-6)
    assert r.time.dp_comm == pytest.approx(32 * one)


def test_search_considers_sharded_pp_only_when_asked():
    kw = dict(micro_batch_sizes=(1,), recomputes=("none",), sequence_parallel=(True,))
    default = search(SEVENTY, A64, 128, **kw)
    allowed = search(SEVENTY, A64, 128, allow_sharded_pp=True, **kw)
    assert not any(r.pp > 1 and r.zero_stage >= 2 for r in default)
    assert any(r.pp > 1 and r.zero_stage == 3 for r in allowed)
    assert len(allowed) > len(default)


def test_the_planner_and_its_model_share_one_set_of_names():
    # planner.py (the rules, plan, search) and evaluate.py (one configuration's memory and
    # time) are two modules; the public names stay where readers import them from
    import threeaxes.cost as cost
    from threeaxes.cost import evaluate, planner
    for name in ("PlanResult", "TimeBreakdown", "DEFAULT_COMPUTE_EFFICIENCY", "SHAPES"):
        assert getattr(cost, name) is getattr(planner, name) is getattr(evaluate, name)
    assert cost.plan is planner.plan and cost.search is planner.search
