"""Activation memory against Korthikanti et al. 2022, Table 2 and Section 4-5.

Each expected value is the paper's formula typed in here, evaluated by hand
for the paper's own model shapes (Table 3: s = 2048, t = 8)."""
import pytest

from threeaxes.cost import activation_bytes, first_stage_activation_bytes

# Korthikanti et al. 2022, Table 3: (name, heads a, hidden h, layers L, t, p)
TABLE_3 = [
    ("22B", 64, 6144, 48, 8, 1),
    ("175B", 96, 12288, 96, 8, 8),
    ("530B", 128, 20480, 105, 8, 35),
    ("1T", 160, 25600, 128, 8, 64),
]
S = 2048


def table_2(s, b, h, a, t):
    """Korthikanti Table 2, typed in: bytes per layer."""
    sbh = s * b * h
    return {
        ("none", False, 1): sbh * (34 + 5 * a * s / h),
        ("none", False, t): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        ("none", True, t): sbh * (34 / t + 5 * a * s / (h * t)),
        ("selective", False, t): sbh * (10 + 24 / t),
        ("selective", True, t): sbh * 34 / t,
        ("full", False, t): 2 * sbh,
    }


@pytest.mark.parametrize("name, a, h, L, t, p", TABLE_3)
@pytest.mark.parametrize("b", [1, 4])
def test_table_2_rows(name, a, h, L, t, p, b):
    for (recompute, sp, tp), expected in table_2(S, b, h, a, t).items():
        got = activation_bytes(S, b, h, a, tp=tp, sequence_parallel=sp, recompute=recompute)
        assert got.per_layer == pytest.approx(expected, rel=1e-12), (recompute, sp, tp)
        got_l = activation_bytes(S, b, h, a, n_layers=L, tp=tp, sequence_parallel=sp,
                                 recompute=recompute)
        assert got_l.total == pytest.approx(L * expected, rel=1e-12)


def test_no_parallelism_by_hand():
    # s=4, b=2, h=8, a=2: sbh = 64; 34*64 + 5*a*s^2*b = 2176 + 5*2*16*2 = 2496
    got = activation_bytes(4, 2, 8, 2)
    assert got.linear == 2176 and got.attention == 320 and got.per_layer == 2496


def test_tensor_parallel_with_t_1_is_the_unparallelised_row():
    a = activation_bytes(S, 1, 6144, 64, tp=1)
    b = activation_bytes(S, 1, 6144, 64, tp=1, sequence_parallel=True)
    assert a.per_layer == pytest.approx(b.per_layer)


@pytest.mark.parametrize("name, a, h, L, t, p", TABLE_3)
def test_about_five_times_less_activation_memory(name, a, h, L, t, p):
    # Korthikanti abstract: sequence parallelism plus selective
    # recomputation cut activation memory about 5x against tensor parallelism
    # alone. From Table 2: (10 + 24/t + 5as/(ht)) / (34/t).
    base = activation_bytes(S, 1, h, a, tp=t).per_layer
    ours = activation_bytes(S, 1, h, a, tp=t, sequence_parallel=True,
                            recompute="selective").per_layer
    expected_ratio = (10 + 24 / t + 5 * a * S / (h * t)) / (34 / t)
    assert base / ours == pytest.approx(expected_ratio)
    assert 4.5 < base / ours < 6.5


@pytest.mark.parametrize("a, h, saved", [(96, 12288, 0.70), (128, 20480, 0.65)])
def test_selective_recompute_savings_section_5(a, h, saved):
    # Korthikanti Section 5: for GPT-3 (5as/h = 80) selective recomputation
    # saves 70% of the activation memory, for MT-NLG (5as/h = 64) 65%
    full = activation_bytes(S, 1, h, a, tp=8, sequence_parallel=True).per_layer
    sel = activation_bytes(S, 1, h, a, tp=8, sequence_parallel=True,
                           recompute="selective").per_layer
    assert round(1 - sel / full, 2) == saved


