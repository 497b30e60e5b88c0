"""Full toy weights -> one tp rank's shard, and the shards -> full weights again."""
from __future__ import annotations

import re
from collections.abc import Iterable

import torch

# tensor name inside a block -> the dim of `weight`/`bias` that is cut, or None (replicated)
BLOCK_LAYOUT: dict[str, int | None] = {
    "ln1.weight": None, "ln1.bias": None,
    "attn.q.weight": 0, "attn.q.bias": 0,
    "attn.k.weight": 0, "attn.k.bias": 0,
    "attn.v.weight": 0, "attn.v.bias": 0,
    "attn.proj.weight": 1, "attn.proj.bias": None,
    "ln2.weight": None, "ln2.bias": None,
    "mlp.fc1.weight": 0, "mlp.fc1.bias": 0,
    "mlp.fc2.weight": 1, "mlp.fc2.bias": None,
}

_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.(.+)$")


# -- layout checks ------------------------------------------------------------------

def _divisors(n: int) -> set[int]:
    return {d for d in range(1, n + 1) if n % d == 0}


def _braces(values: Iterable[int]) -> str:
    """{1, 2, 4}, sorted, the way the error messages show a set of choices."""
    return "{" + ", ".join(str(v) for v in sorted(values)) + "}"


def check_tp_layout(tp: int, n_heads: int, d_mlp: int | None = None, tp_rank: int | None = None) -> None:
    """Raise a ValueError that says what to change unless `tp` splits the block evenly."""
    if type(tp) is not int or tp < 1:
        raise ValueError(f"tp={tp!r}; it must be a positive integer")
    if n_heads % tp:
        raise ValueError(f"tp={tp} does not divide n_heads={n_heads}; "
                         f"choose tp in {_braces(_divisors(n_heads))}")
    if d_mlp is not None and d_mlp % tp:
        raise ValueError(f"tp={tp} does not divide the MLP width d_mlp={d_mlp}; "
                         f"choose tp in {_braces(_divisors(n_heads) & _divisors(d_mlp))}")
    if tp_rank is not None and (type(tp_rank) is not int or not 0 <= tp_rank < tp):
        raise ValueError(f"tp_rank={tp_rank!r} is outside 0..{tp - 1}; with tp={tp} "
                         f"the tp ranks are {list(range(tp))}")


def layout_of(name: str) -> int | None:
    """The dim cut under TP for a tensor of a block ("attn.q.weight") or of the
    whole model ("blocks.2.attn.q.weight"); None when it is replicated."""
    if name in BLOCK_LAYOUT:
        return BLOCK_LAYOUT[name]
    m = _BLOCK_KEY.match(name)
    if m:
        name = m.group(2)
    elif not name.startswith("blocks."):
        return None  # embeddings, ln_f, head: replicated
    if name not in BLOCK_LAYOUT:
        raise KeyError(f"{name!r} is not a tensor of the toy block; the block holds "
                       f"{sorted(BLOCK_LAYOUT)}")
    return BLOCK_LAYOUT[name]


# -- split and join -----------------------------------------------------------------

def _shard(full_state: dict[str, torch.Tensor], tp_rank: int, tp: int, n_heads: int) -> dict[str, torch.Tensor]:
    d_mlp = None
    for name, t in full_state.items():
        if name.endswith("mlp.fc1.weight"):
            d_mlp = t.shape[0]
    check_tp_layout(tp, n_heads, d_mlp, tp_rank)
    out: dict[str, torch.Tensor] = {}
    for name, t in full_state.items():
        dim = layout_of(name)
        if dim is None:
            out[name] = t.detach().clone()
        else:
            out[name] = t.detach().chunk(tp, dim=dim)[tp_rank].clone()
    return out


def _gather(shards: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    shards = list(shards)
    if not shards:
        raise ValueError("gather needs the shards of every tp rank, in tp-rank order; got none")
    names = list(shards[0])
    for r, s in enumerate(shards[1:], start=1):
        if list(s) != names:
            missing = sorted(set(names) ^ set(s))
            raise ValueError(f"tp rank {r}'s shard holds different tensors from rank 0's "
                             f"(differences: {missing}); pass the state of one model from every rank")
    full = {}
    for name in names:
        parts = [s[name].detach() for s in shards]
        dim = layout_of(name)
        if dim is None:
            for r, p in enumerate(parts[1:], start=1):
                if not torch.equal(p, parts[0]):
                    diff = (p - parts[0]).abs().max().item()
                    raise ValueError(
                        f"{name} is replicated but tp rank {r} holds a different copy from rank 0 "
                        f"(max abs diff {diff:.3g}); the replicas drifted apart: "
                        f"check that every rank sees the same input and the same gradient")
            full[name] = parts[0].clone()
        else:
            full[name] = torch.cat(parts, dim=dim)
    return full


def shard_block_state(full_state: dict, tp_rank: int, tp: int, *, n_heads: int) -> dict:
    """This tp rank's slice of a toy block's state_dict (keys as in `Block`).

    Column-parallel tensors keep 1/tp of the output features, row-parallel
    weights 1/tp of the input features; everything else is copied whole.
    Rank r gets the r-th contiguous slice, so it holds heads
    [r * n_heads/tp, (r+1) * n_heads/tp).

    nn.Linear keeps its weight transposed, as (out_features, in_features), and
    computes y = x @ weight.T + bias. So in the math Y = X W, with W = weight.T:

    * a column cut of W (each rank gets some output features) is a cut of
      `weight` along dim 0, and the bias is cut the same way;
    * a row cut of W (each rank gets some input features) is a cut of `weight`
      along dim 1; the bias is not cut, it is added once after the all-reduce.

    In the toy block (names from `threeaxes.toy`):

        ln1, ln2                replicated
        attn.q, attn.k, attn.v  column-parallel: heads n_heads/tp per rank
        attn.proj               row-parallel, bias replicated
        mlp.fc1                 column-parallel: d_mlp/tp hidden features per rank
        mlp.fc2                 row-parallel, bias replicated

    In the whole ToyTransformer only the blocks are split: the embeddings,
    the final LayerNorm and the LM head are replicated on every tp rank. (Megatron
    also splits the embedding and head along the vocabulary; the toy's 32-word
    vocabulary is not worth it.)
    """
    bad = [k for k in full_state if k not in BLOCK_LAYOUT]
    if bad:
        raise KeyError(f"{bad} are not tensors of one toy block; for the whole model "
                       f"use shard_model_state")
    return _shard(full_state, tp_rank, tp, n_heads)


def gather_block_state(shards: Iterable[dict[str, torch.Tensor]]) -> dict:
    """The full block state from every tp rank's shard, listed in tp-rank order."""
    return _gather(shards)


def shard_model_state(full_state: dict, tp_rank: int, tp: int, *, n_heads: int) -> dict:
    """This tp rank's slice of a whole ToyTransformer's state_dict: every
    block split as in `shard_block_state`, the rest replicated."""
    return _shard(full_state, tp_rank, tp, n_heads)


def gather_model_state(shards: Iterable[dict[str, torch.Tensor]]) -> dict:
    """The full ToyTransformer state from every tp rank's shard, in tp-rank order.

    Replicated tensors must be identical on every rank; a difference raises,
    since it means the replicas drifted apart."""
    return _gather(shards)


__all__ = ["BLOCK_LAYOUT", "check_tp_layout", "layout_of", "shard_block_state",
           "gather_block_state", "shard_model_state", "gather_model_state"]
