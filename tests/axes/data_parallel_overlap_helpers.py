"""Shared by the tests of the overlapped DataParallel wrapper: a one-block toy model in
float64, its bucket plan derived by hand, and the toy with a frozen parameter and an extra
layer only some ranks use.

Pickled by value: the ranks never import it."""
from __future__ import annotations

import sys

import cloudpickle
import torch
import torch.nn as nn

from threeaxes.toy import ToyConfig, ToyTransformer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# One block, width 8: 21 parameter tensors, 1,208 float64 numbers (as in test_data_parallel).
CFG = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, dtype=torch.float64)
GLOBAL_BATCH, STEPS, LR = 8, 3, 0.1
BUCKET_BYTES = 2048  # 256 float64 numbers
# The bucket plan for 256-number buckets, derived by hand in test_data_parallel.py
# (parameter sizes in the reverse of registration order, head first).
EXPECTED_BUCKETS = [[128, 8, 8, 8], [256], [32], [256],
                    [8, 8, 8, 64, 8, 64, 8, 64, 8], [64, 8, 8, 64], [128]]
N_TENSORS = 21


class WithExtras(nn.Module):
    """The toy model with one frozen parameter (pos_embed) and one extra layer
    that only the ranks listed in `used_on` put into the loss."""

    def __init__(self, cfg, seed, used_on=()):
        super().__init__()
        self.toy = ToyTransformer(cfg, seed)
        self.toy.pos_embed.weight.requires_grad_(False)
        self.extra = nn.Linear(cfg.vocab_size, cfg.vocab_size, dtype=cfg.dtype)
        generator = torch.Generator().manual_seed(seed)  # the same weights in every process
        with torch.no_grad():
            for p in self.extra.parameters():
                p.copy_(0.1 * torch.randn(p.shape, generator=generator, dtype=cfg.dtype))
        self.use_extra = False
        self.used_on = tuple(used_on)

    def forward(self, tokens):
        logits = self.toy(tokens)
        return logits + self.extra(logits) if self.use_extra else logits