def test_first_stage_1f1b_holds_L_layers_eq_5():
    # Korthikanti eq. 5: the first stage holds p micro-batches through L/p
    # layers each: sbhL/t (34 + 5as/h), whatever p is.
    s, b, h, a, L, t = S, 1, 12288, 96, 96, 8
    expected = s * b * h * L / t * (34 + 5 * a * s / h)
    for p in (1, 2, 4, 8, 16):
        got = first_stage_activation_bytes(s, b, h, a, n_layers=L, tp=t, pp=p,
                                           sequence_parallel=True)
        assert got.transformer == pytest.approx(expected)
        assert got.in_flight == p


def test_first_stage_interleaved_factor():
    # Korthikanti Section 4.2.3: interleaving with v chunks scales the first
    # stage's activations by 1 + (p - 1)/(p v). 530B: p = 35, v = 3.
    s, b, h, a, L, t, p, v = S, 1, 20480, 128, 105, 8, 35, 3
    got = first_stage_activation_bytes(s, b, h, a, n_layers=L, tp=t, pp=p,
                                       micro_batches=280, virtual_stages=v,
                                       sequence_parallel=True, recompute="selective")
    assert got.interleave_factor == pytest.approx(1 + 34 / 105)
    assert got.transformer == pytest.approx(34 * s * b * h * L / t * (1 + 34 / 105))


def test_first_stage_few_microbatches_and_gpipe():
    kw = dict(n_layers=8, tp=1, pp=4)
    one = activation_bytes(16, 1, 32, 4).per_layer
    # 1F1B with m=2 < p=4: only 2 micro-batches in flight, 8/4 layers each
    assert first_stage_activation_bytes(16, 1, 32, 4, micro_batches=2, **kw).transformer \
        == pytest.approx(2 * 2 * one)
    # GPipe keeps all m micro-batches (Huang et al. 2019): m=12 -> 12 * 2 layers
    assert first_stage_activation_bytes(16, 1, 32, 4, micro_batches=12, schedule="gpipe",
                                        **kw).transformer == pytest.approx(12 * 2 * one)


def test_embedding_extras_section_4_3():
    # Korthikanti Section 4.3: sbhp/t for the embedding dropout; with p = 1 also
    # 4sbh/t (1 + v/h) for the final norm, output layer and fp32 logits
    s, b, h, a, t, v = 8, 1, 16, 4, 2, 100
    p1 = first_stage_activation_bytes(s, b, h, a, n_layers=4, tp=t, pp=1,
                                      sequence_parallel=True, vocab_size=v)
    assert p1.embeddings == pytest.approx(s * b * h / t + 4 * s * b * h / t * (1 + v / h))
    p2 = first_stage_activation_bytes(s, b, h, a, n_layers=4, tp=t, pp=2,
                                      sequence_parallel=True, vocab_size=v)
    assert p2.embeddings == pytest.approx(s * b * h * 2 / t)


@pytest.mark.parametrize("kwargs", [
    dict(recompute="some"), dict(tp=0), dict(n_layers=-1),
])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        activation_bytes(2048, 1, 4096, 32, **kwargs)


def test_first_stage_bad_arguments_raise():
    with pytest.raises(ValueError, match="equal chunks"):
        first_stage_activation_bytes(16, 1, 32, 4, n_layers=6, pp=4)
    with pytest.raises(ValueError):
        first_stage_activation_bytes(16, 1, 32, 4, n_layers=8, pp=2, schedule="gpipe",
                                     virtual_stages=2)
    with pytest.raises(ValueError):
        first_stage_activation_bytes(16, 1, 32, 4, n_layers=8, pp=2, schedule="interleaved")


