"""Presets carry the datasheets' and papers' figures, in the units we use."""
import pytest

from threeaxes.cost import (
    MODELS,
    Cluster,
    a100_cluster,
    custom_model,
    get_cluster,
    get_model,
    h100_cluster,
    transformer_params,
)


def test_a100_datasheet_figures():
    c = a100_cluster(2)
    assert c.peak_flops == 312e12            # BF16 dense
    assert c.hbm_bytes == 80e9
    assert c.hbm_bandwidth == 2039e9
    assert 2 * c.intra_node_bandwidth == 600e9   # datasheet counts both directions
    assert c.inter_node_bandwidth * 8 == 200e9   # HDR 200 Gb/s per GPU, in bytes
    assert c.n_gpus == 16 and c.gpus_per_node == 8


def test_h100_datasheet_figures():
    c = h100_cluster()
    assert c.peak_flops == 989e12            # 1,979 TFLOPS with sparsity / 2
    assert 2 * c.intra_node_bandwidth == 900e9
    assert c.inter_node_bandwidth * 8 == 400e9   # NDR 400 Gb/s per GPU
    assert c.hbm_bandwidth == 3350e9


def test_get_cluster_by_gpus_or_nodes():
    assert get_cluster("a100-80gb", n_gpus=64).n_nodes == 8
    assert get_cluster("H100-80GB", n_nodes=3).n_gpus == 24
    assert get_cluster("a100-80gb", n_gpus=4).gpus_per_node == 4
    with pytest.raises(ValueError, match="multiple of 8"):
        get_cluster("a100-80gb", n_gpus=12)
    with pytest.raises(ValueError, match="choose one of"):
        get_cluster("tpu-v5")


def test_custom_cluster_is_validated():
    c = a100_cluster(1, inter_node_bandwidth=12.5e9)
    assert c.inter_node_bandwidth == 12.5e9
    with pytest.raises(ValueError):
        a100_cluster(0)
    with pytest.raises(ValueError):
        Cluster("x", "x", 1, 8, 80e9, 0, 1, 1, 1)


@pytest.mark.parametrize("key, layers, d, heads", [
    ("gpt3-175b", 96, 12288, 96),    # Brown et al. 2020, Table 2.1
    ("llama2-7b", 32, 4096, 32),     # Touvron et al. 2023a, Table 2
    ("llama2-13b", 40, 5120, 40),
    ("llama-30b", 60, 6656, 52),
    ("llama2-70b", 80, 8192, 64),
])
def test_model_shapes_from_their_papers(key, layers, d, heads):
    m = MODELS[key]
    assert (m.n_layers, m.d_model, m.n_heads) == (layers, d, heads)
    assert m.source


def test_sizes_and_aliases():
    assert round(get_model("7B").n_params / 1e9, 1) == 6.7
    assert round(get_model("13B").n_params / 1e9, 1) == 13.0
    assert round(get_model("30B").n_params / 1e9, 1) == 32.5
    assert round(get_model("70B").n_params / 1e9, 1) == 69.0
    assert round(get_model("175B").n_params / 1e9) == 175
    assert get_model("70B").kv_heads == 8       # grouped-query attention
    with pytest.raises(ValueError, match="custom_model"):
        get_model("1T")


def test_custom_model_uses_eq_2():
    m = custom_model("mine", 24, 2304, 24)
    assert m.n_params == transformer_params(24, 2304, 51200, 2048)
    with pytest.raises(ValueError, match="does not divide d_model"):
        custom_model("bad", 2, 100, 3)


def test_nics_per_node_defaults_to_one_per_gpu_as_on_a_dgx():
    # DGX A100 and DGX H100 datasheets: 8 InfiniBand NICs for 8 GPUs
    assert a100_cluster(2).nics == 8 and a100_cluster(2, gpus_per_node=4).nics == 4
    assert a100_cluster(2, nics_per_node=1).nics == 1
    with pytest.raises(ValueError, match="nics_per_node"):
        a100_cluster(2, nics_per_node=0)
