"""Sequence parallelism: tensor parallelism without replicated LayerNorms."""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from threeaxes import comms
from threeaxes.dims import ParallelDims, resolve
from threeaxes.tensor_parallel.block import TPMLP, TPBlock, TPCausalSelfAttention
from threeaxes.tensor_parallel.layers import RowParallelLinear
from threeaxes.tensor_parallel.shard import _braces, _divisors, check_tp_layout
from threeaxes.toy import MLP, CausalSelfAttention, ToyConfig, ToyTransformer

SEQ_DIM = 1  # activations are (batch, seq, d_model)
GATHER_GRADS = ("reduce_scatter", "slice")


def check_sequence_split(seq_len: int, tp: int) -> None:
    """A ValueError that says what to change unless tp splits the sequence evenly."""
    if seq_len % tp:
        raise ValueError(f"sequence parallelism cuts seq_len={seq_len} over tp={tp} ranks, which "
                         f"does not divide it; choose tp in {_braces(_divisors(seq_len))} or a "
                         f"seq_len that is a multiple of {tp}")


# -- the maps ------------------------------------------------------------------------

def _gather_seq(x: Tensor, dims: ParallelDims) -> Tensor:
    # communication: every tp rank's sequence slice, concatenated in rank order
    return comms.all_gather(x.contiguous(), "tp", dims=dims, dim=SEQ_DIM)


def _reduce_scatter_seq(x: Tensor, dims: ParallelDims) -> Tensor:
    # communication: sum over the tp ranks, keep this rank's slice of the sequence
    return comms.reduce_scatter(x.contiguous(), "tp", dims=dims, dim=SEQ_DIM)


def _own_seq_slice(x: Tensor, dims: ParallelDims) -> Tensor:
    check_sequence_split(x.shape[SEQ_DIM], dims.tp)
    return x.chunk(dims.tp, dim=SEQ_DIM)[dims.coord("tp")].contiguous()


class _GatherFromSequenceRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims, grad: str) -> Tensor:
        ctx.dims, ctx.grad = dims, grad
        return _gather_seq(x, dims)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
        if ctx.grad == "reduce_scatter":
            # communication: each rank holds a partial gradient of the whole sequence
            return _reduce_scatter_seq(g, ctx.dims), None, None
        return _own_seq_slice(g, ctx.dims), None, None  # every rank holds the same gradient


class _ReduceScatterToSequenceRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        ctx.dims = dims
        return _reduce_scatter_seq(x, dims)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        # communication: every rank's partial sums need the gradient of the whole sequence
        return _gather_seq(g, ctx.dims), None


class _ScatterToSequenceRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: ParallelDims) -> Tensor:
        ctx.dims = dims
        return _own_seq_slice(x, dims)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        # communication: the replicated input's gradient is every rank's slice, put together
        return _gather_seq(g, ctx.dims), None


def gather_from_sequence_region(x: Tensor, dims: ParallelDims | None = None, *, grad: str = "reduce_scatter") -> Tensor:
    """Forward: all-gather the sequence slices, (b, s/t, h) -> (b, s, h).

    Backward, `grad="reduce_scatter"` (the paper's g): the layers after it are
    tensor-parallel, so each rank's gradient is a partial sum; reduce-scatter
    it back to this rank's slice. `grad="slice"`: the layers after it are
    replicated (the toy's ln_f and head), every rank holds the same gradient,
    keep this rank's slice without communicating."""
    if grad not in GATHER_GRADS:
        raise ValueError(f"grad={grad!r}; choose 'reduce_scatter' when tensor-parallel layers follow, "
                         f"'slice' when replicated ones do")
    dims = resolve(dims)
    return x if dims.tp == 1 else _GatherFromSequenceRegion.apply(x, dims, grad)


