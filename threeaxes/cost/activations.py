"""Activation memory: what the backward pass needs the forward pass to keep."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["RECOMPUTE", "ACTIVATION_COUNTS", "ActivationBytes", "FirstStageActivations",
           "activation_bytes", "first_stage_activation_bytes", "first_chunk_in_flight",
           "in_flight_micro_batches", "llama_layer_bytes"]

RECOMPUTE = ("none", "selective", "full")

# how a layer's stored activations are counted (``activation_bytes``): Korthikanti et al.'s
# GPT layer, or the model's own layer as Megatron Core builds it (gated MLPs only)
ACTIVATION_COUNTS = ("korthikanti", "as_built")


class ActivationBytes(NamedTuple):
    """Activation bytes one GPU stores for one micro-batch, by term."""
    linear: float          # the sbh(...) part: layer inputs, Q/K/V, MLP, norms, masks
    attention: float       # the 5 a s^2 b part: softmax, its dropout mask and output (0 with flash)
    per_layer: float       # linear + attention
    n_layers: int
    total: float           # per_layer * n_layers


def _check(name: str, value: float, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, *,
                     n_layers: int = 1, tp: int = 1, sequence_parallel: bool = False,
                     recompute: str = "none", flash_attention: bool = False,
                     count: str = "korthikanti", n_kv_heads: int | None = None,
                     ffn_hidden: int | None = None) -> ActivationBytes:
    """Activation bytes per GPU for one micro-batch through ``n_layers`` layers.

    Source: Korthikanti et al. 2022, Table 2 (per transformer layer, bytes):

    ========================================  ===========================
    no parallelism                            sbh (34 + 5as/h)      eq. 1
    tensor parallel                           sbh (10 + 24/t + 5as/(ht))  eq. 2
    tensor + sequence parallel                sbh/t (34 + 5as/h)    eq. 4
    tensor parallel + selective recompute     sbh (10 + 24/t)
    tensor + sequence + selective recompute   sbh (34/t)            eq. 6
    full recompute                            2 sbh  (Section 5, Table 2)
    ========================================  ===========================

    With t = 1 the tensor-parallel rows fall back to the no-parallelism row.
    Full recomputation keeps only each layer's input, 2sbh (the paper does not
    split it over t, since that would cost an extra all-gather).

    ``flash_attention=True``: attention that never stores the s x s scores
    (FlashAttention, Dao et al. 2022; see below). The 5as^2b/t term
    is 0, as under selective recomputation; the linear terms are unchanged.
    Default False: the paper's rows, attention as Megatron-LM ran it in 2022.

    ``count="as_built"``: a SwiGLU layer (give ``ffn_hidden``, and ``n_kv_heads``
    for grouped-query attention) counted tensor by tensor as Megatron Core builds
    it from Transformer Engine's fused modules, no dropout
    (``llama_layer_bytes(..., fused_swiglu=True)``) instead of the GPT layer's 34;
    full recomputation and the scores' term are as above.

    Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    Transformer Models" (arXiv 2205.05198, MLSys 2023). Section 4.1 derives the
    per-layer bytes with 16-bit activations and 1-byte dropout masks; Table 2
    lists them for each mix of tensor parallelism (t), sequence parallelism and
    recomputation. Variables follow the paper: s sequence length, b micro-batch
    size, h hidden size, a attention heads, L layers, p pipeline stages.

    Memory-efficient attention (``flash_attention=True``): FlashAttention (Dao
    et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with
    IO-Awareness", Section 3.1 and Theorem 1) computes softmax(QK^T)V in tiles
    and recomputes the scores in the backward pass, so it never stores the s x s
    matrices: extra memory linear in s. Korthikanti's 5as^2b term (softmax output
    2, its dropout mask 1, the dropout's output 2 bytes per score; the raw QK^T
    is not kept) is then gone, exactly the term their selective recomputation
    removes (Section 5). What stays is the linear part: sbh * 34, sbh (10 + 24/t)
    with tensor parallelism, sbh * 34/t with sequence parallelism. FlashAttention
    also keeps the softmax's row statistics, 4 bytes per row and head (4asb),
    under 0.5% of the linear part for head sizes of 64 and up; it is left out.

    The formulas describe a GPT-style layer (multi-head attention, GeLU MLP of
    width 4h, dropout). The LLaMA presets (SwiGLU MLP of width about 8h/3,
    grouped-query attention for 70B, no dropout) are counted with the same
    formula, an approximation: drops 10 and 14 say so and size the error with
    ``llama_layer_bytes``, the same count done for a Llama layer.
    """
    if count not in ACTIVATION_COUNTS:
        raise ValueError(f"count={count!r}; choose count in {set(ACTIVATION_COUNTS)}")
    if count == "as_built" and ffn_hidden is None:
        raise ValueError("count='as_built' counts a SwiGLU layer: give its ffn_hidden "
                         "(a GPT-style layer is Korthikanti's: count='korthikanti')")
    s = _check("seq_len", seq_len)
    b = _check("micro_batch", micro_batch)
    h = _check("d_model", d_model)
    a = _check("n_heads", n_heads)
    n_layers = _check("n_layers", n_layers, minimum=0)
    t = _check("tp", tp)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r}; choose recompute in {set(RECOMPUTE)}")

    sbh = s * b * h
    if recompute == "full":
        linear, attention = 2.0 * sbh, 0.0
    else:
        if count == "as_built":
            assert ffn_hidden is not None   # checked above
            linear = llama_layer_bytes(s, b, h, a, n_kv_heads=n_kv_heads, ffn_hidden=ffn_hidden,
                                       tp=t, sequence_parallel=sequence_parallel,
                                       fused_swiglu=True)
        elif sequence_parallel:
            # every activation, including norms and dropouts, split over t (eq. 4)
            linear = sbh * 34 / t
        else:
            # layer norms and dropouts (10 sbh) are replicated on every TP rank (eq. 2)
            linear = sbh * (10 + 24 / t)
        # attention scores, softmax and its dropout: 5 a s^2 b, split over heads
        # (softmax output 2 + its dropout mask 1 + dropout output 2 bytes per score);
        # selective recomputation drops it and recomputes, memory-efficient
        # attention never writes it to memory at all
        stored = recompute != "selective" and not flash_attention
        # with no dropout (as built) only the softmax output stays: 2 bytes per score
        per_score = 2.0 if count == "as_built" else 5.0
        attention = per_score * a * s * s * b / t if stored else 0.0
    per_layer = linear + attention
    return ActivationBytes(linear, attention, per_layer, n_layers, per_layer * n_layers)


def llama_layer_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, *,
                      n_kv_heads: int | None = None, ffn_hidden: int, tp: int = 1,
                      sequence_parallel: bool = False, fused_swiglu: bool = False) -> float:
    """Activation bytes one Llama layer stores per micro-batch, with
    memory-efficient attention: the estimate the course sets beside the
    GPT-style formula to size its error for the Llama presets.

    Counted as Korthikanti et al. 2022 (Section 4.1) count a GPT layer, 2 bytes
    per 16-bit value, for Llama's layer (Touvron et al. 2023a, Section 2.2:
    RMSNorm, SwiGLU MLP of width f, no dropout; grouped K/V heads, Ainslie et
    al. 2023, in Llama 2 70B), attention by FlashAttention (no scores) and the
    SwiGLU as eager PyTorch runs it (SiLU keeps its input, the product keeps
    both factors, the down projection its input). Per layer, in sbh:

    - replicated on every tensor-parallel rank: the two norms' inputs 4, the
      QKV input 2, the MLP input 2: 8
    - split over t: Q 2, K and V 4 kv/a, attention output 2, gate and up
      outputs, SiLU output and their product 8 f/h: 4 + 4 kv/a + 8 f/h

    so 12 + 4 kv/a + 8 f/h without tensor parallelism, against GPT's 34; with
    sequence parallelism all of it over t. ``fused_swiglu``: the MLP as one
    fused module keeps it (Transformer Engine's ``LayerNormMLP``, which Megatron
    Core builds its layers from, saves the first projection's output, gate and
    up side by side, and the SwiGLU's output, recomputing the SiLU): 2 f/h
    less, 12 + 4 kv/a + 6 f/h. An estimate, not a measurement.
    """
    s, b, h, a = (_check(n, v) for n, v in (("seq_len", seq_len), ("micro_batch", micro_batch),
                                            ("d_model", d_model), ("n_heads", n_heads)))
    kv = a if n_kv_heads is None else _check("n_kv_heads", n_kv_heads)
    f, t = _check("ffn_hidden", ffn_hidden), _check("tp", tp)
    replicated = 4 + 2 + 2
    split = 2 + 4 * kv / a + 2 + (6 if fused_swiglu else 8) * f / h
    per_sbh = (replicated + split) / t if sequence_parallel else replicated + split / t
    return s * b * h * per_sbh


def in_flight_micro_batches(pp: int, micro_batches: int, *, stage: int = 0,
                            schedule: str = "1f1b", virtual_stages: int = 1,
                            group: int | None = None) -> float:
    """Micro-batches whose activations ``stage`` holds at its peak, counted in
    whole stages' worth (a model chunk of an interleaved schedule is 1/v).

    GPipe (Huang et al. 2019) runs every forward before any backward: m.
    1F1B (Narayanan et al. 2021, Section 2.2.1) lets stage r run p - r
    forwards before its first backward: min(p - r, m); Korthikanti et al.
    2022, Appendix B (Figure 9) shows this fall along the pipeline.
    Interleaved 1F1B (Section 2.2.2, Megatron-LM's warm-up) holds
    2 (p - r - 1) + (v - 1) p + 1 chunks, all m v of them when m = p: for
    stage 0 that is p (1 + (p - 1)/(p v)), Korthikanti's Section 4.2.3 factor.
    With a micro-batch group of N (``group``, default p; Megatron Core >= 0.10,
    ``constraints.interleave_group``) the warm-up runs (v - 1) N + 2 (p - r - 1)
    chunk forwards before the first backward (``get_pp_rank_microbatches`` in
    Megatron-LM's ``pipeline_parallel/schedules.py``), so 2 (p - r - 1) +
    (v - 1) N + 1 chunks are held, at most all m v.
    """
    p, m, v = (_check("pp", pp), _check("micro_batches", micro_batches),
               _check("virtual_stages", virtual_stages))
    r = stage
    if isinstance(r, bool) or int(r) != r or not 0 <= r < p:
        raise ValueError(f"stage={stage!r}; choose stage in 0..{p - 1}")
    r = int(r)
    if schedule == "gpipe":
        return m
    if schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"schedule={schedule!r}; choose schedule in {{'gpipe', '1f1b'}}")
    if v == 1:
        return min(p - r, m)
    n = p if group is None else _check("group", group)
    chunks = m * v if m == p else min(m * v, 2 * (p - r - 1) + (v - 1) * n + 1)
    return chunks / v


def first_chunk_in_flight(pp: int, micro_batches: int, *, schedule: str = "1f1b",
                          virtual_stages: int = 1, group: int | None = None) -> int:
    """How many of the micro-batches stage 0 holds at its peak are held by its
    first model chunk. Megatron-LM's interleaved forward order runs a group of
    N micro-batches through chunk 0, then the same group through chunk 1, and
    so on to chunk v - 1, then the next group (``get_pp_rank_microbatches``);
    the peak holds the first ``in_flight_micro_batches`` x v of those forwards.
    Without interleaving every micro-batch in flight holds the whole stage,
    its first chunk included."""
    p, m, v = pp, micro_batches, virtual_stages
    held = round(in_flight_micro_batches(p, m, schedule=schedule, virtual_stages=v,
                                         group=group) * v)
    if v == 1:
        return held
    n = p if group is None else group
    order = [chunk for start in range(0, m, n)
             for chunk in range(v) for _ in range(start, min(start + n, m))]
    return order[:held].count(0)


class FirstStageActivations(NamedTuple):
    """Activations held by the first pipeline stage at its peak, by term."""
    per_layer: float           # one layer, one micro-batch (Table 2)
    layers_per_stage: float    # L / p
    in_flight: float           # micro-batches (stages' worth) awaiting their backward
    interleave_factor: float   # in_flight over 1F1B's min(p, m): 1 + (p - 1)/(p v) when m > p
    transformer: float         # per_layer * layers_per_stage * in_flight
    embeddings: float          # Section 4.3 extras (0 unless vocab_size is given)
    total: float


def first_stage_activation_bytes(seq_len: int, micro_batch: int, d_model: int,
                                 n_heads: int, *, n_layers: int, tp: int = 1,
                                 pp: int = 1, micro_batches: int | None = None,
                                 schedule: str = "1f1b", virtual_stages: int = 1,
                                 sequence_parallel: bool = False,
                                 recompute: str = "none",
                                 vocab_size: int | None = None,
                                 flash_attention: bool = False,
                                 group: int | None = None, count: str = "korthikanti",
                                 n_kv_heads: int | None = None, ffn_hidden: int | None = None,
                                 embedding_slot: bool = False) -> FirstStageActivations:
    """Peak activation bytes on the first pipeline stage (the worst one).

    Source: Korthikanti et al. 2022, Section 4.2.3. Under 1F1B the first stage
    holds p micro-batches in flight, each through L/p layers, so it stores L
    layers' worth, independent of p (eq. 5: sbhL/t (34 + 5as/h) with sequence
    parallelism). With fewer micro-batches than stages only m are in flight.
    The interleaved schedule with v model chunks per GPU scales this by
    1 + (p - 1)/(p v) (same section; Narayanan et al. 2021 Section 2.2.2
    gives the schedule; see ``in_flight_micro_batches`` for m = p). GPipe
    (Huang et al. 2019) keeps all m micro-batches. ``group``: the interleaved
    schedule's micro-batch group (default p; ``in_flight_micro_batches``).

    With ``vocab_size``, adds Section 4.3's extras on the first stage: the
    embedding dropout mask sbhp/t (one per micro-batch in flight) and, when
    p = 1 (the stage also holds the output layer), 4sbh/t (1 + v/h) for the
    final norm, output projection and fp32 logits (the paper assumes
    sequence parallelism for these). ``flash_attention``, ``count``,
    ``n_kv_heads`` and ``ffn_hidden`` as in ``activation_bytes``.

    ``embedding_slot``: the stage's first layer slot holds the embedding instead
    of a layer (Llama 3's pipeline, Dubey et al. 2024, Section 3.3.2: with one
    layer per model chunk, the first chunk of the first stage is the embedding
    alone), so each micro-batch the first chunk holds keeps one layer fewer
    (``first_chunk_in_flight`` counts them).
    """
    p = _check("pp", pp)
    n_layers = _check("n_layers", n_layers)
    v = _check("virtual_stages", virtual_stages)
    m = p if micro_batches is None else _check("micro_batches", micro_batches)
    if schedule not in ("gpipe", "1f1b", "interleaved"):
        raise ValueError(f"schedule={schedule!r}; choose schedule in "
                         "{'gpipe', '1f1b', 'interleaved'}")
    if schedule == "interleaved" and v == 1:
        raise ValueError("schedule='interleaved' needs virtual_stages >= 2; "
                         "use schedule='1f1b' for one chunk per GPU")
    if schedule == "gpipe" and v > 1:
        raise ValueError(f"virtual_stages={v} only applies to the interleaved 1F1B "
                         "schedule; use schedule='1f1b' or virtual_stages=1")
    if n_layers % (p * v):
        raise ValueError(f"n_layers={n_layers} does not split into pp*virtual_stages="
                         f"{p * v} equal chunks; choose pp*virtual_stages dividing {n_layers}")

    layer = activation_bytes(seq_len, micro_batch, d_model, n_heads, tp=tp,
                             sequence_parallel=sequence_parallel, recompute=recompute,
                             flash_attention=flash_attention, count=count,
                             n_kv_heads=n_kv_heads, ffn_hidden=ffn_hidden)
    layers_per_stage = n_layers / p
    in_flight = in_flight_micro_batches(p, m, schedule=schedule, virtual_stages=v, group=group)
    factor = in_flight / min(p, m) if schedule != "gpipe" else 1.0
    layers_held = layers_per_stage * in_flight
    if embedding_slot:
        layers_held -= first_chunk_in_flight(p, m, schedule=schedule, virtual_stages=v,
                                             group=group)
    transformer = layer.per_layer * layers_held

    embeddings = 0.0
    if vocab_size is not None:
        s, b, h, t = seq_len, micro_batch, d_model, tp
        embeddings = s * b * h * min(in_flight, m) / t      # embedding dropout masks
        if p == 1:
            embeddings += 4 * s * b * h / t * (1 + _check("vocab_size", vocab_size) / h)
    return FirstStageActivations(layer.per_layer, layers_per_stage, in_flight, factor,
                                 transformer, embeddings, transformer + embeddings)
