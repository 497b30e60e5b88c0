"""Bytes per GPU for the model states: parameters, gradients, optimizer.

Source: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models" (SC20). Section 3.1 counts mixed-precision Adam as
2 + 2 + K bytes per parameter with K = 12 (fp16 parameters and gradients;
fp32 master parameters, momentum and variance). Section 5 and Figure 1 shard
the optimizer states (stage 1, P_os), then the gradients (stage 2, P_os+g),
then the parameters (stage 3, P_os+g+p) over the N_d data-parallel ranks.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["GB", "GiB", "PRECISIONS", "STATE_TERMS", "ZERO_REGIMES", "ModelStateBytes",
           "MemoryBreakdown", "bytes_per_param", "model_state_bytes"]

GB = 10**9      # the papers' and datasheets' gigabyte (ZeRO's 120 GB is 120e9)
GiB = 2**30

# bytes per parameter for (params, grads, optimizer states)
PRECISIONS = {
    # ZeRO Section 3.1: fp16/bf16 params and grads, fp32 copy + Adam m and v (K=12)
    "mixed": (2, 2, 12),
    # plain fp32 Adam: fp32 params and grads, Adam m and v (no separate master copy)
    "fp32": (4, 4, 8),
    # Megatron-LM's own accounting (Megatron Core User Guide, "Distributed Optimizer",
    # bytes per parameter without it): fp16 params and grads, and an fp32 copy of the
    # grads beside the fp32 master params and Adam's two moments, 20 bytes; bf16 params
    # with grads accumulated and reduced in fp32, 18 bytes
    "megatron-fp16": (2, 2, 16),
    "megatron-bf16": (2, 4, 12),
}


# the three model states, in the order PRECISIONS gives their bytes
STATE_TERMS = ("params", "grads", "optimizer")
# the course's names for the data-parallel memory regimes: their ZeRO stage
ZERO_REGIMES = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3}


class ModelStateBytes(NamedTuple):
    """Bytes one GPU holds for the model states, by term."""
    params: float
    grads: float
    optimizer: float
    total: float


class MemoryBreakdown(NamedTuple):
    """Bytes one GPU holds, model states and activations, by term."""
    params: float
    grads: float
    optimizer: float
    activations: float
    total: float


def bytes_per_param(precision: str = "mixed", *,
                    optimizer_bytes: float | None = None) -> tuple[float, float, float]:
    """(params, grads, optimizer) bytes per parameter for a precision.

    "mixed" is ZeRO Section 3.1's 2 + 2 + K with K = 12 (Adam);
    "fp32" is 4 + 4 + 8. "megatron-fp16" (2 + 2 + 16) and "megatron-bf16"
    (2 + 4 + 12) are Megatron-LM's own counts: 20 bytes with fp16 gradients
    (its optimizer keeps an fp32 copy of them), 18 with bf16 weights and fp32
    gradients (Megatron Core User Guide, "Distributed Optimizer").
    ``optimizer_bytes`` replaces K, the bytes per
    parameter the optimizer keeps (ZeRO's K; e.g. 4 + 4 for fp32 SGD with
    momentum and a master copy).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose precision in "
                         f"{set(PRECISIONS)}")
    p, g, k_int = PRECISIONS[precision]
    k: float = k_int
    if optimizer_bytes is not None:
        if optimizer_bytes < 0:
            raise ValueError(f"optimizer_bytes={optimizer_bytes} must be >= 0")
        k = optimizer_bytes
    return p, g, k


def _check_degree(name: str, value: float) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def model_state_bytes(n_params: float, *, dp: int = 1, tp: int = 1, pp: int = 1,
                      zero_stage: int = 0, precision: str = "mixed",
                      optimizer_bytes: float | None = None) -> ModelStateBytes:
    """Bytes per GPU for parameters, gradients and optimizer states.

    Source: Rajbhandari et al. 2020 (ZeRO), Section 3.1 (2 + 2 + K bytes per
    parameter, K = 12 for mixed-precision Adam) and Section 5.1-5.3 / Figure 1
    (memory per device: baseline (2 + 2 + K) Psi; P_os 4 Psi + K Psi / N_d;
    P_os+g 2 Psi + (2 + K) Psi / N_d; P_os+g+p (2 + 2 + K) Psi / N_d).

    Tensor and pipeline parallelism divide the model first (each GPU holds
    Psi = n_params / (tp * pp), assuming an even split); ZeRO then shards
    over the dp ranks: stage 1 the optimizer states, stage 2 also the
    gradients, stage 3 also the parameters.
    """
    if n_params < 0:
        raise ValueError(f"n_params={n_params} must be >= 0")
    dp = _check_degree("dp", dp)
    tp = _check_degree("tp", tp)
    pp = _check_degree("pp", pp)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage!r}; choose zero_stage in {{0, 1, 2, 3}}")
    p_bytes, g_bytes, k_bytes = bytes_per_param(precision, optimizer_bytes=optimizer_bytes)

    psi = n_params / (tp * pp)          # parameters this model-parallel rank owns
    params = p_bytes * psi / (dp if zero_stage >= 3 else 1)
    grads = g_bytes * psi / (dp if zero_stage >= 2 else 1)
    optimizer = k_bytes * psi / (dp if zero_stage >= 1 else 1)
    return ModelStateBytes(params, grads, optimizer, params + grads + optimizer)
