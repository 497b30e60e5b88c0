"""measure_pipeline(repeats=n): every rank keeps the same, shortest repeat of the step."""
import pytest

from threeaxes.launch import launch
from threeaxes.pipeline.measure import measure_pipeline
from threeaxes.toy import ToyConfig

CFG = ToyConfig(n_layers=4, d_model=16, n_heads=2, seq_len=8, vocab_size=16)


@pytest.mark.slow
def test_with_repeats_every_rank_keeps_the_same_step():
    # three repeats run one after the other, so their steps never overlap in time:
    # the ranks kept the same repeat exactly when their kept steps overlap
    runs = launch(measure_pipeline, 2, CFG, [("1f1b", 4, 1)], batch=4, layer_forward_s=0.002,
                  layer_backward_s=0.004, repeats=3, timeout=60)
    windows = []
    for r in runs:
        spans = r[("1f1b", 4, 1)]["trace"].compute()
        windows.append((min(e.start for e in spans), max(e.end for e in spans)))
    (start0, end0), (start1, end1) = windows
    assert start0 < end1 and start1 < end0, windows
