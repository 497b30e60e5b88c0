"""The toy 4-layer transformer that every drop walks through, and its data."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class ToyConfig:
    """Sizes of the toy model. Checked when made; the errors say what to change."""

    vocab_size: int = 32
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 4
    seq_len: int = 16
    mlp_ratio: int = 4
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "seq_len", "mlp_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ToyConfig.{name}={value!r}; it must be a positive integer")
        if self.d_model % self.n_heads:
            options = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}; "
                f"choose n_heads in {set(options)}")
        if self.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype={self.dtype}; use torch.float32, or torch.float64 for exact tests")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_mlp(self) -> int:
        return self.mlp_ratio * self.d_model


# -- the model -----------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention.

    The number of heads is read from the width of q's output, so the same code
    runs on a tensor-parallel rank that holds only some of the heads.
    """

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        h = cfg.d_model
        self.head_dim = cfg.head_dim
        # nn.Module: tensor parallelism puts its column- and row-parallel layers here
        self.q: nn.Module = nn.Linear(h, h, dtype=cfg.dtype)
        self.k: nn.Module = nn.Linear(h, h, dtype=cfg.dtype)
        self.v: nn.Module = nn.Linear(h, h, dtype=cfg.dtype)
        self.proj: nn.Module = nn.Linear(h, h, dtype=cfg.dtype)

    def forward(self, x: Tensor) -> Tensor:  # x: (batch, seq, d_model)
        b, s, _ = x.shape
        # (batch, heads_here, seq, head_dim); heads_here = n_heads / tp under TP
        q, k, v = (f(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, s, -1)  # (batch, seq, heads_here * head_dim)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        # nn.Module: tensor parallelism puts its column- and row-parallel layers here
        self.fc1: nn.Module = nn.Linear(cfg.d_model, cfg.d_mlp, dtype=cfg.dtype)
        self.fc2: nn.Module = nn.Linear(cfg.d_mlp, cfg.d_model, dtype=cfg.dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-LayerNorm decoder block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ToyTransformer(nn.Module):
    """Token + position embedding, `n_layers` blocks, final norm, LM head.

    The same seed gives the same weights in every process, which is what lets
    every parallel run start from exactly the single-process model.

    The model is a GPT-style decoder small enough that a training step takes
    milliseconds on a laptop CPU, and large enough that every axis has something
    to split: 4 heads for tensor parallelism, 4 layers for pipeline stages, a
    batch for data parallelism.

    Layout (names the parallel modules rely on)::

        tok_embed, pos_embed          (vocab, d_model), (seq_len, d_model)
        blocks[i].ln1                 LayerNorm(d_model)
        blocks[i].attn.q / k / v      Linear(d_model, d_model), one per projection
        blocks[i].attn.proj           Linear(d_model, d_model)
        blocks[i].ln2                 LayerNorm(d_model)
        blocks[i].mlp.fc1             Linear(d_model, mlp_ratio * d_model)
        blocks[i].mlp.fc2             Linear(mlp_ratio * d_model, d_model)
        ln_f, head                    LayerNorm(d_model), Linear(d_model, vocab, bias=False)

    q, k and v are separate matrices (not one fused qkv) so that splitting each by
    output columns gives every tensor-parallel rank whole heads.
    """

    def __init__(self, cfg: ToyConfig = ToyConfig(), seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, dtype=cfg.dtype)
        self.pos_embed = nn.Embedding(cfg.seq_len, cfg.d_model, dtype=cfg.dtype)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, dtype=cfg.dtype)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False, dtype=cfg.dtype)
        init_weights(self, seed)

    def embed(self, tokens: Tensor) -> Tensor:  # tokens: (batch, seq) -> (batch, seq, d_model)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tok_embed(tokens) + self.pos_embed(positions)

    def logits(self, x: Tensor) -> Tensor:  # (batch, seq, d_model) -> (batch, seq, vocab)
        return self.head(self.ln_f(x))

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.logits(x)


def init_weights(model: nn.Module, seed: int) -> None:
    """GPT-2 style init from a private generator: N(0, 0.02) weights, zero
    biases, unit LayerNorm gains. Deterministic and independent of the global RNG."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.02)


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy over every position of every example."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# -- the data --------------------------------------------------------------------

def make_batch(cfg: ToyConfig, batch_size: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Deterministic (inputs, targets), each (batch_size, seq_len) of token ids.

    Every sequence counts up from a random start in steps of 1, 2 or 3 (mod
    vocab_size). The model must read the step off the context to predict the
    next token, which it learns within a few dozen steps, so the loss visibly
    falls. Targets are the inputs shifted left by one.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}; it must be a positive integer")
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab_size, (batch_size, 1), generator=gen)
    step = torch.randint(1, 4, (batch_size, 1), generator=gen)
    seq = (start + step * torch.arange(cfg.seq_len + 1)) % cfg.vocab_size
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


# -- counting ---------------------------------------------------------------------

def parameter_formula(cfg: ToyConfig) -> dict[str, int]:
    """Parameters per component by the counting formula the course teaches.

    Per block, with h = d_model and an MLP ratio of 4: attention 4h^2 + 4h
    (q, k, v, proj with biases), MLP 8h^2 + 5h (h->4h->h with biases), two
    LayerNorms 4h; together 12h^2 + 13h (Narayanan et al. 2021, eq. 2).
    Embeddings add (V + s)h, the final norm 2h, the untied head Vh.
    """
    h, V, s, r = cfg.d_model, cfg.vocab_size, cfg.seq_len, cfg.mlp_ratio
    per_block = 4 * h * h + 4 * h + 2 * r * h * h + (r + 1) * h + 4 * h
    counts = {
        "tok_embed": V * h,
        "pos_embed": s * h,
        "blocks": cfg.n_layers * per_block,
        "ln_f": 2 * h,
        "head": V * h,
    }
    counts["total"] = sum(counts.values())
    return counts


def count_parameters(model: ToyTransformer) -> dict[str, int]:
    """Parameters per component, counted from the tensors themselves."""
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        component = name.split(".")[0]
        counts[component] = counts.get(component, 0) + p.numel()
    counts["total"] = sum(counts.values())
    return counts


def train_steps(model: nn.Module, batches: Iterable[tuple[Tensor, Tensor]], lr: float = 1e-2,
                optimizer: str = "sgd") -> list[float]:
    """Single-process reference: one optimizer step per (inputs, targets) batch.
    Returns the loss of each step as floats."""
    opt = make_optimizer(model, lr, optimizer)
    losses: list[float] = []
    for inputs, targets in batches:
        opt.zero_grad()
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def make_optimizer(model: nn.Module, lr: float = 1e-2, kind: str = "sgd") -> torch.optim.Optimizer:
    """The optimizer every proof uses, so parallel and reference runs match."""
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"optimizer={kind!r}; choose 'sgd' or 'adam'")


__all__ = [
    "ToyConfig", "ToyTransformer", "Block", "CausalSelfAttention", "MLP",
    "init_weights", "lm_loss", "make_batch", "parameter_formula",
    "count_parameters", "train_steps", "make_optimizer",
]