def test_in_flight_falls_along_the_pipeline():
    # 1F1B: stage r runs p - r warm-up forwards (Narayanan et al. 2021, 2.2.1)
    from threeaxes.cost import in_flight_micro_batches
    assert [in_flight_micro_batches(4, 8, stage=r) for r in range(4)] == [4, 3, 2, 1]
    assert [in_flight_micro_batches(4, 2, stage=r) for r in range(4)] == [2, 2, 2, 1]
    assert in_flight_micro_batches(4, 8, stage=3, schedule="gpipe") == 8
    with pytest.raises(ValueError, match="choose stage in 0..3"):
        in_flight_micro_batches(4, 8, stage=4)


def _peak_held(events):
    """Most model-chunk micro-batches a rank holds: a forward stores its
    activations when it starts, the matching backward frees them when it ends."""
    points = sorted([(e.start, 1, +1) if e.op == "forward" else (e.end, 0, -1) for e in events])
    held = peak = 0
    for _, _, step in points:
        held += step
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_in_flight_matches_a_simulated_schedule(p, v):
    # an independent code path: run the schedule, count what each rank holds
    from threeaxes.cost import in_flight_micro_batches
    from threeaxes.pipeline import make_plan, simulate
    for m in ([p, 2 * p, 4 * p] if v > 1 else [1, 2, 3, 5, 16]):
        sim = simulate(make_plan("interleaved" if v > 1 else "1f1b", p, m, v))
        for r in range(p):
            expected = in_flight_micro_batches(p, m, stage=r, virtual_stages=v) * v
            assert _peak_held(sim.events[r]) == expected, (p, v, m, r)


def test_in_flight_matches_pipeline_plans():
    from threeaxes.cost import in_flight_micro_batches
    from threeaxes.pipeline import gpipe, one_f_one_b, peak_in_flight
    for p, m in [(4, 8), (4, 2), (3, 7)]:
        plan = one_f_one_b(p, m)
        for s in range(p):
            assert peak_in_flight(plan, s) == in_flight_micro_batches(p, m, stage=s)
        plan = gpipe(p, m)
        assert peak_in_flight(plan, 0) == in_flight_micro_batches(p, m, schedule="gpipe")


def test_interleaved_with_m_equal_p_holds_everything():
    # Megatron-LM runs every forward first when m == p: all m v chunks, L layers
    from threeaxes.cost import in_flight_micro_batches
    assert in_flight_micro_batches(4, 4, virtual_stages=2) == 4
    got = first_stage_activation_bytes(16, 1, 32, 4, n_layers=8, pp=4, micro_batches=4,
                                       virtual_stages=2)
    assert got.transformer == pytest.approx(activation_bytes(16, 1, 32, 4).per_layer * 8)


# -- memory-efficient attention (FlashAttention, Dao et al. 2022) ------------------------

@pytest.mark.parametrize("t, sp, per_sbh", [
    (1, False, 34),              # Korthikanti Table 2, no parallelism, without 5as/h
    (4, False, 10 + 24 / 4),     # tensor parallel: 10 sbh stay whole, 24 sbh split
    (4, True, 34 / 4),           # tensor + sequence parallel: all 34 split
    (8, True, 34 / 8),
])
def test_flash_attention_drops_exactly_the_score_term(t, sp, per_sbh):
    s, b, h, a = 4096, 2, 5120, 40
    with_scores = activation_bytes(s, b, h, a, tp=t, sequence_parallel=sp)
    flash = activation_bytes(s, b, h, a, tp=t, sequence_parallel=sp, flash_attention=True)
    # sbh (34 + 5as/h) per layer without parallelism: the score term is 5 a s^2 b / t
    assert with_scores.attention == pytest.approx(5 * a * s * s * b / t)
    assert flash.attention == 0
    assert flash.per_layer == pytest.approx(s * b * h * per_sbh)
    assert flash.linear == with_scores.linear
    # the same term Korthikanti's selective recomputation removes (Table 2, its rows
    # sbh (10 + 24/t) and sbh 34/t)
    selective = activation_bytes(s, b, h, a, tp=t, sequence_parallel=sp, recompute="selective")
    assert flash.per_layer == pytest.approx(selective.per_layer)


