"""Drop 6 on the student's side: the runner of the sequence-parallel MLP exercise.

`sp_mlp_results` runs a student's `sp_mlp_sublayer` on fresh ranks, on this
rank's slice of a fixed one-process MLP sublayer (`one_process_mlp`), then backward,
and sends back raw numbers: no verdict is decided on a rank, since ranks started
from a student's notebook run there. The grader judges what comes back
(`autograder/references/drop06.py`); the visible check compares it with stored
cases (`threeaxes.grading.visible`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the hints only: torch is imported inside the functions, on the ranks
    import torch

    from threeaxes.toy import Block, ToyConfig

__all__ = ["CUTS", "one_process_mlp", "sp_mlp_config", "sp_mlp_results"]


# -- exercise 2: the MLP half of a sequence-parallel block ---------------------------

def one_process_mlp(cfg: ToyConfig, batch: int,
                    seed: int) -> tuple[Block, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The MLP sublayer in one process, with random (nonzero) biases, its input and a
    fixed output weighting; the gradients of the loss sum(y * w)."""
    import torch

    from threeaxes.toy import Block

    gen = torch.Generator().manual_seed(seed)
    block = Block(cfg)
    with torch.no_grad():
        for p in list(block.ln2.parameters()) + list(block.mlp.parameters()):
            p.copy_(torch.randn(p.shape, generator=gen, dtype=cfg.dtype) * 0.3)
        block.ln2.weight.add_(1.0)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, generator=gen, dtype=cfg.dtype, requires_grad=True)
    w = torch.randn(batch, cfg.seq_len, cfg.d_model, generator=gen, dtype=cfg.dtype)
    y = x + block.mlp(block.ln2(x))
    (y * w).sum().backward()
    return block, x, w, y.detach()


# The MLP's tensors and how each is cut over tp: None whole, else the dim it is split along.
CUTS: dict[str, tuple[str, int | None]] = {"ln.weight": ("ln2.weight", None), "ln.bias": ("ln2.bias", None),
         "fc1.weight": ("mlp.fc1.weight", 0), "fc1.bias": ("mlp.fc1.bias", 0),
         "fc2.weight": ("mlp.fc2.weight", 1), "fc2.bias": ("mlp.fc2.bias", None)}


def sp_mlp_config(seq_len: int, d_model: int) -> ToyConfig:
    import torch

    from threeaxes.toy import ToyConfig

    # n_heads=1: only the MLP half runs here, so any width works
    return ToyConfig(seq_len=seq_len, d_model=d_model, n_heads=1, dtype=torch.float64)


def sp_mlp_results(rank: int, world_size: int, sp_mlp_sublayer: Callable[..., Any], seq_len: int = 8, batch: int = 2,
                   seed: int = 0, d_model: int = 32) -> dict[str, Any]:
    """On fresh ranks: run the student's sequence-parallel MLP sublayer on this rank's
    slice and shards, then backward; return the raw results (plain values) for
    `judge_sp_mlp` to compare, in the grader, with one process:
    {"error": None or what the code raised, "type": the output's type name, "shape",
    "requires_grad", "output": the output flattened to floats, "grads": {"x" and each
    key of `shard`: this rank's gradient flattened, or None}}."""
    import torch

    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(tp=world_size)
    t, me = world_size, dims.coord("tp")
    block, x, w, _ = one_process_mlp(sp_mlp_config(seq_len, d_model), batch, seed)
    params = dict(block.named_parameters())
    shard = {k: (params[name].detach() if d is None else params[name].detach().chunk(t, d)[me])
             .clone().requires_grad_() for k, (name, d) in CUTS.items()}
    x_mine = x.detach().chunk(t, 1)[me].clone().requires_grad_()
    out: dict[str, Any] = {"error": None, "type": None, "shape": None, "requires_grad": False, "output": None,
                           "grads": None}
    try:
        y = sp_mlp_sublayer(x_mine, shard, dims)
        out["type"] = type(y).__name__
        if not isinstance(y, torch.Tensor):
            return out
        out.update(shape=tuple(y.shape), requires_grad=y.requires_grad,
                   output=y.detach().reshape(-1).tolist())
        if y.requires_grad and tuple(y.shape) == tuple(w.chunk(t, 1)[me].shape):
            (y * w.chunk(t, 1)[me]).sum().backward()
            out["grads"] = {k: None if v.grad is None else v.grad.reshape(-1).tolist()
                            for k, v in [("x", x_mine)] + list(shard.items())}
    except Exception as err:  # noqa: BLE001 - the student's code: report, do not crash the rank
        out["error"] = f"sp_mlp_sublayer raised {type(err).__name__}: {err}"
    return out
