"""model_state_bytes against the ZeRO paper's worked numbers."""
import pytest

from threeaxes.cost import GB, model_state_bytes


@pytest.mark.parametrize("stage, expected_gb", [
    # Rajbhandari et al. 2020 (ZeRO), Figure 1: Psi = 7.5B, K = 12, N_d = 64
    (0, 120.0),   # baseline (2 + 2 + K) Psi
    (1, 31.4),    # P_os
    (2, 16.6),    # P_os+g
    (3, 1.9),     # P_os+g+p
])
def test_zero_figure_1(stage, expected_gb):
    got = model_state_bytes(7.5e9, dp=64, zero_stage=stage).total / GB
    assert round(got, 1) == expected_gb


def test_zero_figure_1_by_term():
    # P_os: 2 Psi + 2 Psi + 12 Psi / 64 (ZeRO Section 5.1)
    m = model_state_bytes(7.5e9, dp=64, zero_stage=1)
    assert m.params == 2 * 7.5e9 and m.grads == 2 * 7.5e9
    assert m.optimizer == pytest.approx(12 * 7.5e9 / 64)
    assert m.total == pytest.approx(m.params + m.grads + m.optimizer)


def test_zero_section_3_1_gpt2_example():
    # ZeRO Section 3.1: mixed-precision Adam needs 16 Psi bytes; a 1.5B-parameter
    # GPT-2 therefore needs at least 24 GB for its model states
    assert model_state_bytes(1.5e9).total == pytest.approx(24 * GB)


def test_fp32_is_4_4_8():
    m = model_state_bytes(1e9, precision="fp32")
    assert (m.params, m.grads, m.optimizer) == (4e9, 4e9, 8e9)


def test_tp_and_pp_divide_before_zero_shards():
    # 8e9 params, tp=2, pp=4 -> 1e9 per model-parallel rank; ZeRO-3 over dp=4
    m = model_state_bytes(8e9, dp=4, tp=2, pp=4, zero_stage=3)
    assert m.params == pytest.approx(2 * 1e9 / 4)
    assert m.grads == pytest.approx(2 * 1e9 / 4)
    assert m.optimizer == pytest.approx(12 * 1e9 / 4)
    # without ZeRO, dp changes nothing
    assert model_state_bytes(8e9, dp=4, tp=2, pp=4).total == pytest.approx(16e9)


def test_stages_only_shrink_memory():
    totals = [model_state_bytes(7e9, dp=8, zero_stage=z).total for z in range(4)]
    assert totals == sorted(totals, reverse=True)


def test_optimizer_bytes_override():
    # K = 4 (say, one fp32 momentum buffer)
    assert model_state_bytes(1e9, optimizer_bytes=4).optimizer == 4e9


@pytest.mark.parametrize("kwargs", [
    dict(zero_stage=4), dict(precision="fp8"), dict(dp=0), dict(tp=1.5), dict(pp=-1),
    dict(optimizer_bytes=-1),
])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        model_state_bytes(1e9, **kwargs)