def reduce_scatter_to_sequence_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: sum the tp ranks' partial outputs and keep this rank's sequence
    slice, (b, s, h) -> (b, s/t, h). Backward: all-gather the gradient (g-bar)."""
    dims = resolve(dims)
    if dims.tp == 1:
        return x
    check_sequence_split(x.shape[SEQ_DIM], dims.tp)
    return _ReduceScatterToSequenceRegion.apply(x, dims)


def scatter_to_sequence_region(x: Tensor, dims: ParallelDims | None = None) -> Tensor:
    """Forward: keep this rank's slice of a replicated (b, s, h). Backward:
    all-gather the gradient slices, so the replicated layers before it get the
    whole gradient on every rank."""
    dims = resolve(dims)
    return x if dims.tp == 1 else _ScatterToSequenceRegion.apply(x, dims)


# -- the block -----------------------------------------------------------------------

def _mark(*params: nn.Parameter) -> None:
    for p in params:
        # sees this rank's tokens only: its gradient is partial (a mark of ours on PyTorch's Parameter)
        p.sequence_parallel = True  # type: ignore[attr-defined]


class SequenceParallelRowLinear(RowParallelLinear):
    """RowParallelLinear whose partial sums are reduce-scattered along the
    sequence instead of all-reduced; the bias is added to the slice, once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.bias is not None:
            _mark(self.bias)

    def forward(self, x: Tensor) -> Tensor:  # x: (b, s, in_features / tp)
        partial = F.linear(x, self.weight)  # (b, s, out_features), this rank's partial sum
        # communication: reduce-scatter the partial sums (backward: all-gather the gradient)
        y = reduce_scatter_to_sequence_region(partial, self.dims)  # (b, s/t, out_features)
        return y + self.bias if self.bias is not None else y


class SequenceParallelAttention(TPCausalSelfAttention):
    def __init__(self, cfg: ToyConfig, dims: ParallelDims) -> None:
        super().__init__(cfg, dims)
        self.proj = SequenceParallelRowLinear(cfg.d_model, cfg.d_model, dims=dims, dtype=cfg.dtype)

    def forward(self, x: Tensor) -> Tensor:  # x: (b, s/t, h), this rank's positions
        # communication: all-gather the sequence (backward: reduce-scatter the gradient)
        x = gather_from_sequence_region(x, self.dims)  # (b, s, h): attention needs every position
        return CausalSelfAttention.forward(self, x)  # ends in proj's reduce-scatter: (b, s/t, h)


class SequenceParallelMLP(TPMLP):
    def __init__(self, cfg: ToyConfig, dims: ParallelDims) -> None:
        super().__init__(cfg, dims)
        self.fc2 = SequenceParallelRowLinear(cfg.d_mlp, cfg.d_model, dims=dims, dtype=cfg.dtype)

    def forward(self, x: Tensor) -> Tensor:  # x: (b, s/t, h)
        # communication: all-gather the sequence (backward: reduce-scatter the gradient)
        x = gather_from_sequence_region(x, self.dims)
        return MLP.forward(self, x)  # ends in fc2's reduce-scatter: (b, s/t, h)


class SequenceParallelBlock(TPBlock):
    """A TPBlock whose input and output are this rank's seq/tp positions.

    LayerNorms and residual adds run on the local positions only; the block's
    state_dict keys and shard layout are TPBlock's (`from_block` works).

    Under plain TP (block.py) the LayerNorms and the residual stream run on the
    whole (batch, seq, d_model) activation on every tp rank: the same work and
    the same stored activations tp times over. Korthikanti et al. 2022
    ("Reducing Activation Recomputation in Large Transformer Models", section
    4.2.2, figure 5) cut that part along the sequence instead: between blocks
    each tp rank holds seq/tp positions, and the two all-reduces of a sublayer
    become an all-gather and a reduce-scatter, the paper's g and g-bar:

        gather_from_sequence_region          forward: all-gather seq   backward: reduce-scatter seq   (g)
        reduce_scatter_to_sequence_region    forward: reduce-scatter   backward: all-gather seq       (g-bar)
        scatter_to_sequence_region           forward: keep own slice   backward: all-gather seq

    One sublayer then reads

        x (b, s/t, h) -> LayerNorm -> g: all-gather -> column-parallel -> ... ->
        row-parallel partial sums -> g-bar: reduce-scatter -> + bias -> + x (b, s/t, h)

    A ring all-gather and a ring reduce-scatter of S bytes each send (t-1)/t S
    per rank, together what one all-reduce of S sends: the wire bytes stay the
    same, the replicated activations are divided by t.

    The parameters that now see only this rank's tokens (both LayerNorms and the
    bias of each row-parallel layer, added after the reduce-scatter) get only a
    partial gradient; `allreduce_sequence_parallel_grads` sums them over tp after
    backward, as Megatron-LM's finalize_model_grads does. They are marked with
    `param.sequence_parallel = True`.

    Every collective goes through `threeaxes.comms` on the "tp" axis.
    """

    def __init__(self, cfg: ToyConfig, dims: ParallelDims | None = None) -> None:
        nn.Module.__init__(self)
        dims = resolve(dims)
        check_tp_layout(dims.tp, cfg.n_heads, cfg.d_mlp)
        check_sequence_split(cfg.seq_len, dims.tp)
        self.cfg, self.dims = cfg, dims
        self.ln1 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)
        self.attn = SequenceParallelAttention(cfg, dims)
        self.ln2 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)
        self.mlp = SequenceParallelMLP(cfg, dims)
        _mark(*self.ln1.parameters(), *self.ln2.parameters())


