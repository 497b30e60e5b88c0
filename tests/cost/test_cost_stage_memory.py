"""stage_memory: the same model states on every stage, activations falling
along the pipeline (Korthikanti et al. 2022, Section 4.2.3, Appendix B)."""
import pytest

from threeaxes.cost import activation_bytes, first_stage_activation_bytes, get_model, model_state_bytes, stage_memory

SEVENTY = get_model("70B")


def test_stages_by_hand():
    stages = stage_memory(SEVENTY, 4096, 1, dp=2, tp=8, pp=4, zero_stage=1,
                          recompute="selective", sequence_parallel=True)
    states = model_state_bytes(SEVENTY.n_params, dp=2, tp=8, pp=4, zero_stage=1)
    # Table 2 with t=8, SP and selective recompute: 34 s b h / t per layer
    per_layer = 34 * 4096 * 1 * 8192 / 8
    assert len(stages) == 4
    for r, st in enumerate(stages):
        assert (st.params, st.grads, st.optimizer) == pytest.approx(states[:3])
        if r:
            # 1F1B: stage r holds p - r micro-batches of 80/4 layers
            assert st.activations == pytest.approx(per_layer * 20 * (4 - r))
        assert st.total == pytest.approx(states.total + st.activations)
    first = first_stage_activation_bytes(4096, 1, 8192, 64, n_layers=80, tp=8, pp=4,
                                         sequence_parallel=True, recompute="selective",
                                         vocab_size=32000)
    assert stages[0].activations == pytest.approx(first.total)
    assert [s.total for s in stages] == sorted((s.total for s in stages), reverse=True)


def test_fp32_doubles_the_activation_bytes():
    mixed = stage_memory(SEVENTY, 2048, 1, tp=8, pp=8)
    fp32 = stage_memory(SEVENTY, 2048, 1, tp=8, pp=8, precision="fp32")
    for a, b in zip(mixed, fp32):
        assert b.activations == pytest.approx(2 * a.activations)


def test_gpipe_keeps_every_micro_batch_on_every_stage():
    stages = stage_memory(SEVENTY, 2048, 1, tp=8, pp=4, micro_batches=16, schedule="gpipe")
    per_layer = activation_bytes(2048, 1, 8192, 64, tp=8).per_layer
    assert stages[3].activations == pytest.approx(per_layer * 20 * 16)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=3), r"tp=3 does not divide n_heads=64; choose tp in \{1, 2, 4, 8\}"),
    (dict(pp=3), r"pp=3 does not divide n_layers=80"),
    (dict(pp=2, zero_stage=3), r"choose zero_stage in \{0, 1\} or pp=1"),
    (dict(precision="fp16"), r"choose precision"),
])
def test_bad_splits_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        stage_memory(SEVENTY, 2048, 1, **kwargs)
