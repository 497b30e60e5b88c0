"""Which parameters one rank holds, term by term, for a (tp, pp) layout."""
from __future__ import annotations

from typing import NamedTuple

from .memory import ModelStateBytes, model_state_bytes

__all__ = ["RankParams", "rank_params", "rank_state_bytes", "LAYOUT_ORDER", "layout_strides"]

# The order in which ranks are numbered, fastest first: Megatron-LM's default,
# ``initialize_model_parallel(..., order="tp-cp-ep-dp-pp")`` in
# megatron/core/parallel_state.py (its RankGenerator; the unit tests also run
# "tp-cp-pp-ep-dp"). With cp = ep = 1 it is the course's tp-dp-pp
# (``network.group_strides``, ``threeaxes.dims``).
LAYOUT_ORDER = ("tp", "cp", "ep", "dp", "pp")


class RankParams(NamedTuple):
    """Parameters one rank holds, by where they come from."""
    layers: int           # this stage's transformer layers, tp-split where Megatron splits them
    embeddings: int       # word (+ position) embedding: the first stage only
    final_norm: int       # the norm after the last layer: the last stage only
    head: int             # the output layer, or its tied copy: the last stage only
    replicated: int       # how many of the above every tp rank holds whole
    total: int


def _check(name: str, value: float, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def _layer_split(h: int, f: int, kv: int, *, tp: int, biases: bool, gated_mlp: bool, norm: str) -> tuple[int, int]:
    """(parameters every tp rank holds a 1/tp slice of, parameters it holds whole) of one layer."""
    # column-parallel: Q (h x h), K and V (h x kv each), with their biases; MLP up (and gate)
    split = 2 * h * h + 2 * h * kv + (3 if gated_mlp else 2) * h * f
    whole = (2 * h if norm == "layernorm" else h) * 2          # two norms per layer
    if biases:
        split += (h + 2 * kv) + (2 * f if gated_mlp else f)    # Q, K, V and up-projection biases
        whole += 2 * h                                          # attention-out and MLP-down biases
    if split % tp:
        raise ValueError(f"tp={tp} does not divide a layer's split matrices ({split} numbers); "
                         f"choose tp dividing d_model, the MLP width and the heads")
    return split // tp, whole


def rank_params(n_layers: int, d_model: int, vocab_size: int, seq_len: int = 0, *,
                tp: int = 1, pp: int = 1, stage: int = 0, layers_on_stage: int | None = None,
                ffn_hidden: int | None = None, kv_width: int | None = None,
                gated_mlp: bool = False, biases: bool = True, norm: str = "layernorm",
                tied_embeddings: bool = True, final_norm: bool = False,
                vocab_parallel: bool = False) -> RankParams:
    """Parameters held by one rank of pipeline stage `stage` (of `pp`) in a tp group of `tp`.

    The shape arguments mean what they mean in `transformer_params` (seq_len:
    learned positions, 0 for rotary; kv_width: d_model * n_kv_heads / n_heads
    under grouped-query attention). `layers_on_stage` defaults to the even
    split n_layers / pp. Where each term lives: below.

    `model_state_bytes` divides a model's parameters evenly, Psi / (tp * pp).
    A real layout is not even, and for a small model the difference is large:

    * Tensor parallelism splits only the big matrices (Shoeybi et al. 2019,
      "Megatron-LM", Section 3, Figure 3): Q, K, V and the first MLP matrix by
      columns (their biases with them), the attention output and the second MLP
      matrix by rows. The row-parallel layers' biases are added after the
      all-reduce, so every tp rank holds them whole, and so are the LayerNorms.
    * Pipeline parallelism puts the embeddings on the first stage and the final
      norm and the output layer on the last (Narayanan et al. 2021, Section 2.2).
      When the output layer shares the word embedding (tied weights) and pp > 1,
      the last stage keeps its own copy of the table, and the two copies' gradients
      are summed every step (what Megatron-LM's code does with its "embedding
      group"; with pp = 1 the one table serves both ends).
    * The word embedding and the output layer may be split over tp by vocabulary
      (Megatron's vocab-parallel embedding) or kept whole on every tp rank (the
      course's toy model): `vocab_parallel` says which. Position embeddings are
      always whole.

    With tp = pp = 1 the terms add up to `transformer_params` exactly; the test
    checks it, and checks every layout of the toy model against the tensors its
    tensor-parallel pipeline stages really hold.
    """
    l, h, v = _check("n_layers", n_layers), _check("d_model", d_model), _check("vocab_size", vocab_size)
    s = _check("seq_len", seq_len, 0)
    tp, pp = _check("tp", tp), _check("pp", pp)
    if isinstance(stage, bool) or int(stage) != stage or not 0 <= stage < pp:
        raise ValueError(f"stage={stage!r} is outside 0..{pp - 1}")
    if norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"norm={norm!r}; choose norm in {{'layernorm', 'rmsnorm'}}")
    if layers_on_stage is None:
        if l % pp:
            raise ValueError(f"pp={pp} does not divide n_layers={l}; pass layers_on_stage "
                             f"for an uneven split")
        layers_on_stage = l // pp
    layers_on_stage = _check("layers_on_stage", layers_on_stage, 0)
    f = 4 * h if ffn_hidden is None else _check("ffn_hidden", ffn_hidden)
    kv = h if kv_width is None else _check("kv_width", kv_width)
    if vocab_parallel and v % tp:
        raise ValueError(f"tp={tp} does not divide vocab_size={v} for a vocab-parallel embedding")

    split, whole = _layer_split(h, f, kv, tp=tp, biases=biases, gated_mlp=gated_mlp, norm=norm)
    first, last = stage == 0, stage == pp - 1
    word = v * h // tp if vocab_parallel else v * h
    word_whole = 0 if vocab_parallel else v * h

    embeddings = word + s * h if first else 0
    norm_size = (2 * h if norm == "layernorm" else h) if (final_norm and last) else 0
    # the output layer: its own matrix when untied; when tied, the last stage needs a copy
    # of the embedding table unless it is the first stage too (pp = 1, one shared table)
    head = word if last and (not tied_embeddings or not first) else 0
    replicated = (layers_on_stage * whole + (word_whole + s * h if first else 0) + norm_size
                  + (word_whole if head else 0))
    layers = layers_on_stage * (split + whole)
    return RankParams(layers, embeddings, norm_size, head, replicated,
                      layers + embeddings + norm_size + head)


