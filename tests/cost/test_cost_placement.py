"""threeaxes.cost.placement: the parameters one rank holds, against the tensors the
toy's tensor-parallel pipeline stages really hold, and against Megatron-LM's eq. 2."""
import pytest

from threeaxes.cost import rank_params, rank_state_bytes, transformer_params
from threeaxes.pipeline.stages import build_stage
from threeaxes.tensor_parallel.shard import shard_model_state
from threeaxes.toy import ToyConfig

TOY = ToyConfig()


def _toy_rank_params(cfg, tp, pp, stage):
    return rank_params(cfg.n_layers, cfg.d_model, cfg.vocab_size, cfg.seq_len, tp=tp, pp=pp,
                       stage=stage, ffn_hidden=cfg.d_mlp, tied_embeddings=False, final_norm=True)


@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (4, 1), (1, 2), (1, 4), (2, 2), (4, 2), (2, 4)])
def test_every_toy_rank_holds_exactly_what_the_placement_says(tp, pp):
    for stage in range(pp):
        full = build_stage(TOY, stage, pp).state_dict()
        for tp_rank in range(tp):
            held = shard_model_state(full, tp_rank, tp, n_heads=TOY.n_heads)
            assert sum(t.numel() for t in held.values()) == _toy_rank_params(TOY, tp, pp, stage).total
            # the replicated part: whatever tensor the tp shards leave whole
            whole = sum(t.numel() for name, t in held.items() if t.shape == full[name].shape)
            assert whole == _toy_rank_params(TOY, tp, pp, stage).replicated or tp == 1


def test_one_rank_holds_the_whole_model_as_eq2_counts_it():
    """tp = pp = 1: the terms add up to transformer_params (Megatron-LM eq. 2 and its options)."""
    for kwargs in [{}, {"tied_embeddings": False, "final_norm": True},
                   {"biases": False, "norm": "rmsnorm", "gated_mlp": True, "ffn_hidden": 11008,
                    "tied_embeddings": False, "final_norm": True}]:
        want = transformer_params(32, 4096, 32000, 2048, **kwargs)
        assert rank_params(32, 4096, 32000, 2048, **kwargs).total == want


def test_the_stages_of_a_pipeline_add_up_to_the_model_plus_the_tied_copy():
    l, h, v, s = 24, 1024, 51200, 2048
    model = transformer_params(l, h, v, s)            # tied: one table
    stages = [rank_params(l, h, v, s, pp=4, stage=r) for r in range(4)]
    assert sum(r.total for r in stages) == model + v * h   # the last stage's copy of the table
    assert [r.embeddings > 0 for r in stages] == [True, False, False, False]
    assert [r.head > 0 for r in stages] == [False, False, False, True]


def test_for_a_large_model_the_even_split_is_close():
    """A GPT-3-shaped 175B model (96 layers, h = 12288, V = 51,200) over tp=8, pp=16: the
    middle stages hold within 1% of Psi / (tp pp); the end stages hold the table too."""
    l, h, v, s = 96, 12288, 51200, 2048
    even = transformer_params(l, h, v, s) / (8 * 16)
    mid = rank_params(l, h, v, s, tp=8, pp=16, stage=5, vocab_parallel=True)
    assert abs(mid.total / even - 1) < 0.01
    first = rank_params(l, h, v, s, tp=8, pp=16, stage=0, vocab_parallel=True)
    assert first.total - mid.total == v * h // 8 + s * h


def test_state_bytes_apply_zero_to_what_the_rank_holds():
    held = _toy_rank_params(TOY, 2, 2, 0).total
    assert rank_state_bytes(held, dp=4, zero_stage=1, precision="fp32") == (4 * held, 4 * held, 8 * held / 4,
                                                                            4 * held + 4 * held + 2 * held)


def test_bad_layouts_say_what_to_change():
    with pytest.raises(ValueError, match="stage=2 is outside 0..1"):
        rank_params(4, 32, 32, 16, pp=2, stage=2)
    with pytest.raises(ValueError, match="pp=3 does not divide n_layers=4"):
        rank_params(4, 32, 32, 16, pp=3)
    with pytest.raises(ValueError, match="tp=3 does not divide"):
        rank_params(4, 32, 32, 16, tp=3)
