"""Named clusters and models, each figure with its source, plus custom ones."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .experts import MoE, active_params, expert_params
from .memory import GB
from .params import transformer_params

__all__ = ["Cluster", "Model", "CLUSTERS", "MODELS", "a100_cluster", "h100_cluster",
           "get_cluster", "get_model", "custom_model", "MOE_MODELS"]


ASSUMED_INTRA_NODE_LATENCY = 5e-6    # s per ring step inside a node (assumption: `Cluster`'s docstring)
ASSUMED_INTER_NODE_LATENCY = 10e-6   # s per ring step across nodes (assumption: `Cluster`'s docstring)


@dataclass(frozen=True)
class Cluster:
    """Identical nodes of ``gpus_per_node`` GPUs and ``nics_per_node`` network
    cards (None: one per GPU); NVLink bandwidth per GPU, InfiniBand per NIC,
    one direction.

    GPU and node figures (SXM parts, bf16 dense tensor-core peak, one direction
    of each link unless said otherwise):

    - NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): 312 TFLOPS BF16
      (624 with sparsity), 80 GB HBM2e, 2,039 GB/s, NVLink 600 GB/s (the
      datasheet's figure counts both directions: 12 links x 25 GB/s each way,
      so 300 GB/s each way).
    - NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): 989 TFLOPS BF16 dense
      (the datasheet's 1,979 is with sparsity), 80 GB HBM3, 3.35 TB/s, NVLink
      900 GB/s both directions (450 GB/s each way).
    - NVIDIA DGX A100 datasheet: 8 GPUs on NVSwitch, 8 single-port ConnectX-6
      HDR InfiniBand adapters, 200 Gb/s each, one per GPU (25 GB/s each way).
    - NVIDIA DGX H100 datasheet: 8 GPUs on NVSwitch, 8 ConnectX-7 NDR
      InfiniBand ports, 400 Gb/s each, one per GPU (50 GB/s each way).

    ``inter_node_bandwidth`` is one NIC's rate and ``nics_per_node`` how many a
    node has (default: one per GPU, as on both DGX systems). A group that
    crosses nodes uses several NICs at once when it has several members per
    node (``network.group_link``).

    Memory capacity is the datasheet's 80 GB = 80e9 bytes. The devices expose
    80 GiB (about 85.9e9 bytes); the difference is left as headroom for what the
    formulas do not count (CUDA context, NCCL buffers, allocator fragmentation).

    The latencies are not datasheet figures: they are assumed per-step costs of
    one ring step (kernel launch, synchronisation, wire), of the order NCCL shows
    for small messages. They only matter for small messages; change them freely.
    """
    name: str
    gpu: str
    n_nodes: int
    gpus_per_node: int
    hbm_bytes: float
    peak_flops: float                 # dense bf16 tensor-core FLOP/s per GPU
    hbm_bandwidth: float              # bytes/s
    intra_node_bandwidth: float       # bytes/s per GPU each way (NVLink/NVSwitch)
    inter_node_bandwidth: float       # bytes/s per NIC each way (InfiniBand)
    intra_node_latency: float = ASSUMED_INTRA_NODE_LATENCY
    inter_node_latency: float = ASSUMED_INTER_NODE_LATENCY
    sources: tuple = field(default=(), compare=False)
    nics_per_node: int | None = None  # None: one NIC per GPU (DGX A100 and H100)

    def __post_init__(self) -> None:
        for name in ("n_nodes", "gpus_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        for name in ("hbm_bytes", "peak_flops", "hbm_bandwidth",
                     "intra_node_bandwidth", "inter_node_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        for name in ("intra_node_latency", "inter_node_latency"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 0")
        nics = self.nics_per_node
        if nics is not None and (isinstance(nics, bool) or int(nics) != nics or nics < 1):
            raise ValueError(f"nics_per_node={nics!r} must be a positive integer (or None: "
                             "one per GPU)")

    @property
    def nics(self) -> int:
        """Network cards per node (one per GPU unless ``nics_per_node`` says)."""
        return self.gpus_per_node if self.nics_per_node is None else int(self.nics_per_node)

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    def with_nodes(self, n_nodes: int) -> Cluster:
        return replace(self, n_nodes=n_nodes)

    def __str__(self) -> str:
        nics = f"{self.nics} NIC{'s' if self.nics > 1 else ''} per node"
        return (f"{self.name}: {self.n_nodes} x {self.gpus_per_node} {self.gpu} "
                f"({self.n_gpus} GPUs, {nics})")


def a100_cluster(n_nodes: int = 1, **overrides: Any) -> Cluster:
    """DGX A100-style nodes: 8 A100 80GB SXM on NVSwitch, HDR InfiniBand."""
    base: dict[str, Any] = dict(
        name="A100 80GB", gpu="A100-SXM4-80GB", n_nodes=n_nodes, gpus_per_node=8,
        hbm_bytes=80 * GB,             # A100 datasheet: 80 GB HBM2e
        peak_flops=312e12,             # A100 datasheet: BF16 tensor core, dense
        hbm_bandwidth=2039 * GB,       # A100 datasheet: 2,039 GB/s (80GB SXM)
        intra_node_bandwidth=300 * GB,  # A100 datasheet: NVLink 600 GB/s both ways
        inter_node_bandwidth=25 * GB,  # DGX A100 datasheet: 200 Gb/s HDR per NIC
        nics_per_node=None,            # DGX A100 datasheet: 8 NICs, one per GPU
        sources=("NVIDIA A100 Tensor Core GPU datasheet", "NVIDIA DGX A100 datasheet"))
    base.update(overrides)
    return Cluster(**base)


def h100_cluster(n_nodes: int = 1, **overrides: Any) -> Cluster:
    """DGX H100-style nodes: 8 H100 80GB SXM on NVSwitch, NDR InfiniBand."""
    base: dict[str, Any] = dict(
        name="H100 80GB", gpu="H100-SXM5-80GB", n_nodes=n_nodes, gpus_per_node=8,
        hbm_bytes=80 * GB,             # H100 datasheet: 80 GB HBM3
        peak_flops=989e12,             # H100 datasheet: BF16 1,979 TFLOPS with sparsity / 2
        hbm_bandwidth=3350 * GB,       # H100 datasheet: 3.35 TB/s (SXM)
        intra_node_bandwidth=450 * GB,  # H100 datasheet: NVLink 900 GB/s both ways
        inter_node_bandwidth=50 * GB,  # DGX H100 datasheet: 400 Gb/s NDR per NIC
        nics_per_node=None,            # DGX H100 datasheet: 8 NDR ports, one per GPU
        sources=("NVIDIA H100 Tensor Core GPU datasheet", "NVIDIA DGX H100 datasheet"))
    base.update(overrides)
    return Cluster(**base)


CLUSTERS = {"a100-80gb": a100_cluster, "h100-80gb": h100_cluster}


def get_cluster(name: str, *, n_gpus: int | None = None, n_nodes: int | None = None,
                **overrides: Any) -> Cluster:
    """A preset cluster by name ("a100-80gb", "h100-80gb") sized by GPUs or nodes."""
    key = name.lower()
    if key not in CLUSTERS:
        raise ValueError(f"cluster {name!r} unknown; choose one of {sorted(CLUSTERS)} "
                         "or build a Cluster(...) yourself")
    per_node = overrides.get("gpus_per_node", 8)
    if n_gpus is not None:
        if n_nodes is not None:
            raise ValueError("give n_gpus or n_nodes, not both")
        if n_gpus < per_node:
            return CLUSTERS[key](1, **{**overrides, "gpus_per_node": n_gpus})
        if n_gpus % per_node:
            raise ValueError(f"n_gpus={n_gpus} is not a whole number of {per_node}-GPU "
                             f"nodes; choose a multiple of {per_node}")
        n_nodes = n_gpus // per_node
    return CLUSTERS[key](1 if n_nodes is None else n_nodes, **overrides)


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape and parameter count."""
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    seq_len: int                      # the context it was trained with
    n_params: int
    layer_params: int                 # parameters inside the transformer layers
    n_kv_heads: int | None = None     # grouped-query attention (None: = n_heads)
    ffn_hidden: int | None = None
    source: str = field(default="", compare=False)
    moe: MoE | None = None            # experts.MoE for a mixture-of-experts model (None: dense)
    gated_mlp: bool = False           # SwiGLU-style MLP (LLaMA): three h x f matrices
    # the first pipeline slot holds the embedding in place of a layer (Llama 3's
    # pipeline, Dubey et al. 2024, Section 3.3.2): no layer activations there
    embedding_slot: bool = False

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "vocab_size", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} does not divide d_model={self.d_model}")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} does not divide "
                             f"n_heads={self.n_heads}")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def expert_params(self) -> int:
        """Parameters in the routed experts (0 for a dense model): what ep splits."""
        return 0 if self.moe is None else expert_params(self.moe, self.d_model, self.n_layers)

    @property
    def active_params(self) -> int:
        """Parameters one token meets (all of them for a dense model)."""
        if self.moe is None:
            return self.n_params
        return active_params(self.n_params, self.moe, self.d_model, self.n_layers)

    def __str__(self) -> str:
        experts = "" if self.moe is None else (
            f" ({self.active_params / 1e9:.1f}B active, {self.moe.n_experts} experts, "
            f"top-{self.moe.top_k})")
        return (f"{self.name}: {self.n_params / 1e9:.1f}B params{experts}, {self.n_layers} layers, "
                f"d_model {self.d_model}, {self.n_heads} heads")


