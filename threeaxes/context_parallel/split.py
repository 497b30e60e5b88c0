"""Which tokens each cp rank holds: the sequence split of context parallelism."""
from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_split", "sequence_positions", "split_sequence", "gather_sequence", "causal_pairs"]


def _divisors(n: int) -> str:
    return "{" + ", ".join(str(d) for d in range(1, n + 1) if n % d == 0) + "}"


def check_split(cp: int, seq_len: int, balanced: bool = True) -> None:
    """Raise a ValueError that says what to change unless cp ranks can split seq_len tokens."""
    if type(cp) is not int or cp < 1:
        raise ValueError(f"cp={cp!r}; the context-parallel size must be a positive integer")
    pieces = 2 * cp if balanced else cp
    if seq_len % pieces:
        what = f"2 * cp = {pieces} chunks (the load-balanced split)" if balanced else f"cp = {cp} pieces"
        raise ValueError(f"seq_len={seq_len} does not split into {what}; choose cp so that "
                         f"{'2 * cp' if balanced else 'cp'} divides {seq_len}: "
                         f"{'2 * cp' if balanced else 'cp'} in {_divisors(seq_len)}")


def sequence_positions(cp_rank: int, cp: int, seq_len: int, balanced: bool = True) -> torch.Tensor:
    """The global token positions rank `cp_rank` (0..cp-1) holds, in the order it holds them.

    Causal attention makes a plain split uneven: the rank holding the last tokens
    attends to everything before them, the rank holding the first tokens to almost
    nothing. The load-balanced split cuts the sequence into 2 cp chunks and gives
    rank i chunks i and 2 cp - 1 - i, one early and one late, so every rank scores
    the same number of (query, key) pairs (Megatron-LM's context parallelism and
    torchtitan both do this; Liu et al. 2023's ring attention is the ring it runs on).

        sequence_positions(1, cp=2, seq_len=16)     # tensor([4, 5, 6, 7, 8, 9, 10, 11])
        sequence_positions(0, cp=2, seq_len=16)     # tensor([0, 1, 2, 3, 12, 13, 14, 15])

    Pure functions of numbers and tensors; no processes.
    """
    check_split(cp, seq_len, balanced)
    if not 0 <= cp_rank < cp:
        raise ValueError(f"cp_rank={cp_rank!r} is outside 0..{cp - 1}")
    if not balanced:
        n = seq_len // cp
        return torch.arange(cp_rank * n, (cp_rank + 1) * n)
    c = seq_len // (2 * cp)
    early, late = cp_rank, 2 * cp - 1 - cp_rank
    return torch.cat([torch.arange(early * c, (early + 1) * c), torch.arange(late * c, (late + 1) * c)])


def split_sequence(x: torch.Tensor, cp_rank: int, cp: int, dim: int = 1,
                   balanced: bool = True) -> torch.Tensor:
    """The part of `x` (the whole sequence along `dim`) that rank `cp_rank` holds."""
    return x.index_select(dim, sequence_positions(cp_rank, cp, x.shape[dim], balanced))


def gather_sequence(parts: Sequence[torch.Tensor], dim: int = 1, balanced: bool = True) -> torch.Tensor:
    """Put every rank's part (in cp rank order) back into the whole sequence along `dim`."""
    cp = len(parts)
    seq_len = sum(p.shape[dim] for p in parts)
    order = torch.cat([sequence_positions(r, cp, seq_len, balanced) for r in range(cp)])
    whole = torch.cat(list(parts), dim=dim)
    return whole.index_select(dim, torch.argsort(order))


def causal_pairs(cp: int, seq_len: int, balanced: bool = True) -> list[int]:
    """How many (query, key) pairs each rank scores under the causal mask: its share of
    the attention's work. A query at position p sees keys 0..p, so p + 1 pairs."""
    return [int((sequence_positions(r, cp, seq_len, balanced) + 1).sum()) for r in range(cp)]