def test_flash_attention_memory_is_linear_in_the_sequence():
    # Dao et al. 2022, Section 3.1 / Theorem 1: extra memory O(N), not O(N^2). Doubling s
    # doubles a layer's activations; with the scores stored it more than doubles.
    h, a = 5120, 40
    for t, sp in ((1, False), (4, False), (4, True)):
        one, two = (activation_bytes(s, 1, h, a, tp=t, sequence_parallel=sp,
                                     flash_attention=True).per_layer for s in (2048, 4096))
        assert two == pytest.approx(2 * one)
        old_one, old_two = (activation_bytes(s, 1, h, a, tp=t, sequence_parallel=sp).per_layer
                            for s in (2048, 4096))
        assert old_two > 2.5 * old_one


def test_flash_attention_reaches_the_first_stage_and_full_recompute_ignores_it():
    kw = dict(n_layers=8, tp=2, pp=2, micro_batches=4)
    old = first_stage_activation_bytes(64, 1, 32, 4, **kw)
    new = first_stage_activation_bytes(64, 1, 32, 4, flash_attention=True, **kw)
    layers_in_flight = 8 / 2 * 2                          # L/p layers, p micro-batches
    assert old.total - new.total == pytest.approx(layers_in_flight * 5 * 4 * 64 * 64 / 2)
    full = [first_stage_activation_bytes(64, 1, 32, 4, recompute="full", flash_attention=f, **kw)
            for f in (False, True)]
    assert full[0].total == full[1].total


def test_llama_layer_by_hand_against_the_gpt_formula():
    from threeaxes.cost import llama_layer_bytes
    s, b = 4096, 1
    # f = 4h and as many K/V heads as heads: norms 4 + QKV input 2 + Q 2 + K, V 4
    # + attention output 2 + MLP input 2 + gate, up, SiLU output, product 8 f/h = 32
    assert llama_layer_bytes(s, b, 64, 4, ffn_hidden=256) == s * b * 64 * (12 + 4 + 32)
    # Llama 2 70B (h 8192, 64 heads, 8 K/V heads, f 28672): 12 + 0.5 + 28 = 40.5 sbh
    h = 8192
    seventy = dict(n_kv_heads=8, ffn_hidden=28672)
    assert llama_layer_bytes(s, b, h, 64, **seventy) == pytest.approx(s * b * h * 40.5)
    # tp = 8 without SP: 8 sbh whole, 32.5 / 8 split; with SP everything over 8
    assert llama_layer_bytes(s, b, h, 64, tp=8, **seventy) == pytest.approx(
        s * b * h * (8 + 32.5 / 8))
    assert llama_layer_bytes(s, b, h, 64, tp=8, sequence_parallel=True, **seventy) == \
        pytest.approx(s * b * h * 40.5 / 8)
    # against the GPT-style 34 sbh with memory-efficient attention: 19% more for 70B
    gpt = activation_bytes(s, b, h, 64, flash_attention=True).per_layer
    assert llama_layer_bytes(s, b, h, 64, **seventy) / gpt == pytest.approx(40.5 / 34)


