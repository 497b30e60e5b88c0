"""The toy block and the whole toy model, tensor-parallel."""
from __future__ import annotations

import copy
from typing import Any

import torch.nn as nn
from torch import Tensor

from threeaxes.dims import ParallelDims, resolve
from threeaxes.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from threeaxes.tensor_parallel.maps import copy_to_tp_region
from threeaxes.tensor_parallel.shard import check_tp_layout, shard_block_state
from threeaxes.toy import MLP, Block, CausalSelfAttention, ToyConfig, ToyTransformer


class TPCausalSelfAttention(CausalSelfAttention):
    """The toy's attention with q, k, v column-parallel and proj row-parallel."""

    def __init__(self, cfg: ToyConfig, dims: ParallelDims) -> None:
        nn.Module.__init__(self)  # not the parent's: it would build full-size Linears
        h = cfg.d_model
        kw: dict[str, Any] = dict(dims=dims, dtype=cfg.dtype)
        self.dims = dims
        self.head_dim = cfg.head_dim
        # q, k, v share one input, so it is copied into the tp region once, in forward
        self.q = ColumnParallelLinear(h, h, input_is_copied=True, **kw)
        self.k = ColumnParallelLinear(h, h, input_is_copied=True, **kw)
        self.v = ColumnParallelLinear(h, h, input_is_copied=True, **kw)
        self.proj = RowParallelLinear(h, h, **kw)  # ends with the forward all-reduce

    def forward(self, x: Tensor) -> Tensor:  # x: (batch, seq, d_model), the same on every tp rank
        # communication (backward only): all-reduce x's gradient over the tp ranks
        x = copy_to_tp_region(x, self.dims)
        # the toy's own code: q(x) is (batch, seq, n_heads/tp * head_dim), so it
        # runs n_heads/tp heads; proj's all-reduce sums the heads of every rank
        return super().forward(x)


class TPMLP(MLP):
    """The toy's MLP with fc1 column-parallel and fc2 row-parallel."""

    def __init__(self, cfg: ToyConfig, dims: ParallelDims) -> None:
        nn.Module.__init__(self)
        kw: dict[str, Any] = dict(dims=dims, dtype=cfg.dtype)
        self.dims = dims
        self.fc1 = ColumnParallelLinear(cfg.d_model, cfg.d_mlp, input_is_copied=True, **kw)
        self.fc2 = RowParallelLinear(cfg.d_mlp, cfg.d_model, **kw)  # ends with the forward all-reduce

    def forward(self, x: Tensor) -> Tensor:  # x: (batch, seq, d_model)
        # communication (backward only): all-reduce x's gradient over the tp ranks
        x = copy_to_tp_region(x, self.dims)
        # gelu acts feature by feature, so it can run on each rank's d_mlp/tp slice
        return super().forward(x)


class TPBlock(Block):
    """One tp rank's part of a toy block; Block.forward runs unchanged.

    The tp group, size and this rank's tp coordinate come from `dims` (the run's
    current layout when None). Build it empty and load `shard_block_state(...)`,
    or use `TPBlock.from_block`.

    Per block, each tp rank holds n_heads/tp heads (its columns of q, k, v and
    the matching rows of proj) and d_mlp/tp hidden features of the MLP (columns
    of fc1, rows of fc2); the LayerNorms are replicated. One block then costs

        forward:  2 all-reduces of (batch, seq, d_model): after attention, after the MLP
        backward: 2 all-reduces of (batch, seq, d_model): the input gradients of
                  attention and of the MLP (the conjugate copy maps)

    and nothing else: the head-wise attention needs no communication because
    every head lives on exactly one rank.

    The modules keep the toy's names (ln1, attn.q, ..., mlp.fc2) and reuse the
    toy's own forward code, so a shard's state_dict has the same keys as the full
    block's and the attention reads its local head count from q's output width.
    """

    def __init__(self, cfg: ToyConfig, dims: ParallelDims | None = None) -> None:
        nn.Module.__init__(self)
        dims = resolve(dims)
        check_tp_layout(dims.tp, cfg.n_heads, cfg.d_mlp)
        self.cfg, self.dims = cfg, dims
        self.ln1 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)  # replicated
        self.attn = TPCausalSelfAttention(cfg, dims)
        self.ln2 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)  # replicated
        self.mlp = TPMLP(cfg, dims)

    @classmethod
    def from_block(cls, block: nn.Module, cfg: ToyConfig, dims: ParallelDims | None = None) -> TPBlock:
        """This rank's shard of a full toy block (weights copied, not shared): the
        shard of tp coordinate `dims.coord("tp")`."""
        tp_block = cls(cfg, dims)
        dims = tp_block.dims
        tp_block.load_state_dict(
            shard_block_state(block.state_dict(), dims.coord("tp"), dims.tp, n_heads=cfg.n_heads))
        return tp_block


def tensor_parallel_toy(model: ToyTransformer, dims: ParallelDims | None = None) -> ToyTransformer:
    """A copy of `model` in which every block is this rank's TPBlock.

    The embeddings, the final LayerNorm and the LM head stay whole
    (replicated) on every tp rank, so every rank computes the same logits
    and the same loss; their gradients are then equal on every rank without
    any extra communication.
    """
    cfg, dims = model.cfg, resolve(dims)
    check_tp_layout(dims.tp, cfg.n_heads, cfg.d_mlp)
    tp_model = copy.deepcopy(model)
    tp_model.blocks = nn.ModuleList(TPBlock.from_block(b, cfg, dims) for b in model.blocks)
    return tp_model


__all__ = ["TPCausalSelfAttention", "TPMLP", "TPBlock", "tensor_parallel_toy"]
