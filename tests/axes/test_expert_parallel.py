"""Expert parallelism on the toy (drop 16): the MoE layer against a token-by-token loop written
here, the expert-parallel run on 2 and 4 gloo ranks against one process holding every expert
(forward and backward, float64, dropped tokens included), and the all-to-all bytes in the
trace against the formula and against the cost model's pairwise all-to-all."""
import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from threeaxes.cost.experts import expert_all_to_all_bytes
from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.expert_parallel import MoEConfig, MoEToy, expert_capacity, moe_all_to_all_bytes, moe_layers, skew_router_
from threeaxes.expert_parallel.measure import bytes_per_rank, ep_steps, load_by_expert
from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, lm_loss, make_batch

CFG = ToyConfig(dtype=torch.float64)


# -- capacity: the papers' definitions, by hand ---------------------------------------------

def test_capacity_is_the_even_share_times_the_factor_rounded_up():
    # Switch Transformer (Fedus et al. 2022, eq. 3): tokens / experts * capacity factor
    assert expert_capacity(6, 3, 1, 1.0) == 2
    assert expert_capacity(6, 3, 1, 1.5) == 3
    # GShard's top-2 (Lepikhin et al. 2020, Section 2.2): 2N/E
    assert expert_capacity(8, 4, 2, 1.0) == 4
    # 10 / 4 * 1.1 = 2.75 slots: rounded up to 3; 1.1 * 10 is not exactly 11 in floats
    assert expert_capacity(10, 4, 1, 1.1) == 3
    assert expert_capacity(40, 4, 1, 1.1) == 11


@pytest.mark.parametrize("bad, says", [
    (dict(n_experts=0), "positive integer"), (dict(top_k=5), "choose top_k in 1..n_experts=4"),
    (dict(capacity_factor=0), "positive number"), (dict(capacity_factor="1"), "positive number")])
def test_a_bad_config_says_what_to_change(bad, says):
    with pytest.raises(ValueError, match=says.replace(".", r"\.")):
        MoEConfig(**bad)


def test_ep_must_divide_the_experts():
    with pytest.raises(ValueError, match=r"ep=3 does not divide n_experts=4.*\{1, 2, 4\}"):
        MoEConfig(n_experts=4).check_ep(3)
    with pytest.raises(ValueError, match="does not divide n_experts"):
        moe_all_to_all_bytes(64, 32, 4, 3)


# -- the single-process layer against a loop over tokens ---------------------------------------

def loop_moe(layer, x, groups):
    """The MoE layer token by token, in plain Python: the router's softmax, the top k, slots
    handed out first choices first, a choice dropped when its expert is full."""
    moe, d = layer.moe, x.shape[-1]
    E, k = moe.n_experts, moe.top_k
    tokens = x.reshape(groups, -1, d)
    T = tokens.shape[1]
    ex = layer.experts
    choices = []   # per group, per token: [(expert, gate), ...] best first
    for g in range(groups):
        probs = F.softmax(layer.router(tokens[g]), dim=-1)
        rows = []
        for t in range(T):
            best = sorted(range(E), key=lambda e: -probs[t, e].item())[:k]
            total = sum(probs[t, e] for e in best) if k > 1 else 1.0
            rows.append([(e, probs[t, e] / total) for e in best])
        choices.append(rows)
    if moe.capacity_factor is None:
        capacity = max(sum(1 for row in rows for e, _ in row if e == want)
                       for rows in choices for want in range(E))
    else:
        capacity = math.ceil(Fraction(k * T) * Fraction(str(moe.capacity_factor)) / E)
    out, dropped = [], 0
    for g in range(groups):
        filled = [0] * E
        ys = [torch.zeros(d, dtype=x.dtype) for _ in range(T)]
        for j in range(k):
            for t in range(T):
                e, gate = choices[g][t][j]
                if filled[e] == capacity:
                    dropped += 1
                    continue
                filled[e] += 1
                h = F.gelu(tokens[g, t] @ ex.w_in[e] + ex.in_bias[e, 0])
                ys[t] = ys[t] + gate * (h @ ex.w_out[e] + ex.out_bias[e, 0])
        out.append(torch.stack(ys))
    return torch.stack(out).reshape(x.shape), dropped


