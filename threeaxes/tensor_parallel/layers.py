"""Column- and row-parallel linear layers (Megatron-LM's two ways to cut Y = X W)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from threeaxes.dims import ParallelDims, resolve
from threeaxes.tensor_parallel.maps import (
    copy_to_tp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    scatter_to_tp_region,
)
from threeaxes.tensor_parallel.shard import _braces, _divisors


def _check_split(features: int, what: str, tp: int) -> None:
    if features % tp:
        raise ValueError(f"tp={tp} does not divide {what}={features}; "
                         f"choose tp in {_braces(_divisors(features))}")


class ColumnParallelLinear(nn.Module):
    """y[..., this rank's out_features/tp] = x @ W[:, cols] + b[cols].

    The tp group and size come from `dims` (the run's current layout when None).
    `input_is_copied=True` skips the `copy_to_tp_region` at the input, for
    when the caller has already applied it once for several layers that
    share one input (q, k and v do). `gather_output=True` all-gathers the
    output slices into the full width.

    nn.Linear stores W transposed, weight = W.T of shape (out_features, in_features).

    * `ColumnParallelLinear`: each tp rank holds out_features/tp columns of W
      (rows of `weight`) and their bias, takes the whole input and produces its
      slice of the output features. No communication forward; the input's
      gradient is summed over the ranks backward (`copy_to_tp_region`).
    * `RowParallelLinear`: each tp rank holds in_features/tp rows of W (columns
      of `weight`), takes its slice of the input features and produces a partial
      sum of the whole output; the partial sums are all-reduced forward
      (`reduce_from_tp_region`) and the bias, held whole on every rank, is added
      once after the sum, not tp times.

    A column-parallel layer followed by a row-parallel one (attention's q/k/v
    then proj, the MLP's fc1 then fc2) needs no communication in between: the
    column layer's output slice is exactly the row layer's input slice.
    """

    def __init__(self, in_features: int, out_features: int, *, dims: ParallelDims | None = None,
                 bias: bool = True, input_is_copied: bool = False, gather_output: bool = False,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.dims = dims = resolve(dims)
        tp = self.tp = dims.tp
        _check_split(out_features, "out_features", tp)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_copied, self.gather_output = input_is_copied, gather_output
        self.weight = nn.Parameter(torch.empty(out_features // tp, in_features, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_features // tp, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features), the same on every tp rank
        if not self.input_is_copied:
            # communication (backward only): all-reduce x's gradient over the tp ranks
            x = copy_to_tp_region(x, self.dims)
        y = F.linear(x, self.weight, self.bias)  # (..., out_features / tp)
        if self.gather_output:
            # communication: all-gather the output slices; backward keeps this rank's slice
            y = gather_from_tp_region(y, self.dims)  # (..., out_features)
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"(local {self.out_features // self.tp}), tp={self.tp}")


class RowParallelLinear(nn.Module):
    """y = sum over tp ranks of x[..., rows] @ W[rows, :], then + b (once).

    With `input_is_parallel=True` (the default) x is already this rank's
    slice of the input features, as a column-parallel layer leaves it;
    otherwise the full x is cut here with `scatter_to_tp_region`.
    """

    def __init__(self, in_features: int, out_features: int, *, dims: ParallelDims | None = None,
                 bias: bool = True, input_is_parallel: bool = True,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.dims = dims = resolve(dims)
        tp = self.tp = dims.tp
        _check_split(in_features, "in_features", tp)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel = input_is_parallel
        self.weight = nn.Parameter(torch.empty(out_features, in_features // tp, dtype=dtype))
        # the bias is replicated: every rank adds the same one after the sum
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features / tp) if input_is_parallel
        if not self.input_is_parallel:
            # communication (backward only): all-gather the input gradient's slices
            x = scatter_to_tp_region(x, self.dims)
        partial = F.linear(x, self.weight)  # (..., out_features), this rank's partial sum
        # communication: all-reduce the partial sums; backward passes the gradient through
        y = reduce_from_tp_region(partial, self.dims)  # (..., out_features), the full sum
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} (local {self.in_features // self.tp}), "
                f"out_features={self.out_features}, tp={self.tp}")


__all__ = ["ColumnParallelLinear", "RowParallelLinear"]
