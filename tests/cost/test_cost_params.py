"""transformer_params against Megatron-LM's Table 1, LLaMA's Table 2 and a
parameter count of real torch modules (an independent code path)."""
import pytest

from threeaxes.cost import ParamCount, transformer_params

# Narayanan et al. 2021 (Megatron-LM), Table 1: (billions of parameters,
# layers, hidden size); all with V = 51,200 and s = 2048 (Section 5.1).
MEGATRON_TABLE_1 = [
    (1.7, 24, 2304),
    (3.6, 30, 3072),
    (7.5, 36, 4096),
    (18.4, 40, 6144),
    (39.1, 48, 8192),
    (76.1, 60, 10240),
    (145.6, 80, 12288),
    (310.1, 96, 16384),
    (529.6, 105, 20480),
    (1008.0, 128, 25600),
]


@pytest.mark.parametrize("billions, layers, hidden", MEGATRON_TABLE_1)
def test_megatron_table_1_parameter_counts(billions, layers, hidden):
    # the table prints eq. 2 rounded to 0.1B
    n = transformer_params(layers, hidden, 51200, 2048)
    assert round(n / 1e9, 1) == billions


def test_eq_2_by_hand_on_a_small_shape():
    # l=2, h=8, V=10, s=4: 12*2*64 + 13*2*8 + (10+4)*8 = 1536 + 208 + 112
    assert transformer_params(2, 8, 10, 4) == 1856


def test_eq_2_closed_form_equals_the_expanded_one():
    # eq. 2 as printed: 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))
    l, h, V, s = 80, 12288, 51200, 2048
    printed = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert transformer_params(l, h, V, s) == pytest.approx(printed, rel=1e-12)


def test_param_count_is_an_int_with_named_terms():
    n = transformer_params(2, 8, 10, 4)
    assert isinstance(n, int) and isinstance(n, ParamCount)
    assert n.total == 1856
    assert n.per_layer == 12 * 64 + 13 * 8
    assert n.layers + n.embeddings + n.position + n.final_norm == n
    assert n.embeddings == 80 and n.position == 32 and n.final_norm == 0
    assert n + 1 == 1857


# LLaMA (Touvron et al. 2023a), Table 2: 6.7B, 13.0B, 32.5B with these shapes;
# FFN widths and the 32,000-token vocabulary from the released configurations.
LLAMA_TABLE_2 = [
    (6.7, 32, 4096, 32, 11008),
    (13.0, 40, 5120, 40, 13824),
    (32.5, 60, 6656, 52, 17920),
]
LLAMA_STYLE = dict(gated_mlp=True, biases=False, norm="rmsnorm", tied_embeddings=False,
                   final_norm=True)


@pytest.mark.parametrize("billions, layers, dim, heads, ffn", LLAMA_TABLE_2)
def test_llama_table_2_parameter_counts(billions, layers, dim, heads, ffn):
    n = transformer_params(layers, dim, 32000, ffn_hidden=ffn, n_heads=heads, **LLAMA_STYLE)
    assert round(n / 1e9, 1) == billions


def test_llama_7b_by_hand():
    # per layer: 4 h^2 attention + 3 h f SwiGLU + 2 h RMSNorm weights
    h, f, l, V = 4096, 11008, 32, 32000
    per_layer = 4 * h * h + 3 * h * f + 2 * h     # 67,108,864 + 135,266,304 + 8,192
    expected = l * per_layer + 2 * V * h + h       # untied in/out embeddings, final norm
    assert expected == 6_738_415_616
    assert transformer_params(l, h, V, ffn_hidden=f, **LLAMA_STYLE) == expected


def test_grouped_query_attention_by_hand():
    # Llama 2 70B (Touvron et al. 2023b, Section 2.2: GQA): 64 heads, 8 KV heads
    h, f, l, V = 8192, 28672, 80, 32000
    kv = h // 64 * 8
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    n = transformer_params(l, h, V, ffn_hidden=f, n_heads=64, n_kv_heads=8, **LLAMA_STYLE)
    assert n == l * per_layer + 2 * V * h + h
    assert round(n / 1e9, 1) == 69.0


def test_gpt3_rounds_to_175b():
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, "175.0B";
    # GPT-2's 50,257-token vocabulary and 2048 learned positions
    assert round(transformer_params(96, 12288, 50257, 2048) / 1e9) == 175


def test_matches_real_torch_modules():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    l, h, V, s = 3, 16, 50, 12

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    gpt = nn.ModuleList([nn.Embedding(V, h), nn.Embedding(s, h)]
                        + [Block() for _ in range(l)])
    assert transformer_params(l, h, V, s) == sum(p.numel() for p in gpt.parameters())

    class LlamaBlock(nn.Module):
        def __init__(self, heads=4, kv_heads=2, f=40):
            super().__init__()
            kv = h // heads * kv_heads
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
            self.q, self.k = nn.Linear(h, h, bias=False), nn.Linear(h, kv, bias=False)
            self.v, self.o = nn.Linear(h, kv, bias=False), nn.Linear(h, h, bias=False)
            self.gate, self.up = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
            self.down = nn.Linear(f, h, bias=False)

    llama = nn.ModuleList([nn.Embedding(V, h), nn.Linear(h, V, bias=False), nn.RMSNorm(h)]
                          + [LlamaBlock() for _ in range(l)])
    n = transformer_params(l, h, V, ffn_hidden=40, n_heads=4, n_kv_heads=2, **LLAMA_STYLE)
    assert n == sum(p.numel() for p in llama.parameters())


@pytest.mark.parametrize("kwargs", [
    dict(n_layers=0, d_model=8, vocab_size=10),
    dict(n_layers=2, d_model=-8, vocab_size=10),
    dict(n_layers=2, d_model=8, vocab_size=10, seq_len=-1),
    dict(n_layers=2, d_model=8, vocab_size=10, norm="batchnorm"),
    dict(n_layers=2, d_model=8, vocab_size=10, n_kv_heads=2),
    dict(n_layers=2, d_model=8, vocab_size=10, n_heads=4, n_kv_heads=3),
])
def test_bad_shapes_raise(kwargs):
    with pytest.raises(ValueError):
        transformer_params(**kwargs)
