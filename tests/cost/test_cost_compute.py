"""FLOPs, MFU and training time against Megatron-LM and Korthikanti et al."""
import pytest

from threeaxes.cost import flops_per_token, megatron_flops, mfu, step_time, training_flops, training_time

DAY = 86400.0


def test_six_n_per_token():
    # Kaplan et al. 2020, Section 2.1: C ~ 6 N per training token
    assert flops_per_token(1e9) == 6e9
    assert training_flops(1e9, 1e6) == 6e15


def test_palm_attention_term():
    # Chowdhery et al. 2022, Appendix B: 6N + 12 L H Q T; here H Q = h = 4, T = s = 8
    assert flops_per_token(100, n_layers=2, d_model=4, seq_len=8) == 600 + 12 * 2 * 4 * 8


def test_megatron_eq_3_closed_form():
    # Narayanan et al. 2021, eq. 3 (full recomputation):
    # F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    B, s, l, h, V = 1536, 2048, 96, 12288, 51200
    eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert megatron_flops(B, s, l, h, V, recompute="full").total == pytest.approx(eq3, rel=1e-12)


def test_korthikanti_eq_7_and_8():
    # Korthikanti et al. 2022, Appendix A: model FLOPs (eq. 7) and hardware FLOPs
    # with selective recomputation (eq. 8)
    B, s, l, h, V = 4, 2048, 48, 6144, 51200
    eq7 = 72 * B * l * s * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    eq8 = 72 * B * l * s * h**2 * (1 + s / (3 * h) + V / (12 * h * l))
    f = megatron_flops(B, s, l, h, V, recompute="selective")
    assert f.model == pytest.approx(eq7, rel=1e-12)
    assert f.total == pytest.approx(eq8, rel=1e-12)
    assert megatron_flops(B, s, l, h, V, recompute="none").total == pytest.approx(eq7)


# Korthikanti et al. 2022, Table 3 (configuration) and Table 5 (present work:
# sequence parallelism + selective recomputation, A100 peak 312 TFLOP/s):
# (name, global batch, layers, hidden, GPUs, seconds per iteration, MFU %, HFU %)
TABLE_5 = [
    ("22B", 4, 48, 6144, 8, 1.10, 41.5, 43.7),
    ("175B", 64, 96, 12288, 64, 13.75, 51.4, 52.8),
    ("530B", 280, 105, 20480, 280, 37.83, 56.0, 57.0),
    ("1T", 512, 128, 25600, 512, 71.49, 56.3, 57.0),
]


@pytest.mark.parametrize("name, B, L, h, gpus, seconds, mfu_pct, hfu_pct", TABLE_5)
def test_korthikanti_table_5_mfu_and_hfu(name, B, L, h, gpus, seconds, mfu_pct, hfu_pct):
    f = megatron_flops(B, 2048, L, h, 51200, recompute="selective")
    # the table rounds times to 10 ms and percentages to 0.1: allow 0.2 points
    assert 100 * mfu(f.model, seconds, gpus, 312e12) == pytest.approx(mfu_pct, abs=0.2)
    assert 100 * mfu(f.total, seconds, gpus, 312e12) == pytest.approx(hfu_pct, abs=0.2)


def test_narayanan_eq_4_training_days():
    # Narayanan et al. 2021, Section 5.1: GPT-3 (175B) on 300B tokens, 1024 A100s
    # at 140 teraFLOP/s each: about 34 days; 1T on 450B tokens, 3072 A100s at
    # 163 teraFLOP/s: about 84 days
    assert training_time(175e9, 300e9, 1024, 140e12) / DAY == pytest.approx(34, abs=0.5)
    assert training_time(1008e9, 450e9, 3072, 163e12) / DAY == pytest.approx(84, abs=0.5)


def test_step_time_and_mfu_are_inverse():
    t = step_time(1e18, 64, 312e12, 0.5)
    assert t == pytest.approx(1e18 / (64 * 312e12 * 0.5))
    assert mfu(1e18, t, 64, 312e12) == pytest.approx(0.5)


@pytest.mark.parametrize("fn, args", [
    (step_time, (1e18, 8, 312e12, 0)),
    (step_time, (1e18, 8, 312e12, 1.5)),
    (step_time, (1e18, 0, 312e12, 0.5)),
    (mfu, (1e18, 0, 8, 312e12)),
    (training_time, (1e9, 1e9, 0, 1e12)),
    (flops_per_token, (-1,)),
])
def test_bad_arguments_raise(fn, args):
    with pytest.raises(ValueError):
        fn(*args)


def test_megatron_flops_rejects_unknown_recompute():
    with pytest.raises(ValueError, match="choose recompute"):
        megatron_flops(1, 128, 2, 64, 100, recompute="partial")
