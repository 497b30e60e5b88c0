"""The kernel-time model the planner's SHAPES efficiency uses (threeaxes/cost/kernel_time.py):
a GEMM's efficiency from its thinnest side, and a layer's and the logits' time worked by hand
from Narayanan et al. 2021 and Korthikanti et al. 2022 (their tables, not the code's output)."""

import pytest

from threeaxes.cost import dim_factor, gemm_efficiency, layer_time, logits_time
from threeaxes.cost.kernel_time import GEMM_HALF_DIM, GEMM_PEAK_FRACTION

A100_PEAK = 312e12          # A100 datasheet, BF16 dense; the paper's 312 teraFLOP/s (Section 5)
A100_HBM = 2039e9           # A100 80GB SXM datasheet, bytes/s


# -- the efficiency function: bounded, monotone, with the cited anchors ---------------

def test_dim_factor_is_one_half_at_the_half_dimension_and_rises_to_one():
    assert dim_factor(GEMM_HALF_DIM) == pytest.approx(0.5)
    values = [dim_factor(d) for d in (1, 16, 64, 128, 512, 4096, 1 << 20)]
    assert values == sorted(values) and 0 < values[0] and values[-1] < 1
    assert dim_factor(1 << 20) == pytest.approx(1, abs=1e-3)


def test_gemm_efficiency_is_bounded_and_monotone_in_every_dimension():
    dims = (32, 96, 256, 768, 2048, 8192, 65536)
    for m in dims:
        for n in dims:
            row = [gemm_efficiency(m, n, k) for k in dims]
            assert row == sorted(row)
            assert all(0 < e <= GEMM_PEAK_FRACTION for e in row)
    # symmetric in its three sides: the thinnest side decides
    assert gemm_efficiency(2048, 768, 6144) == gemm_efficiency(6144, 2048, 768)
    assert gemm_efficiency(2048, 768, 6144) == pytest.approx(
        GEMM_PEAK_FRACTION * 768 / (768 + GEMM_HALF_DIM))


@pytest.mark.parametrize("kwargs", [dict(m=0, n=8, k=8), dict(m=8, n=8, k=8, peak_fraction=0),
                                    dict(m=8, n=8, k=8, peak_fraction=1.5)])
def test_gemm_efficiency_rejects_nonsense(kwargs):
    with pytest.raises(ValueError, match="must be"):
        gemm_efficiency(**kwargs)


def test_layer_time_by_hand():
    # s=2048, b=1, h=4096, a=32, t=4, full recomputation (4 passes of everything)
    s, b, h, a, t = 2048, 1, 4096, 32, 4
    lt = layer_time(s, b, h, a, tp=t, peak_flops=A100_PEAK, hbm_bandwidth=A100_HBM,
                    recompute="full")
    # dense: 24 b s h^2 / t per forward; thinnest side h/t = 1024
    dense_eff = GEMM_PEAK_FRACTION * 1024 / (1024 + GEMM_HALF_DIM)
    assert lt.dense == pytest.approx(4 * 24 * b * s * h * h / t / (A100_PEAK * dense_eff))
    # attention: 4 b s^2 h / t per forward; thinnest side is the head size 128
    attn_eff = GEMM_PEAK_FRACTION * 128 / (128 + GEMM_HALF_DIM)
    assert lt.attention == pytest.approx(4 * 4 * b * s * s * h / t / (A100_PEAK * attn_eff))
    # element-wise: Korthikanti Table 2 with t: sbh (10 + 24/t) + 5 a s^2 b / t bytes
    stored = s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t
    assert lt.elementwise == pytest.approx(4 * 1.5 * stored / A100_HBM)
    assert lt.total == pytest.approx(lt.dense + lt.attention + lt.elementwise)


def test_thin_tensor_parallel_shards_cost_more_gpu_seconds():
    # the same layer split 8 ways takes more than 1/8 of the time on one GPU
    kw = dict(peak_flops=A100_PEAK, hbm_bandwidth=A100_HBM, recompute="full")
    one = layer_time(2048, 1, 6144, 48, tp=1, **kw).total
    eight = layer_time(2048, 1, 6144, 48, tp=8, **kw).total
    assert one / 8 < eight < one / 4


def test_sequence_parallelism_splits_the_elementwise_work():
    # Korthikanti Table 2: sbh (10 + 24/t + 5as/(ht)) becomes sbh/t (34 + 5as/h)
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    kw = dict(tp=t, peak_flops=A100_PEAK, hbm_bandwidth=A100_HBM)
    plain = layer_time(s, b, h, a, **kw).elementwise
    sp = layer_time(s, b, h, a, sequence_parallel=True, **kw).elementwise
    assert sp / plain == pytest.approx((34 / t + 5 * a * s / (h * t))
                                       / (10 + 24 / t + 5 * a * s / (h * t)))


def test_logits_time_by_hand():
    # 6 b s h V / t FLOPs at the efficiency of its thinnest side (h = 2304)
    t = logits_time(2048, 2, 2304, 51200, tp=1, peak_flops=A100_PEAK)
    eff = GEMM_PEAK_FRACTION * 2304 / (2304 + GEMM_HALF_DIM)
    assert t == pytest.approx(6 * 4096 * 2304 * 51200 / (A100_PEAK * eff))
