"""Cutting the toy transformer into pipeline stages.

Stage 0 holds the embeddings and the first blocks; the last stage holds the
last blocks, the final norm and the head (the loss is computed right after
it). Each `StageModule` is copied from a full `ToyTransformer` built from the
same seed, and keeps the full model's parameter names ("blocks.2.mlp.fc1.weight"),
so a stage's parameters compare one to one with a single-process run.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch.nn as nn
from torch import Tensor

from ..toy import ToyConfig, ToyTransformer

__all__ = ["split_stages", "check_stage_layers", "StageModule", "build_stage", "build_stages"]


def _divisors(n: int) -> str:
    """'{1, 2, 4}': the stage counts that split n layers evenly."""
    return "{" + ", ".join(str(d) for d in range(1, n + 1) if n % d == 0) + "}"


def split_stages(n_layers: int, pp: int, *, uneven: bool = False) -> list[list[int]]:
    """Layer indices of each of `pp` stages: contiguous, in order, as even as
    possible. `split_stages(4, 2) == [[0, 1], [2, 3]]`.

    With uneven=False (the default) pp must divide n_layers, so every stage
    does the same work; uneven=True gives the first n_layers % pp stages one
    layer more.
    """
    if type(n_layers) is not int or n_layers < 1:
        raise ValueError(f"n_layers={n_layers!r}; it must be an int >= 1")
    if type(pp) is not int or pp < 1:
        raise ValueError(f"pp={pp!r}; the number of pipeline stages must be an int >= 1")
    if pp > n_layers:
        raise ValueError(
            f"pp={pp} > n_layers={n_layers}: every stage needs at least one layer; "
            f"choose pp in {_divisors(n_layers)}" + ("" if not uneven else f" or any pp <= {n_layers}"))
    if n_layers % pp and not uneven:
        raise ValueError(
            f"pp={pp} does not divide n_layers={n_layers}; choose pp in {_divisors(n_layers)}, "
            f"or pass uneven=True to let the first {n_layers % pp} of the {pp} stages take "
            f"one layer more than the others")
    base, extra = divmod(n_layers, pp)
    stages, start = [], 0
    for s in range(pp):
        size = base + (1 if s < extra else 0)
        stages.append(list(range(start, start + size)))
        start += size
    return stages


def check_stage_layers(stage_layers: Sequence[Sequence[int]], n_layers: int) -> list[list[int]]:
    """Explicit boundaries must cover 0..n_layers-1 once, in order, with no empty stage."""
    stages = [list(s) for s in stage_layers]
    if any(not s for s in stages):
        raise ValueError(f"stage_layers={stages} has an empty stage; give every stage >= 1 layer")
    flat = [i for s in stages for i in s]
    if flat != list(range(n_layers)):
        raise ValueError(f"stage_layers={stages} must list layers 0..{n_layers - 1} once each, "
                         f"in order (stage 0 first); e.g. {split_stages(n_layers, len(stages), uneven=True)}")
    return stages


class StageModule(nn.Module):
    """One pipeline stage: (embeddings) -> some blocks -> (final norm, head).

    forward takes token ids on the first stage and an activation
    (batch, seq, d_model) elsewhere; it returns an activation of the same
    shape, or logits (batch, seq, vocab) on the last stage.
    """

    def __init__(self, model: ToyTransformer, layers: Sequence[int], stage_index: int, n_stages: int) -> None:
        super().__init__()
        self.cfg = model.cfg
        self.layers = list(layers)
        self.stage_index, self.n_stages = stage_index, n_stages
        self.is_first, self.is_last = stage_index == 0, stage_index == n_stages - 1
        if self.is_first:
            self.tok_embed = copy.deepcopy(model.tok_embed)
            self.pos_embed = copy.deepcopy(model.pos_embed)
        # keys are the global layer indices, so names match the full model's
        self.blocks = nn.ModuleDict({str(i): copy.deepcopy(model.blocks[i]) for i in self.layers})
        if self.is_last:
            self.ln_f = copy.deepcopy(model.ln_f)
            self.head = copy.deepcopy(model.head)

    def forward(self, x: Tensor) -> Tensor:
        if self.is_first:  # x: (batch, seq) token ids -> (batch, seq, d_model)
            # the full model's own embed(), run on this stage's copies of the tables
            x = ToyTransformer.embed(self, x)  # type: ignore[arg-type]  # it reads only tok_embed, pos_embed
        for block in self.blocks.values():
            x = block(x)
        if self.is_last:   # (batch, seq, d_model) -> (batch, seq, vocab)
            x = self.head(self.ln_f(x))
        return x

    def extra_repr(self) -> str:
        return f"stage {self.stage_index}/{self.n_stages}, layers {self.layers}"


def build_stages(cfg: ToyConfig, pp: int, *, seed: int = 0, stage_layers: Sequence[Sequence[int]] | None = None,
                 ranks: Sequence[int] | None = None) -> dict[int, StageModule]:
    """Stage modules {stage: module} for the given stages (default: all pp),
    cut from one full ToyTransformer(cfg, seed). `stage_layers` overrides
    the even split with explicit boundaries."""
    layers = (split_stages(cfg.n_layers, pp) if stage_layers is None
              else check_stage_layers(stage_layers, cfg.n_layers))
    if len(layers) != pp:
        raise ValueError(f"stage_layers has {len(layers)} stages but pp={pp}; give one list per stage")
    model = ToyTransformer(cfg, seed)
    wanted = range(pp) if ranks is None else ranks
    return {s: StageModule(model, layers[s], s, pp) for s in wanted}


def build_stage(cfg: ToyConfig, stage: int, pp: int, *, seed: int = 0,
                stage_layers: Sequence[Sequence[int]] | None = None) -> StageModule:
    """The one stage that pipeline rank `stage` holds."""
    if not 0 <= stage < pp:
        raise ValueError(f"stage={stage} is outside 0..{pp - 1}")
    return build_stages(cfg, pp, seed=seed, stage_layers=stage_layers, ranks=[stage])[stage]
