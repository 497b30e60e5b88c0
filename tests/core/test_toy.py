"""The toy model: sizes, counting formula, determinism, data, learnability."""
import pytest
import torch

from threeaxes.toy import (
    ToyConfig,
    ToyTransformer,
    count_parameters,
    lm_loss,
    make_batch,
    make_optimizer,
    parameter_formula,
    train_steps,
)


def test_parameter_count_equals_the_course_formula_for_every_component():
    cfg = ToyConfig()
    counted = count_parameters(ToyTransformer(cfg))
    h, V, s, L = cfg.d_model, cfg.vocab_size, cfg.seq_len, cfg.n_layers
    # Hand derivation: per block 12h^2 + 13h (Narayanan et al. 2021, eq. 2), plus
    # token and position embeddings (V + s)h, final LayerNorm 2h, untied head Vh.
    assert counted["blocks"] == L * (12 * h * h + 13 * h)
    assert counted["tok_embed"] + counted["pos_embed"] == (V + s) * h
    assert counted["ln_f"] == 2 * h and counted["head"] == V * h
    assert counted == parameter_formula(cfg)


@pytest.mark.parametrize("d_model,n_heads,vocab", [(64, 8, 50), (48, 4, 17)])
def test_formula_holds_for_other_sizes(d_model, n_heads, vocab):
    cfg = ToyConfig(d_model=d_model, n_heads=n_heads, vocab_size=vocab)
    assert count_parameters(ToyTransformer(cfg)) == parameter_formula(cfg)


def test_default_sizes_give_every_axis_something_to_split():
    cfg = ToyConfig()
    assert cfg.n_layers == 4 and cfg.n_heads >= 4 and cfg.mlp_ratio == 4


def test_same_seed_same_weights_different_seed_different_weights():
    a, b, c = ToyTransformer(seed=3), ToyTransformer(seed=3), ToyTransformer(seed=4)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.head.weight, c.head.weight)


def test_init_does_not_depend_on_global_rng():
    torch.manual_seed(0)
    a = ToyTransformer(seed=1)
    torch.manual_seed(123)
    b = ToyTransformer(seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_float64_mode_makes_every_parameter_and_output_float64():
    cfg = ToyConfig(dtype=torch.float64)
    model = ToyTransformer(cfg)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    inputs, _ = make_batch(cfg, 2)
    assert model(inputs).dtype == torch.float64


def test_forward_shapes_and_causality():
    cfg = ToyConfig()
    model = ToyTransformer(cfg)
    inputs, _ = make_batch(cfg, 3, seed=5)
    logits = model(inputs)
    assert logits.shape == (3, cfg.seq_len, cfg.vocab_size)
    # Changing the last token must not change the logits at earlier positions.
    changed = inputs.clone()
    changed[:, -1] = (changed[:, -1] + 1) % cfg.vocab_size
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])


def test_batches_are_deterministic_and_targets_are_shifted_inputs():
    cfg = ToyConfig()
    x1, y1 = make_batch(cfg, 4, seed=9)
    x2, y2 = make_batch(cfg, 4, seed=9)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    assert not torch.equal(x1, make_batch(cfg, 4, seed=10)[0])
    assert x1.min() >= 0 and x1.max() < cfg.vocab_size


def test_loss_falls_visibly_within_a_few_dozen_steps():
    cfg = ToyConfig()
    model = ToyTransformer(cfg, seed=0)
    batches = [make_batch(cfg, 16, seed=i) for i in range(40)]
    losses = train_steps(model, batches, lr=3e-3, optimizer="adam")
    assert losses[0] > 3.0                       # about ln(32) = 3.47 at the start
    assert sum(losses[-5:]) / 5 < 0.7 * losses[0]


@pytest.mark.parametrize("kwargs,hint", [
    (dict(n_heads=3), "choose n_heads in"),
    (dict(d_model=0), "positive integer"),
    (dict(dtype=torch.int64), "float64"),
])
def test_bad_config_says_what_to_change(kwargs, hint):
    with pytest.raises(ValueError, match=hint):
        ToyConfig(**kwargs)


def test_bad_batch_size_and_optimizer_say_what_to_change():
    with pytest.raises(ValueError, match="positive integer"):
        make_batch(ToyConfig(), 0)
    with pytest.raises(ValueError, match="choose 'sgd' or 'adam'"):
        make_optimizer(ToyTransformer(), kind="lion")


def test_lm_loss_matches_mean_cross_entropy_by_hand():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0]]])
    targets = torch.tensor([[0, 0]])
    p0 = torch.exp(torch.tensor(2.0)) / (torch.exp(torch.tensor(2.0)) + 1)
    p1 = 1 / (1 + torch.exp(torch.tensor(1.0)))
    expected = -(torch.log(p0) + torch.log(p1)) / 2
    torch.testing.assert_close(lm_loss(logits, targets), expected)
