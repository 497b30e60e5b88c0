"""threeaxes.trace.module_spans: one compute Event per layer's forward and backward."""
import torch

from threeaxes import trace
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch


def test_module_spans_time_each_layers_forward_and_backward_in_order():
    cfg = ToyConfig(dtype=torch.float64)
    model = ToyTransformer(cfg)
    inputs, targets = make_batch(cfg, batch_size=2)
    layers = ["tok_embed", "pos_embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "ln_f", "head"]
    assert trace.layers_of(model) == layers
    with trace.record() as t, trace.module_spans(model):
        lm_loss(model(inputs), targets).backward()
    forward, backward = t.compute("forward"), t.compute("backward")
    assert [e.module for e in forward] == layers
    # backward meets the blocks in the reverse order; both embeddings come last, in either order
    assert [e.module for e in backward][:6] == layers[2:][::-1]
    assert {e.module for e in backward[6:]} == {"tok_embed", "pos_embed"}
    assert all(e.start <= e.end for e in t.events)
    assert max(e.end for e in forward) <= min(e.start for e in backward)
    # the hooks are gone once the block ends: nothing more is recorded
    with trace.record() as after:
        lm_loss(model(inputs), targets).backward()
    assert len(after) == 0