def test_llama3_405b_layer_as_megatron_core_builds_it_by_hand():
    from threeaxes.cost import llama_layer_bytes
    s, b, h, t = 8192, 1, 16384, 8
    llama3 = dict(n_kv_heads=8, ffn_hidden=53248)
    # Transformer Engine's fused modules keep, per sbh/t with sequence parallelism:
    # attention: norm input 2, normed input 2, Q 2, K and V 4 x 8/128, output 2;
    # MLP: norm input 2, normed input 2, gate and up side by side 4 f/h, SwiGLU output 2 f/h
    by_hand = 2 + 2 + 2 + 4 * 8 / 128 + 2 + 2 + 2 + 6 * 53248 / 16384          # 31.75
    fused = llama_layer_bytes(s, b, h, 128, tp=t, sequence_parallel=True, fused_swiglu=True,
                              **llama3)
    assert fused == pytest.approx(s * b * h * by_hand / t) and by_hand == 31.75
    # eager PyTorch keeps the SiLU's output too: 2 f/h more
    eager = llama_layer_bytes(s, b, h, 128, tp=t, sequence_parallel=True, **llama3)
    assert eager - fused == pytest.approx(s * b * h * 2 * 53248 / 16384 / t)
    # activation_bytes counts it so when asked, and full recomputation still keeps 2 sbh
    built = activation_bytes(s, b, h, 128, tp=t, sequence_parallel=True, flash_attention=True,
                             count="as_built", **llama3)
    assert built.per_layer == pytest.approx(fused)
    full = activation_bytes(s, b, h, 128, tp=t, sequence_parallel=True, recompute="full",
                            count="as_built", **llama3)
    assert full.per_layer == 2 * s * b * h


def test_as_built_needs_a_swiglu_layer_and_keeps_only_the_softmax_without_flash():
    with pytest.raises(ValueError, match="give its ffn_hidden"):
        activation_bytes(64, 1, 32, 4, count="as_built")
    with pytest.raises(ValueError, match="choose count in"):
        activation_bytes(64, 1, 32, 4, count="measured")
    # no dropout: of Korthikanti's 5 bytes per score only the softmax output's 2 stay
    kw = dict(tp=2, count="as_built", ffn_hidden=64)
    scores = (activation_bytes(64, 1, 32, 4, **kw).per_layer
              - activation_bytes(64, 1, 32, 4, flash_attention=True, **kw).per_layer)
    assert scores == 2 * 4 * 64 * 64 / 2


def test_first_chunk_in_flight_follows_megatrons_forward_order():
    from threeaxes.cost import first_chunk_in_flight
    # Dubey et al. 2024, Figure 6: 4 ranks, 2 chunks each, 10 micro-batches in groups of 5.
    # Rank 0 runs 2 (p - 1) + (v - 1) N + 1 = 12 forwards before its first backward:
    # chunk 0 for micro-batches 1-5, chunk 1 for 1-5, chunk 0 for 6 and 7: 7 of them chunk 0
    assert first_chunk_in_flight(4, 10, virtual_stages=2, group=5) == 7
    # Llama 3 405B at 8K: 16 stages, 8 one-layer chunks, 32 micro-batches in groups of 16:
    # 30 + 112 + 1 = 143 forwards, 16 + 15 of them through chunk 0 (the embedding)
    assert first_chunk_in_flight(16, 32, virtual_stages=8, group=16) == 31
    # all m v forwards fit (m = 16): each micro-batch once through chunk 0
    assert first_chunk_in_flight(16, 16, virtual_stages=8, group=16) == 16
    # no interleaving: every micro-batch in flight holds the whole stage, chunk 0 included
    assert first_chunk_in_flight(16, 32) == 16 and first_chunk_in_flight(16, 4) == 4


def test_an_embedding_slot_holds_no_layer_activations():
    # 16 slots on 4 stages, 2 chunks of 2 slots each, 8 micro-batches (group p = 4):
    # rank 0 holds 2 x 3 + 4 + 1 = 11 chunk forwards = 22 slots, 4 + 3 of them
    # chunk 0's, each with the embedding in one of its two slots: 22 - 7 = 15 layers
    kw = dict(n_layers=16, pp=4, micro_batches=8, schedule="interleaved", virtual_stages=2,
              flash_attention=True)
    layer = activation_bytes(64, 1, 32, 4, flash_attention=True).per_layer
    plain = first_stage_activation_bytes(64, 1, 32, 4, **kw)
    slot = first_stage_activation_bytes(64, 1, 32, 4, embedding_slot=True, **kw)
    assert plain.transformer == pytest.approx(22 * layer)
    assert slot.transformer == pytest.approx(15 * layer)