def custom_model(name: str, n_layers: int, d_model: int, n_heads: int, *,
                 vocab_size: int = 51200, seq_len: int = 2048,
                 learned_positions: bool = True, n_kv_heads: int | None = None,
                 moe: MoE | None = None, **param_options: Any) -> Model:
    """A model from its shape; parameters counted by ``transformer_params``
    (GPT-style by default: Megatron-LM eq. 2 with V = 51,200, Narayanan et al.
    2021's vocabulary). ``param_options`` go to ``transformer_params``.

    ``moe`` (``experts.MoE``): every layer's MLP is ``moe.n_experts`` experts of
    width ``moe.expert_hidden`` (gated as ``gated_mlp`` says) and a router of h x E
    (Jiang et al. 2024, Section 2.1); ``moe_layers`` below n_layers is not
    counted here (give a dense model's ``ffn_hidden`` layers another way)."""
    if moe is not None:
        if moe.moe_layers not in (None, n_layers) or moe.shared_experts:
            raise ValueError("custom_model counts a MoE in every layer without shared "
                             "experts; use moe_layers=None and shared_experts=0")
        if param_options.get("gated_mlp", False) != moe.gated:
            raise ValueError(f"moe.gated={moe.gated} but gated_mlp="
                             f"{param_options.get('gated_mlp', False)}; make them agree")
        param_options = {**param_options, "ffn_hidden": moe.expert_hidden}
    count = transformer_params(n_layers, d_model, vocab_size,
                               seq_len if learned_positions else 0,
                               n_heads=n_heads, n_kv_heads=n_kv_heads, **param_options)
    total, layers = int(count), count.layers
    if moe is not None:
        # one expert is counted as the layer's MLP: add the other E - 1 and the router
        more = n_layers * ((moe.n_experts - 1) * moe.per_expert(d_model)
                           + d_model * moe.n_experts)
        total, layers = total + more, layers + more
    return Model(name, n_layers, d_model, n_heads, vocab_size, seq_len, total,
                 layers, n_kv_heads, param_options.get("ffn_hidden"),
                 source="custom", moe=moe, gated_mlp=bool(param_options.get("gated_mlp")))