def rank_state_bytes(params_on_rank: int, *, dp: int = 1, zero_stage: int = 0,
                     precision: str = "mixed", optimizer_bytes: float | None = None) -> ModelStateBytes:
    """Bytes of parameters, gradients and optimizer states a rank holds for the
    `params_on_rank` parameters of its (tp, pp) position (`rank_params(...).total`),
    sharded over dp by ZeRO's stage: ZeRO's Section 3.1 / Figure 1 accounting
    (`model_state_bytes`) applied to what this rank really holds."""
    return model_state_bytes(params_on_rank, dp=dp, zero_stage=zero_stage, precision=precision,
                             optimizer_bytes=optimizer_bytes)


def layout_strides(tp: int, cp: int, dp: int, pp: int, *, ep: int = 1,
                   etp: int | None = None) -> dict:
    """{group: (stride, size)} when ranks are numbered in ``LAYOUT_ORDER``, as
    Megatron-LM's RankGenerator builds them.

    Megatron builds two generators over the same ranks. The attention's (its ep
    is 1): tp stride 1, cp stride tp, dp stride tp * cp, pp stride tp * cp * dp;
    ``"dp_cp"``, stride tp and size dp * cp, is the group that reduces the
    dense gradients (the ranks that hold the same weights and see different
    tokens). The experts' (MoE parallel folding, Liu et al. 2025, Section 3):
    ``"etp"`` stride 1, ``"ep"`` stride etp, ``"edp"`` stride etp * ep and size
    tp * cp * dp / (etp * ep), the group that reduces the expert gradients. With
    cp = ep = 1 and etp = tp the tp, dp and pp entries are ``group_strides``'s.
    """
    etp = tp if etp is None else etp
    folded = tp * cp * dp
    if folded % (etp * ep):
        raise ValueError(f"etp({etp}) * ep({ep}) does not divide tp({tp}) * cp({cp}) * dp({dp}) "
                         f"= {folded}; choose etp * ep dividing {folded}")
    return {"tp": (1, tp), "cp": (tp, cp), "dp": (tp * cp, dp), "pp": (folded, pp),
            "dp_cp": (tp, cp * dp), "etp": (1, etp), "ep": (etp, ep),
            "edp": (etp * ep, folded // (etp * ep))}