class SequenceParallelToy(nn.Module):
    """The toy with every block sequence-parallel; same names and state_dict as
    `tensor_parallel_toy`'s. Embeddings, ln_f and head stay replicated."""

    embed = ToyTransformer.embed
    logits = ToyTransformer.logits

    def __init__(self, model: ToyTransformer, dims: ParallelDims) -> None:
        super().__init__()
        cfg = self.cfg = model.cfg
        self.dims = dims
        self.tok_embed = copy.deepcopy(model.tok_embed)
        self.pos_embed = copy.deepcopy(model.pos_embed)
        self.blocks = nn.ModuleList(SequenceParallelBlock.from_block(b, cfg, dims) for b in model.blocks)
        self.ln_f = copy.deepcopy(model.ln_f)
        self.head = copy.deepcopy(model.head)

    def forward(self, tokens: Tensor) -> Tensor:  # tokens: (b, s)
        # no communication forward; backward all-gathers the embeddings' gradient
        # embed and logits are the toy's own methods, which read only the tables and layers copied here
        x = scatter_to_sequence_region(self.embed(tokens), self.dims)  # type: ignore[misc]  # (b, s/t, h)
        for block in self.blocks:
            x = block(x)
        # communication: all-gather the sequence for the replicated ln_f and head
        x = gather_from_sequence_region(x, self.dims, grad="slice")  # (b, s, h)
        return self.logits(x)  # type: ignore[misc]


def sequence_parallel_toy(model: ToyTransformer, dims: ParallelDims | None = None) -> SequenceParallelToy:
    """This rank's sequence-parallel copy of `model` (weights copied, not shared).
    After each backward call `allreduce_sequence_parallel_grads(sp_model)`."""
    dims = resolve(dims)
    check_tp_layout(dims.tp, model.cfg.n_heads, model.cfg.d_mlp)
    check_sequence_split(model.cfg.seq_len, dims.tp)
    return SequenceParallelToy(model, dims)


def allreduce_sequence_parallel_grads(model: nn.Module, dims: ParallelDims | None = None) -> int:
    """Sum over tp the gradients of the parameters marked `sequence_parallel`
    (LayerNorms, row-parallel biases), in one all-reduce of them all flattened.
    Returns how many tensors it summed."""
    dims = resolve(dims)
    grads = [p.grad for p in model.parameters()
             if getattr(p, "sequence_parallel", False) and p.grad is not None]
    if dims.tp == 1 or not grads:
        return len(grads)
    flat = torch.cat([g.reshape(-1) for g in grads])
    # communication: one all-reduce of every partial LayerNorm / bias gradient, flattened
    comms.all_reduce(flat, "tp", dims=dims)
    for g, summed in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(summed.view_as(g))
    return len(grads)


__all__ = ["SEQ_DIM", "check_sequence_split", "gather_from_sequence_region",
           "reduce_scatter_to_sequence_region", "scatter_to_sequence_region",
           "SequenceParallelRowLinear", "SequenceParallelAttention", "SequenceParallelMLP",
           "SequenceParallelBlock", "SequenceParallelToy", "sequence_parallel_toy",
           "allreduce_sequence_parallel_grads"]
