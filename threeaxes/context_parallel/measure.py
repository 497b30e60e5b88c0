"""One attention layer of the toy under context parallelism, measured on launched ranks.

    runs = launch(cp_attention_run, 4, cfg)        # every rank: both ways, traced
    whole = one_process_attention(cfg)             # the same layer on the whole sequence"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import torch

from threeaxes import trace
from threeaxes.context_parallel.attention import METHODS, ContextParallelAttention
from threeaxes.context_parallel.split import sequence_positions, split_sequence
from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.extra_axes import axis_layout
from threeaxes.toy import Block, CausalSelfAttention, ToyConfig, ToyTransformer
from threeaxes.trace import Event

__all__ = ["attention_inputs", "cp_attention_run", "one_process_attention", "saved_bytes", "wire_bytes"]


def attention_inputs(cfg: ToyConfig, batch: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, dy): the layer's input and the gradient fed back at its output, whole sequence."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, generator=g)
    return x, torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, generator=g)


def saved_bytes(fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    """(fn(*args), bytes of the distinct tensors autograd saved for the backward meanwhile)."""
    seen: dict[tuple[int, int, torch.dtype], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, sum(seen.values())


def wire_bytes(events: Iterable[Event]) -> int:
    """Bytes the traced events put on the wire from their rank (cost.network's rows)."""
    return int(sum(bytes_sent_per_gpu(e.op, e.bytes, len(e.group)) for e in events if e.op != "recv"))


def cp_attention_run(rank: int, world_size: int, cfg: ToyConfig, batch: int = 2, seed: int = 1,
                     methods: Iterable[str] = tuple(METHODS)) -> dict[str, Any]:
    """On every launched rank (the whole world is the cp group): {method: results}.

    `cp_attention_run` runs the toy's first attention layer on this rank's share of
    the sequence (the load-balanced split), forward and backward, once per way, and
    returns raw results for the caller to compare: the output and input gradient of
    its tokens, its weight gradients (its tokens' share), the forward and backward
    traces, and the bytes the attention core saves for the backward.
    """
    cp = axis_layout("cp")
    me = cp.coord("cp")
    attn = _first_attention(cfg)
    x, dy = attention_inputs(cfg, batch, seed)
    out: dict[str, Any] = {"positions": sequence_positions(me, world_size, cfg.seq_len).tolist()}
    for method in methods:
        attn.zero_grad()
        layer = ContextParallelAttention(attn, cp, method)
        x_local = split_sequence(x, me, world_size).requires_grad_()     # (batch, seq/cp, d_model)
        with trace.record() as fwd:
            y = layer(x_local)
        with trace.record() as bwd:
            y.backward(split_sequence(dy, me, world_size))
        # the attention core alone, on this rank's q, k, v: what it keeps for the backward
        b, s = x_local.shape[:2]
        q, k, v = (f(x_local).detach().view(b, s, -1, attn.head_dim).transpose(1, 2).requires_grad_()
                   for f in (attn.q, attn.k, attn.v))
        _, kept = saved_bytes(METHODS[method], q, k, v, cp)
        out[method] = {"y": y.detach(), "dx": x_local.grad,
                       "dw": _weight_grads(attn),
                       "forward": fwd, "backward": bwd, "saved": kept}
    return out


def one_process_attention(cfg: ToyConfig, batch: int = 2, seed: int = 1) -> dict[str, Any]:
    """The toy's own attention layer (scaled_dot_product_attention) on the whole sequence."""
    attn = _first_attention(cfg)
    x, dy = attention_inputs(cfg, batch, seed)
    x.requires_grad_()
    y = attn(x)
    y.backward(dy)
    return {"y": y.detach(), "dx": x.grad, "dw": _weight_grads(attn)}


def _first_attention(cfg: ToyConfig) -> CausalSelfAttention:
    """The attention layer of block 0 of ToyTransformer(cfg, seed=0)."""
    return cast(Block, ToyTransformer(cfg, seed=0).blocks[0]).attn   # a ModuleList's items are Modules


def _weight_grads(attn: CausalSelfAttention) -> dict[str, torch.Tensor]:
    """Each weight's gradient, copied: every weight has one after the backward just run."""
    return {n: cast(torch.Tensor, p.grad).clone() for n, p in attn.named_parameters()}
