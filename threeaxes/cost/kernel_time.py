"""How long one GPU takes for its share of a transformer layer, from shapes."""
from __future__ import annotations

from typing import NamedTuple

from .activations import activation_bytes

__all__ = ["GEMM_PEAK_FRACTION", "GEMM_HALF_DIM", "ELEMENTWISE_BYTES_PER_STORED_BYTE",
           "dim_factor", "gemm_efficiency", "LayerTime", "layer_time", "logits_time"]

# Fraction of peak a GEMM with every dimension large reaches (fitted: `layer_time`'s docstring says how).
GEMM_PEAK_FRACTION = 0.70
# Operand dimension at which a GEMM runs at half of GEMM_PEAK_FRACTION (fitted):
# the attention products, whose inner side is the head size (96 to 160 here),
# run at about a third of peak, a dense GEMM with h/t = 768 at 0.6 of peak.
GEMM_HALF_DIM = 128
# HBM bytes the element-wise kernels move per stored activation byte, per pass
# (fitted; between 1, written once, and 2, written and read back once).
ELEMENTWISE_BYTES_PER_STORED_BYTE = 1.5


def dim_factor(dim: float, half: float = GEMM_HALF_DIM) -> float:
    """dim / (dim + half): how much of a GEMM's best rate one operand
    dimension allows; 1/2 at ``half``, rising towards 1 (never reaching it)."""
    if dim <= 0:
        raise ValueError(f"dim={dim} must be > 0 (a matrix dimension)")
    return dim / (dim + half)


def gemm_efficiency(m: float, n: float, k: float, *, peak_fraction: float = GEMM_PEAK_FRACTION,
                    half: float = GEMM_HALF_DIM) -> float:
    """Fraction of peak FLOP/s an (m x k) @ (k x n) GEMM reaches.

    ``peak_fraction`` times the factor of its smallest dimension: the thin side
    sets how full the tiles are (NVIDIA Matrix Multiplication Background guide,
    "Dimension Quantization Effects"). Non-decreasing in every dimension and
    bounded by ``peak_fraction``; tile and wave quantization's saw-teeth are
    smoothed away (cuBLAS picks among tile shapes to soften them).
    """
    if not 0 < peak_fraction <= 1:
        raise ValueError(f"peak_fraction={peak_fraction} must be in (0, 1]")
    return peak_fraction * dim_factor(min(m, n, k), half)


class LayerTime(NamedTuple):
    """Seconds one GPU spends on one layer for one micro-batch, in a step."""
    dense: float         # QKV, projection and MLP GEMMs
    attention: float     # Q K^T and scores x V batched GEMMs
    elementwise: float   # memory-bound: norms, GeLU, dropout, softmax, adds
    total: float