def _llama(name: str, n_layers: int, d_model: int, n_heads: int, ffn_hidden: int, seq_len: int, source: str,
           n_kv_heads: int | None = None) -> Model:
    # LLaMA: SwiGLU MLP, RMSNorm, no biases, untied output layer, rotary positions
    model = custom_model(name, n_layers, d_model, n_heads, vocab_size=32000,
                         seq_len=seq_len, learned_positions=False, n_kv_heads=n_kv_heads,
                         ffn_hidden=ffn_hidden, gated_mlp=True, biases=False,
                         norm="rmsnorm", tied_embeddings=False, final_norm=True)
    return replace(model, source=source)

MODELS = {
    # Touvron et al. 2023a (LLaMA) Table 2: dim 4096, 32 heads, 32 layers;
    # Touvron et al. 2023b (Llama 2) Table 1: 7B, context 4k; FFN 11008 from the
    # released config. Counts 6,738,415,616 parameters, the checkpoint's size.
    "llama2-7b": _llama("Llama-2 7B", 32, 4096, 32, 11008, 4096,
                        "Touvron et al. 2023a Table 2; 2023b Table 1"),
    # LLaMA Table 2: dim 5120, 40 heads, 40 layers; Llama 2 Table 1: 13B, 4k.
    "llama2-13b": _llama("Llama-2 13B", 40, 5120, 40, 13824, 4096,
                         "Touvron et al. 2023a Table 2; 2023b Table 1"),
    # LLaMA Table 2, the "33B" (32.5B) model: dim 6656, 52 heads, 60 layers, 2k.
    "llama-30b": _llama("LLaMA 33B (\"30B\")", 60, 6656, 52, 17920, 2048,
                        "Touvron et al. 2023a Table 2"),
    # LLaMA Table 2: dim 8192, 64 heads, 80 layers; Llama 2 Table 1 and Section
    # 2.2: 70B uses grouped-query attention (8 key/value heads), context 4k.
    # Parameters count the smaller K/V projections exactly; activation memory
    # uses Korthikanti's GPT-style formula (multi-head K/V, 4h GeLU MLP, dropout); drop 14
    # sizes the error with activations.llama_layer_bytes.
    "llama2-70b": _llama("Llama-2 70B", 80, 8192, 64, 28672, 4096,
                         "Touvron et al. 2023a Table 2; 2023b Table 1, Section 2.2",
                         n_kv_heads=8),
    # Brown et al. 2020 Table 2.1: 96 layers, d_model 12288, 96 heads, context
    # 2048; the GPT-2 BPE vocabulary of 50,257 tokens; learned positions.
    "gpt3-175b": replace(custom_model("GPT-3 175B", 96, 12288, 96, vocab_size=50257,
                                      seq_len=2048),
                         source="Brown et al. 2020 Table 2.1"),
}
# Mixtures of experts, kept apart from MODELS (dense models: the three-axis drops draw from
# it) for the calculators' expert-parallel controls. Jiang et al. 2024 ("Mixtral of
# Experts"), Table 1: dim 4096, 32 layers, 32 heads of 128, 8 key/value heads, hidden 14336,
# vocabulary 32000, context 32768, 8 experts, top 2; SwiGLU experts, RMSNorm, rotary
# positions, untied output as in Mistral 7B. Counts 46.7B parameters, 12.9B active per
# token (Section 2.1 rounds them to 47B and 13B).
MOE_MODELS = {
    "mixtral-8x7b": replace(custom_model("Mixtral 8x7B", 32, 4096, 32, vocab_size=32000,
                                         seq_len=32768, learned_positions=False, n_kv_heads=8,
                                         gated_mlp=True, biases=False, norm="rmsnorm",
                                         tied_embeddings=False, final_norm=True,
                                         moe=MoE(n_experts=8, top_k=2, expert_hidden=14336)),
                            source="Jiang et al. 2024, Table 1 and Section 2.1"),
}
_ALIASES = {"7b": "llama2-7b", "13b": "llama2-13b", "30b": "llama-30b",
            "33b": "llama-30b", "70b": "llama2-70b", "175b": "gpt3-175b"}


def get_model(name: str) -> Model:
    """A preset model by key ("llama2-70b") or size ("70B")."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in MODELS:
        raise ValueError(f"model {name!r} unknown; choose one of "
                         f"{sorted(MODELS) + ['7B', '13B', '30B', '70B', '175B']} "
                         "or build one with custom_model(...)")
    return MODELS[key]
