"""How many parameters a transformer has."""
from __future__ import annotations

__all__ = ["ParamCount", "transformer_params"]


class ParamCount(int):
    """An int (the total) that also carries its named terms.

    It compares and adds like the plain number, so `transformer_params(...)
    == sum(p.numel() for p in model.parameters())` works, and
    `.per_layer`, `.layers`, `.embeddings`, `.position`, `.final_norm`
    say where the parameters are.
    """

    per_layer: int
    layers: int
    embeddings: int
    position: int
    final_norm: int

    def __new__(cls, *, per_layer: int, n_layers: int, embeddings: int,
                position: int, final_norm: int) -> ParamCount:
        layers = per_layer * n_layers
        obj = super().__new__(cls, layers + embeddings + position + final_norm)
        obj.per_layer = per_layer
        obj.layers = layers
        obj.embeddings = embeddings
        obj.position = position
        obj.final_norm = final_norm
        return obj

    @property
    def total(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return (f"ParamCount(total={int(self):,}, layers={self.layers:,}, "
                f"embeddings={self.embeddings:,}, position={self.position:,}, "
                f"final_norm={self.final_norm:,})")


def _positive_int(name: str, value: float) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def transformer_params(n_layers: int, d_model: int, vocab_size: int,
                       seq_len: int = 0, *, ffn_hidden: int | None = None,
                       n_heads: int | None = None, n_kv_heads: int | None = None,
                       gated_mlp: bool = False, biases: bool = True,
                       norm: str = "layernorm", tied_embeddings: bool = True,
                       final_norm: bool = False) -> ParamCount:
    """Parameters of a decoder-only transformer.

    Source: Narayanan et al. 2021 (Megatron-LM), Section 5.1, eq. 2:
    ``P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h))`` = 12 l h^2 + 13 l h
    + (V + s) h, with l = n_layers, h = d_model, V = vocab_size and s =
    seq_len (learned position embeddings; pass 0 for rotary ones). Per layer:
    Q, K, V and output projections 4h^2 + 4h; MLP h -> 4h -> h, 8h^2 + 5h;
    two LayerNorms 4h. The output layer shares the input embedding.

    Keyword options (defaults reproduce eq. 2 exactly):

    - ``ffn_hidden``: MLP width f (default 4h).
    - ``gated_mlp``: SwiGLU-style MLP with three h x f matrices (LLaMA,
      Touvron et al. 2023a, Section 2.2).
    - ``n_heads``, ``n_kv_heads``: grouped-query attention (Ainslie et al.
      2023); K and V projections have width h * n_kv_heads / n_heads.
    - ``biases``: linear layers and norms carry biases (GPT) or not (LLaMA).
    - ``norm``: "layernorm" (scale and shift, 2h) or "rmsnorm" (scale, h).
    - ``tied_embeddings``: the output layer reuses the input embedding;
      False adds another V h.
    - ``final_norm``: count the norm after the last layer (eq. 2 leaves it out).

    The default arguments count a GPT-style decoder exactly as Megatron-LM does
    (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
    Clusters Using Megatron-LM", Section 5.1, eq. 2):

        P = 12 l h^2 + 13 l h + (V + s) h

    Keyword options cover LLaMA-style decoders (gated MLP, grouped-query
    attention, no biases, RMSNorm, untied embeddings) so that the presets can
    quote the sizes of released checkpoints.
    """
    l = _positive_int("n_layers", n_layers)
    h = _positive_int("d_model", d_model)
    v = _positive_int("vocab_size", vocab_size)
    if isinstance(seq_len, bool) or int(seq_len) != seq_len or seq_len < 0:
        raise ValueError(f"seq_len={seq_len!r} must be a non-negative integer "
                         "(0 when positions are not learned)")
    f = 4 * h if ffn_hidden is None else _positive_int("ffn_hidden", ffn_hidden)
    if norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"norm={norm!r}; choose norm in {{'layernorm', 'rmsnorm'}}")

    kv_width = h
    if n_kv_heads is not None:
        if n_heads is None:
            raise ValueError("n_kv_heads needs n_heads too (K/V width is "
                             "d_model * n_kv_heads / n_heads)")
        n_heads = _positive_int("n_heads", n_heads)
        n_kv_heads = _positive_int("n_kv_heads", n_kv_heads)
        if h % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={h} and "
                             f"n_kv_heads={n_kv_heads} must divide n_heads")
        kv_width = h // n_heads * n_kv_heads

    # attention: Q (h x h), K and V (h x kv_width each), output (h x h)
    attention = 2 * h * h + 2 * h * kv_width
    if biases:
        attention += 2 * h + 2 * kv_width
    # MLP: h -> f -> h, or gate and up h -> f, then down f -> h
    mlp = (3 if gated_mlp else 2) * h * f
    if biases:
        mlp += (2 * f if gated_mlp else f) + h
    per_norm = 2 * h if norm == "layernorm" else h
    per_layer = attention + mlp + 2 * per_norm

    embeddings = v * h * (1 if tied_embeddings else 2)
    return ParamCount(per_layer=per_layer, n_layers=l, embeddings=embeddings,
                      position=int(seq_len) * h,
                      final_norm=per_norm if final_norm else 0)