def layer_time(seq_len: int, micro_batch: int, d_model: int, n_heads: int, *, tp: int,
               peak_flops: float, hbm_bandwidth: float, recompute: str = "none",
               sequence_parallel: bool = False, ffn_hidden: int | None = None,
               flash_attention: bool = False) -> LayerTime:
    """Forward, backward (twice the forward) and any recomputation of one layer.

    FLOPs per layer forward (Korthikanti et al. 2022, Appendix A): 24 b s h^2
    in the dense GEMMs (QKV 6, projection 2, MLP 16) and 4 b s^2 h in
    attention, both split over t. Backward costs twice the forward; full
    recomputation adds one forward of everything, selective one forward of
    attention (Korthikanti Section 5). Element-wise bytes per pass: the
    stored activations of Table 2 (``activation_bytes`` without
    recomputation), ``ELEMENTWISE_BYTES_PER_STORED_BYTE`` times.

    ``flash_attention``: the scores never reach memory (Dao et al. 2022), so
    the element-wise bytes leave out the 5as^2b term, and the backward pass
    recomputes the attention products once (Section 3.1), as selective
    recomputation does (no second charge when both are on).

    A constant "fraction of peak" hides two effects that make small shards slow:

    1. Matrix multiplications run below peak when one of their dimensions is
       small: the output is cut into tiles, each tile steps through K, and a
       thin dimension leaves tiles partly empty and the GPU's SMs partly idle
       (NVIDIA, "Matrix Multiplication Background User's Guide", Deep Learning
       Performance documentation: sections "Dimension Quantization Effects"
       (tile and wave quantization) and "Math and memory bounds"; Anthony et
       al. 2024, "The Case for Co-Designing Model Architectures with Hardware",
       arXiv 2401.14489, Section IV, measure the same on A100 GEMMs). Tensor
       parallelism makes exactly those dimensions small: a layer's GEMMs have
       the tokens of a micro-batch (b s) as one side and h/t (or 4h/t) as the
       sharded side; the attention products have the head size h/a as their
       inner dimension.
    2. The element-wise work (layer norms, GeLU, dropout, bias, residual adds,
       softmax) is bound by memory bandwidth, not FLOPs. Its bytes are those
       Korthikanti et al. 2022 (Table 2) count as stored activations: the layer
       norms and dropouts (10 sbh) are *replicated* on every tensor-parallel
       rank unless sequence parallelism splits them, so their share of a TP
       rank's time grows with t.

    The model: time = GEMM FLOPs / (peak * gemm_efficiency) + element-wise
    bytes / HBM bandwidth, each term returned by name.

    The three constants (GEMM_PEAK_FRACTION, GEMM_HALF_DIM, ELEMENTWISE_BYTES_PER_STORED_BYTE)
    are NOT datasheet figures. They were fitted to Narayanan et al. 2021, Table 1 (ten runs,
    three constants, by a coarse grid search minimising the largest error; see
    threeaxes/cost/published.py and tests/cost/test_cost_published.py). They are checked on runs
    they were not fitted to (Narayanan et al. 2021, Table 2; Korthikanti et al. 2022, Table 5:
    within 7% and 14%), and they are of the order the sources above describe: a large bf16 GEMM
    on A100 runs well below the 312 TFLOP/s peak, and thin operands (a head size of 64-128, a
    shard of a few hundred columns) cost a large share of it.
    """
    s, b, h, a, t = seq_len, micro_batch, d_model, n_heads, tp
    ffn = 4 * h if ffn_hidden is None else ffn_hidden
    tokens = s * b
    passes_dense = 3 + (recompute == "full")
    passes_attn = 3 + (recompute in ("full", "selective") or flash_attention)
    # dense GEMMs: the smallest side is a tensor-parallel shard (h/t) or the tokens
    dense_flops = 2.0 * tokens * h * (3 * h + h + 2 * ffn) / t
    dense_eff = gemm_efficiency(tokens, h / t, h)
    # attention: per head, (s x d_head) @ (d_head x s) and (s x s) @ (s x d_head)
    attn_flops = 4.0 * b * s * s * h / t
    attn_eff = gemm_efficiency(s, s, h / a)
    stored = activation_bytes(s, b, h, a, tp=t, sequence_parallel=sequence_parallel,
                              flash_attention=flash_attention).per_layer
    passes_elem = passes_dense   # each pass touches the layer's activations
    dense = passes_dense * dense_flops / (peak_flops * dense_eff)
    attention = passes_attn * attn_flops / (peak_flops * attn_eff)
    elementwise = passes_elem * ELEMENTWISE_BYTES_PER_STORED_BYTE * stored / hbm_bandwidth
    return LayerTime(dense, attention, elementwise, dense + attention + elementwise)


def logits_time(seq_len: int, micro_batch: int, d_model: int, vocab_size: int, *, tp: int,
                peak_flops: float) -> float:
    """The output layer's GEMM, forward and backward: 6 b s h V / t FLOPs
    (Narayanan et al. 2021, eq. 3's V/(16 l h) term; the vocabulary is split
    over t, Shoeybi et al. 2019, Section 3)."""
    tokens = seq_len * micro_batch
    flops = 6.0 * tokens * d_model * vocab_size / tp
    return flops / (peak_flops * gemm_efficiency(tokens, vocab_size / tp, d_model))