@pytest.mark.parametrize("moe, groups, skew", [
    (MoEConfig(4, 1, 0.5), 2, 0.0), (MoEConfig(4, 2, 1.0), 4, 0.0), (MoEConfig(8, 2, None), 2, 0.05)])
def test_moe_layer_equals_a_loop_over_tokens_forward_and_backward(moe, groups, skew):
    model = skew_router_(MoEToy(CFG, moe, seed=3), 1, skew) if skew else MoEToy(CFG, moe, seed=3)
    layer = model.blocks[0].mlp
    layer.groups = groups
    x = torch.randn(4, CFG.seq_len, CFG.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    probe = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    got = layer(x)
    want, dropped = loop_moe(layer, x, groups)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert sum(r.dropped() for r in layer.routings) == dropped
    if moe.capacity_factor is not None and moe.capacity_factor < 1:
        assert dropped > 0, "a capacity factor below 1 must drop some choices"
    grads = torch.autograd.grad((got * probe).sum(), list(layer.parameters()))
    wants = torch.autograd.grad((want * probe).sum(), list(layer.parameters()))
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_a_skewed_router_piles_the_tokens_on_its_expert():
    x, y = make_batch(CFG, 8)
    model = skew_router_(MoEToy(CFG, MoEConfig(4, 1, 1.0)), expert=2, strength=0.5).set_groups(2)
    model(x)
    for layer in moe_layers(model):
        load = [sum(v) for v in zip(*(r.load() for r in layer.routings))]
        assert max(load) == load[2] and load[2] > 2 * sum(load) / 4, load
        # top-1: every choice past an expert's capacity in its group is dropped
        over = sum(max(0, n - r.capacity) for r in layer.routings for n in r.load())
        assert sum(r.dropped() for r in layer.routings) == over > 0


# -- on ranks: equal to one process, bytes equal to the formula --------------------------------

def reference(moe, inputs, targets, groups, skew=0.0):
    model = MoEToy(CFG, moe)
    if skew:
        skew_router_(model, 0, skew)
    model.set_groups(groups)
    logits = model(inputs)
    loss = lm_loss(logits, targets)
    loss.backward()
    return model, logits.detach(), loss.item()


def check_equal_to_one_process(results, model, logits, loss):
    torch.testing.assert_close(torch.cat([r["logits"] for r in results]), logits, rtol=1e-12, atol=1e-12)
    assert sum(r["loss"] for r in results) == pytest.approx(loss, rel=1e-12)
    for name, p in model.named_parameters():
        if ".experts." in name:   # each rank holds E/ep experts, in rank order
            got = torch.cat([r["grads"][name] for r in results])
        else:                     # copies: every rank holds the same summed gradient
            got = results[0]["grads"][name]
            for r in results[1:]:
                torch.testing.assert_close(r["grads"][name], got, rtol=0, atol=0)
        torch.testing.assert_close(got, p.grad, rtol=1e-10, atol=1e-13, msg=name)


RUNS = {   # one launch per ep size, several runs in it (launching is the slow part)
    2: [{"moe": MoEConfig(4, 1, 0.75)}, {"moe": MoEConfig(4, 2, 1.0)}],
    4: [{"moe": MoEConfig(4, 2, 0.5)}, {"moe": MoEConfig(4, 2, None), "skew": 0.05}],
}


@pytest.fixture(scope="module", params=[2, 4], ids=["ep2", "ep4"])
def ranks(request):
    ep = request.param
    inputs, targets = make_batch(CFG, 8, seed=ep)
    per_rank = launch(ep_steps, ep, CFG, RUNS[ep], inputs, targets, timeout=180)
    runs = [[rank[i] for rank in per_rank] for i in range(len(RUNS[ep]))]
    return ep, inputs, targets, runs


def test_forward_and_backward_equal_one_process_holding_every_expert(ranks):
    ep, inputs, targets, runs = ranks
    for run, results in zip(RUNS[ep], runs):
        model, logits, loss = reference(run["moe"], inputs, targets, ep, run.get("skew", 0.0))
        check_equal_to_one_process(results, model, logits, loss)
        layers = load_by_expert(results)
        assert [l["dropped"] for l in layers] == [sum(r.dropped() for r in m.routings)
                                                 for m in moe_layers(model)]
        if run["moe"].capacity_factor is not None and run["moe"].capacity_factor < 1:
            assert all(layer["dropped"] > 0 for layer in layers), "a factor below 1 drops choices"


def test_traced_all_to_all_bytes_equal_the_formula(ranks):
    ep, _, _, runs = ranks
    tokens = 8 // ep * CFG.seq_len            # this rank's rows of the batch, times the sequence
    for run, results in zip(RUNS[ep], runs):
        moe = run["moe"]
        if moe.capacity_factor is None:
            continue
        formula = moe_all_to_all_bytes(tokens, CFG.d_model, moe.n_experts, ep, top_k=moe.top_k,
                                       capacity_factor=moe.capacity_factor, bytes_per_element=8)
        # by hand: C = ceil(k T cf / E), S = E C d 8 bytes, (ep - 1)/ep of it sent, 4 per layer
        C = math.ceil(Fraction(moe.top_k * tokens) * Fraction(str(moe.capacity_factor)) / moe.n_experts)
        assert formula["capacity"] == C and formula["size"] == moe.n_experts * C * CFG.d_model * 8
        assert bytes_per_rank(results, CFG.n_layers) == [4 * formula["size"]] * ep
        for r, result in enumerate(results):
            events = result["trace"].comms(op="all_to_all", rank=r)
            assert len(events) == 4 * CFG.n_layers and {e.group for e in events} == {tuple(range(ep))}
            sent = sum(bytes_sent_per_gpu("all_to_all", e.bytes, len(e.group)) for e in events)
            assert sent == CFG.n_layers * formula["sent_per_layer"]
        if moe.capacity_factor == 1.0 and (moe.top_k * tokens) % moe.n_experts == 0:
            # no padding at an even share: the cost model's balanced count, 4 per layer
            balanced = expert_all_to_all_bytes(tokens, CFG.d_model, moe.top_k, ep, dtype_bytes=8)
            assert formula["sent_per_layer"] == 4 * balanced


def test_a_skewed_router_without_capacity_pads_every_rank_to_the_busiest_expert(ranks):
    ep, _, _, runs = ranks
    for run, results in zip(RUNS[ep], runs):
        if run["moe"].capacity_factor is not None:
            continue
        tokens, n = 8 // ep * CFG.seq_len, CFG.n_layers
        balanced = moe_all_to_all_bytes(tokens, 32, 4, ep, top_k=2, capacity_factor=1.0, bytes_per_element=8)
        measured = [e.bytes for e in results[0]["trace"].comms(op="all_to_all", rank=0)]
        forward, backward = measured[:2 * n], measured[2 * n:]   # backward runs the last layer first
        for i, layer in enumerate(load_by_expert(results)):
            assert layer["dropped"] == 0 and layer["kept"] == layer["load"]
            # every rank pads to the busiest expert on any rank: the trace's S is E * C * d * 8
            busiest = max(max(r["routing"][i]["load"]) for r in results)
            assert {r["routing"][i]["capacity"] for r in results} == {busiest}
            assert busiest > balanced["capacity"], "the skew makes the busiest expert busier than its share"
            j = n - 1 - i
            assert forward[2 * i: 2 * i + 2] + backward[2 * j: 2 * j + 2] == [4 * busiest * 32 * 8] * 4
        # the agreement on the busiest load: one all-reduce of an 8-byte count per layer, in
        # forward; after backward, one all-reduce per copied (non-expert) weight, of its gradient
        reduces = [e.bytes for e in results[0]["trace"].comms(op="all_reduce", axis="ep", rank=0)]
        model = MoEToy(CFG, run["moe"])
        copied = [p for name, p in model.named_parameters() if ".experts." not in name]
        assert reduces[:n] == [8] * n
        assert sorted(reduces[n:]) == sorted(p.numel() * 8 for p in copied)
