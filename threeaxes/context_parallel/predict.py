"""What context parallelism should cost per rank, from the sizes alone: the bytes each
rank sends for one attention layer and the attention activations it holds.

Counted per rank for a layer of `batch` sequences of `seq_len` tokens, width
`d_model` (= heads * head_dim), split over `cp` ranks, `bytes_per_value` bytes a
number (8 for float64). One rank's k (or v) is B = batch * seq/cp * d_model numbers.

* Ring (Liu et al. 2023, Section 3): the forward passes a key/value block (2B)
  cp - 1 times; the backward passes the key/value blocks cp - 1 times and their
  gradients (2B) cp times, so each gradient gets home.
* All-to-all (Jacobs et al. 2023, DeepSpeed-Ulysses, Section 3.2: q, k, v exchanged
  before attention, the output after it): the forward runs an all-to-all over q, k, v
  stacked (3B) and one over the output (B); the backward mirrors them. Each all-to-all
  sends (cp - 1)/cp of its input (threeaxes.cost.network's pairwise-exchange row).

So per rank the ring sends 2 (cp - 1) B in the forward and the all-to-all way
4 (cp - 1)/cp B: the ring's traffic per rank stays near 2 of the rank's own k
and v blocks per step whatever cp is, the all-to-all's shrinks as cp grows.

Memory: a rank saves q, k, v and the output (4B) and one log-sum-exp per query and
head (batch * heads * seq/cp) for the backward, under either way: 1/cp of one
process's attention activations.
"""
from __future__ import annotations

__all__ = ["ring_bytes_sent", "ulysses_bytes_sent", "attention_activation_bytes", "bytes_sent"]


def _check(batch, seq_len, d_model, cp, bytes_per_value, pieces):
    for name, value in (("batch", batch), ("seq_len", seq_len), ("d_model", d_model), ("cp", cp),
                        ("bytes_per_value", bytes_per_value)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if seq_len % (pieces * cp):
        raise ValueError(f"seq_len={seq_len} does not split over {pieces} * cp = {pieces * cp} "
                         f"pieces; choose cp so that {pieces * cp} divides seq_len")


def _block(batch, seq_len, d_model, cp, bytes_per_value):
    return batch * (seq_len // cp) * d_model * bytes_per_value   # one rank's k (or v), bytes


def ring_bytes_sent(batch, seq_len, d_model, cp, bytes_per_value=8) -> dict:
    """{'forward', 'backward'}: bytes one rank sends in one ring-attention layer."""
    _check(batch, seq_len, d_model, cp, bytes_per_value, 2)
    kv = 2 * _block(batch, seq_len, d_model, cp, bytes_per_value)
    if cp == 1:
        return {"forward": 0, "backward": 0}
    return {"forward": (cp - 1) * kv, "backward": (cp - 1) * kv + cp * kv}


def ulysses_bytes_sent(batch, seq_len, d_model, cp, bytes_per_value=8) -> dict:
    """{'forward', 'backward'}: bytes one rank sends in one all-to-all attention layer."""
    _check(batch, seq_len, d_model, cp, bytes_per_value, 1)
    b = _block(batch, seq_len, d_model, cp, bytes_per_value)
    per_pass = (3 * b + b) * (cp - 1) // cp        # q, k, v stacked, then the output
    return {"forward": per_pass, "backward": per_pass}


def bytes_sent(method, batch, seq_len, d_model, cp, bytes_per_value=8) -> dict:
    """`ring_bytes_sent` or `ulysses_bytes_sent` by name."""
    table = {"ring": ring_bytes_sent, "ulysses": ulysses_bytes_sent}
    if method not in table:
        raise ValueError(f"method={method!r}; choose 'ring' or 'ulysses'")
    return table[method](batch, seq_len, d_model, cp, bytes_per_value)


def attention_activation_bytes(batch, seq_len, d_model, n_heads, cp, bytes_per_value=8) -> int:
    """Bytes of attention activations one rank saves for the backward: q, k, v, the output
    and the log-sum-exp of each query and head, for its seq/cp tokens."""
    _check(batch, seq_len, d_model, cp, bytes_per_value, 1)
    if type(n_heads) is not int or n_heads < 1 or d_model % n_heads:
        raise ValueError(f"n_heads={n_heads!r} must be a positive integer dividing d_model={d_model}")
    tokens = batch * (seq_len // cp)
    return (4 * d_model + n_heads) * tokens * bytes_per_value
