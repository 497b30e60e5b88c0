"""Training FLOPs, step time and model FLOPs utilisation (MFU); each function cites its formula
(Kaplan et al. 2020, Narayanan et al. 2021, Korthikanti et al. 2022, Chowdhery et al. 2022)."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["TrainingFlops", "flops_per_token", "training_flops", "megatron_flops",
           "step_time", "mfu", "training_time"]


def flops_per_token(n_params: float, *, n_layers: int = 0, d_model: int = 0,
                    seq_len: int = 0) -> float:
    """Training FLOPs per token: 6N, plus the attention term when given.

    Kaplan et al. 2020, Section 2.1: C ~ 6N per token (2N forward, 4N
    backward). Chowdhery et al. 2022 (PaLM), Appendix B adds the attention
    score and value products, 12 l h s per token (l layers, width h, sequence
    s); pass ``n_layers``, ``d_model`` and ``seq_len`` to include it.
    """
    if n_params < 0:
        raise ValueError(f"n_params={n_params} must be >= 0")
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


def training_flops(n_params: float, tokens: float, **attention: int) -> float:
    """FLOPs to train on ``tokens`` tokens: 6 N T (Kaplan et al. 2020, Section
    2.1), plus PaLM Appendix B's attention term when ``n_layers``,
    ``d_model``, ``seq_len`` are given."""
    return flops_per_token(n_params, **attention) * tokens


class TrainingFlops(NamedTuple):
    """FLOPs of one training iteration by term (Korthikanti App. A)."""
    dense: float       # 72 B s l h^2: the weight matmuls, forward + backward
    attention: float   # 12 B s^2 l h: Q K^T and scores x V, forward + backward
    logits: float      # 6 B s h V: the output projection
    recompute: float   # extra forward work recomputation adds
    model: float       # dense + attention + logits (what MFU counts)
    total: float       # model + recompute (what the hardware executes; HFU)


def megatron_flops(batch: int, seq_len: int, n_layers: int, d_model: int,
                   vocab_size: int, *, recompute: str = "full") -> TrainingFlops:
    """FLOPs of one iteration of a GPT-style model, by term.

    One layer's forward does 24 B s h^2 + 4 B s^2 h (Korthikanti App. A), the
    backward twice that, and the logits 2 B s h V forward. Recomputation adds
    a second forward: all of it (``"full"``, Narayanan et al. 2021 eq. 3:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h))) or only the attention products
    (``"selective"``, Korthikanti eq. 8: 72 B s l h^2 (1 + s/(3h) + V/(12 l h)),
    i.e. the attention term counted twice). ``"none"`` gives Korthikanti
    eq. 7, the model FLOPs; MFU uses ``.model``, HFU ``.total``.
    """
    B, s, l, h, V = batch, seq_len, n_layers, d_model, vocab_size
    for name, value in (("batch", B), ("seq_len", s), ("n_layers", l),
                        ("d_model", h), ("vocab_size", V)):
        if value < 1:
            raise ValueError(f"{name}={value!r} must be >= 1")
    dense = 72.0 * B * s * l * h * h
    attention = 12.0 * B * s * s * l * h
    logits = 6.0 * B * s * h * V
    if recompute == "none":
        extra = 0.0
    elif recompute == "selective":
        # Korthikanti eq. 8 doubles the whole attention term, 12 B s^2 l h, which
        # is more than one forward re-run of Q K^T and scores x V (4 B s^2 l h);
        # it is the count that reproduces the paper's Table 5 HFU, so we keep it.
        extra = 12.0 * B * s * s * l * h
    elif recompute == "full":
        extra = 24.0 * B * s * l * h * h + 4.0 * B * s * s * l * h   # one more forward
    else:
        raise ValueError(f"recompute={recompute!r}; choose recompute in "
                         "{'none', 'selective', 'full'}")
    model = dense + attention + logits
    return TrainingFlops(dense, attention, logits, extra, model, model + extra)


def step_time(flops: float, n_gpus: int, peak_flops: float, mfu: float) -> float:
    """Seconds for ``flops`` on ``n_gpus`` GPUs running at ``mfu`` of peak.

    The definition of MFU (Chowdhery et al. 2022, Section 4.1 / Appendix B;
    Korthikanti et al. 2022, Section 6.3) read backwards:
    time = flops / (n_gpus * peak_flops * mfu).
    """
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]; 0.4 to 0.55 is typical "
                         "of published large runs")
    if n_gpus < 1 or peak_flops <= 0:
        raise ValueError(f"n_gpus={n_gpus} and peak_flops={peak_flops} must be positive")
    return flops / (n_gpus * peak_flops * mfu)


def mfu(model_flops: float, seconds: float, n_gpus: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of all GPUs
    (Chowdhery et al. 2022, Section 4.1; Korthikanti et al. 2022, Section 6.3)."""
    if seconds <= 0 or n_gpus < 1 or peak_flops <= 0:
        raise ValueError("seconds, n_gpus and peak_flops must be positive")
    return model_flops / (seconds * n_gpus * peak_flops)


def training_time(n_params: float, tokens: float, n_gpus: int,
                  flops_per_gpu: float) -> float:
    """End-to-end training seconds, Narayanan et al. 2021, Section 5.1, eq. 4:
    8 T P / (n X), i.e. eq. 3's 96 B s l h^2 ~ 8 P per token with full
    recomputation, at X achieved FLOP/s per GPU."""
    if n_gpus < 1 or flops_per_gpu <= 0:
        raise ValueError("n_gpus and flops_per_gpu must be positive")
    return 8.0 * tokens * n_params / (n_gpus * flops_per_gpu)
