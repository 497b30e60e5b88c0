"""The attention activations one cp rank holds, from the sizes alone."""
from __future__ import annotations

__all__ = ["attention_activation_bytes"]


def attention_activation_bytes(batch: int, seq_len: int, d_model: int, n_heads: int, cp: int,
                               bytes_per_value: int = 8) -> int:
    """Bytes of attention activations one rank saves for the backward: q, k, v, the output
    and the log-sum-exp of each query and head, for its seq/cp tokens.

    For the backward, attention keeps q, k, v and its output (4 * d_model numbers a
    token) and one log-sum-exp per token and head (the online softmax's lse, from
    which the backward rebuilds the probabilities: Dao et al. 2022, Algorithm 2).
    Under context parallelism each rank holds seq/cp of the tokens; the all-to-all
    way holds heads/cp of the heads for all the tokens instead, the same count. So a
    rank saves 1/cp of what one process saves. (The bytes each rank sends are the
    cost model's: `threeaxes.cost.context.context_parallel_bytes`.)
    """
    for name, value in (("batch", batch), ("seq_len", seq_len), ("d_model", d_model),
                        ("n_heads", n_heads), ("cp", cp), ("bytes_per_value", bytes_per_value)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if seq_len % cp:
        raise ValueError(f"cp={cp} does not divide seq_len={seq_len}; choose cp dividing the sequence")
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    tokens = batch * (seq_len // cp)
    return (4 * d_model + n_heads) * tokens * bytes_per_value
