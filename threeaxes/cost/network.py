"""Time and bytes of collectives, with a latency and a bandwidth term."""
from __future__ import annotations

from typing import Any, NamedTuple

# presets' Cluster: presets imports this module (through experts), so its name cannot come here
_Cluster = Any

__all__ = ["CommTime", "Link", "COLLECTIVES", "bytes_sent_per_gpu", "all_reduce_time",
           "all_gather_time", "reduce_scatter_time", "p2p_time", "all_to_all_time",
           "collective_time",
           "group_strides", "group_inside_node", "members_per_node", "nics_per_group",
           "group_link", "all_to_all_link"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "p2p", "all_to_all")


class CommTime(NamedTuple):
    latency: float     # seconds spent in per-step latency
    bandwidth: float   # seconds spent moving bytes
    total: float


def _check(size_bytes: float, n: int, bandwidth: float, latency: float) -> None:
    if size_bytes < 0:
        raise ValueError(f"size_bytes={size_bytes} must be >= 0")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer (GPUs in the group)")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth={bandwidth} must be > 0 bytes/s")
    if latency < 0:
        raise ValueError(f"latency={latency} must be >= 0 seconds")


def bytes_sent_per_gpu(op: str, size_bytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring collective over n GPUs (Thakur et al.
    2005, Section 2): all-reduce 2(n-1)/n S, all-gather and reduce-scatter
    (n-1)/n S, point-to-point S; all-to-all (n-1)/n S, its n - 1 chunks of S/n sent
    pairwise (Thakur et al. 2005's pairwise exchange). A traced "send" or "recv"
    (threeaxes.comms) is one point-to-point message: the S bytes that cross the link."""
    op = "p2p" if op in ("send", "recv") else op
    if op not in COLLECTIVES:
        raise ValueError(f"op={op!r}; choose op in {set(COLLECTIVES)} (or a traced 'send'/'recv')")
    _check(size_bytes, n, 1.0, 0.0)
    if op == "p2p":
        return float(size_bytes)
    if n == 1:
        return 0.0
    factor = 2 if op == "all_reduce" else 1
    return factor * (n - 1) / n * size_bytes


def collective_time(op: str, size_bytes: float, n: int, bandwidth: float,
                    latency: float = 0.0) -> CommTime:
    """Alpha-beta time of a ring collective (Thakur et al. 2005, Section 2).

    Source: the ring algorithms' alpha-beta cost model, Thakur, Rabenseifner and
    Gropp 2005, "Optimization of Collective Communication Operations in MPICH"
    (IJHPCA 19(1)), Section 2 and Table 1; Patarasuk and Yuan 2009,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations"
    (JPDC 69(2)), Section 3, prove the ring all-reduce's 2(n-1)/n S per process
    optimal. NVIDIA's nccl-tests (doc/PERFORMANCE.md) uses the same factors to
    turn algorithm bandwidth into bus bandwidth.

    For a message of S bytes over n GPUs with per-step latency alpha (seconds)
    and per-GPU bandwidth B (bytes/s, one direction):

    ================  ==================  =====================
    operation         latency term        bandwidth term
    ================  ==================  =====================
    all-reduce        2 (n - 1) alpha     2 (n - 1)/n * S / B
    all-gather        (n - 1) alpha       (n - 1)/n * S / B
    reduce-scatter    (n - 1) alpha       (n - 1)/n * S / B
    point-to-point    alpha               S / B
    all-to-all        (n - 1) alpha       (n - 1)/n * S / B
    ================  ==================  =====================

    S is the full (unsharded) tensor for all-gather and reduce-scatter, and one
    rank's whole input for all-to-all: n chunks of S/n, n - 1 of which leave it, one
    to each other rank (Thakur et al. 2005's pairwise-exchange algorithm for
    MPI_Alltoall; context parallelism's Ulysses and expert parallelism use it).
    """
    _check(size_bytes, n, bandwidth, latency)
    if op == "p2p":
        steps = 1
    elif op in COLLECTIVES:
        steps = 0 if n == 1 else (2 if op == "all_reduce" else 1) * (n - 1)
    else:
        raise ValueError(f"op={op!r}; choose op in {set(COLLECTIVES)}")
    lat = steps * latency
    bw = bytes_sent_per_gpu(op, size_bytes, n) / bandwidth
    return CommTime(lat, bw, lat + bw)


def all_reduce_time(size_bytes: float, n: int, bandwidth: float, latency: float = 0.0) -> CommTime:
    """Ring all-reduce: 2(n-1) alpha + 2(n-1)/n S/B (Thakur et al. 2005;
    Patarasuk and Yuan 2009, Section 3)."""
    return collective_time("all_reduce", size_bytes, n, bandwidth, latency)


def all_gather_time(size_bytes: float, n: int, bandwidth: float, latency: float = 0.0) -> CommTime:
    """Ring all-gather of a tensor of S bytes in total: (n-1) alpha +
    (n-1)/n S/B (Thakur et al. 2005, Section 2)."""
    return collective_time("all_gather", size_bytes, n, bandwidth, latency)


def reduce_scatter_time(size_bytes: float, n: int, bandwidth: float, latency: float = 0.0) -> CommTime:
    """Ring reduce-scatter of a tensor of S bytes: (n-1) alpha + (n-1)/n S/B
    (Thakur et al. 2005, Section 2)."""
    return collective_time("reduce_scatter", size_bytes, n, bandwidth, latency)


def all_to_all_time(size_bytes: float, n: int, bandwidth: float, latency: float = 0.0) -> CommTime:
    """All-to-all of the S bytes one GPU holds, 1/n of it for each peer: (n-1)
    alpha + (n-1)/n S/B (Thakur et al. 2005's pairwise exchange for long messages).
    Expert parallelism's dispatch and combine (Lepikhin et al. 2021) and
    DeepSpeed-Ulysses' head-for-sequence swap (Jacobs et al. 2023) use it."""
    return collective_time("all_to_all", size_bytes, n, bandwidth, latency)


def p2p_time(size_bytes: float, bandwidth: float, latency: float = 0.0) -> CommTime:
    """One send between two GPUs: alpha + S/B (Hockney's model, as used by
    Thakur et al. 2005, Section 2)."""
    return collective_time("p2p", size_bytes, 2, bandwidth, latency)


def group_strides(dp: int, tp: int, pp: int) -> dict:
    """{axis: (stride, size)} of each axis's group when ranks are numbered
    tensor-parallel fastest, then data-parallel, then pipeline (Megatron-LM's
    ``initialize_model_parallel``, and ``threeaxes.dims``): tp stride 1, dp
    stride tp, pp stride tp * dp."""
    return {"tp": (1, tp), "dp": (tp, dp), "pp": (tp * dp, pp)}


def group_inside_node(stride: int, size: int, gpus_per_node: int) -> bool:
    """Whether every group of ``size`` ranks spaced ``stride`` apart stays in
    one node, when ranks fill nodes in order (rank // gpus_per_node).

    Megatron-LM's ``initialize_model_parallel`` numbers ranks tensor-parallel
    fastest, then data-parallel, then pipeline, so the TP group lands inside
    a node as Narayanan et al. 2021 (Section 3.2, Takeaway #1) recommend
    (`group_strides`).
    """
    span = stride * size
    return size == 1 or (span <= gpus_per_node and gpus_per_node % span == 0)


def members_per_node(stride: int, size: int, gpus_per_node: int) -> int:
    """How many of a group's ``size`` ranks, spaced ``stride`` apart, share
    one node when ranks fill nodes in order: k = min(size, gpus_per_node //
    stride), at least 1."""
    return max(1, min(size, gpus_per_node // stride))


def nics_per_group(stride: int, size: int, gpus_per_node: int, nics_per_node: int) -> float:
    """NICs one group's collective drives at once when it crosses nodes.

    NCCL runs several rings (channels) side by side and sends each through a
    different NIC, so a group with k members on a node crosses the node
    boundary over up to k NICs, capped by the node's count: min(k, NICs).
    NVIDIA/nccl issue #412 (maintainer, 2023-04-24): one HDR NIC per 8-GPU
    node gives about 24 GB/s of all-reduce bus bandwidth between nodes, and
    more NICs next to the GPUs add bandwidth up to the NVLink rate; issue #812
    (maintainer, 2023-03-31): 192 GB/s on DGX A100 nodes with 8 HDR NICs,
    close to 8 x 25 GB/s.

    Every GPU of the node belongs to one group of each axis, so a node holds
    gpus_per_node / k groups of this axis, all running their collectives at
    the same time; they share the node's NICs: k * NICs / gpus_per_node each.
    The two agree when the node holds one group, or one NIC per GPU.
    """
    k = members_per_node(stride, size, gpus_per_node)
    return min(k, nics_per_node, k * nics_per_node / gpus_per_node)


class Link(NamedTuple):
    bandwidth: float    # bytes/s per GPU, one direction (the ring's bus bandwidth)
    latency: float      # seconds per ring step
    inside_node: bool


def group_link(cluster: _Cluster, stride: int, size: int) -> Link:
    """The link a group's collective runs at: NVLink inside a node; across
    nodes, the NICs the group drives at once (``nics_per_group``) times one
    NIC's rate, never more than NVLink (the ring's slowest hop decides)."""
    inside = group_inside_node(stride, size, cluster.gpus_per_node)
    if inside:
        return Link(cluster.intra_node_bandwidth, cluster.intra_node_latency, True)
    nics = getattr(cluster, "nics", cluster.gpus_per_node)
    share = nics_per_group(stride, size, cluster.gpus_per_node, nics)
    bandwidth = min(cluster.intra_node_bandwidth, share * cluster.inter_node_bandwidth)
    return Link(bandwidth, cluster.inter_node_latency, False)


def all_to_all_link(cluster: _Cluster, stride: int, size: int) -> Link:
    """The link an all-to-all over a group runs at, as the one bandwidth B with which
    ``all_to_all_time``'s (n-1)/n S / B gives its time.

    Inside a node: NVLink, as ``group_link``. Across nodes an all-to-all is not a
    ring: each member sends 1/n of its S bytes to every peer, so with k members on
    its node (n - k)/n S must leave through the network and (k - 1)/n S goes over
    NVLink, both at once. Every GPU of the node is in one such group and exchanges
    at the same time (expert layers run in step), so each gets nics / gpus_per_node
    of the node's NICs, not the k NICs a ring's parallel channels take
    (``nics_per_group``). Time = max((n - k)/n S / (NIC share), (k - 1)/n S / NVLink),
    so B = (n - 1) / max((n - k)/NIC share, (k - 1)/NVLink). DeepSeek-V3's report
    (DeepSeek-AI 2024, Section 3.2.2) names the same bound for its expert all-to-all,
    InfiniBand's 50 GB/s per GPU against NVLink's 160 GB/s, and sends each token to at
    most 4 nodes to keep that traffic down."""
    if group_inside_node(stride, size, cluster.gpus_per_node):
        return group_link(cluster, stride, size)
    k = members_per_node(stride, size, cluster.gpus_per_node)
    nic_share = cluster.inter_node_bandwidth * cluster.nics / cluster.gpus_per_node
    slowest = max((size - k) / nic_share, (k - 1) / cluster.intra_node_bandwidth)
    return Link((size - 1) / slowest, cluster.inter_node_latency, False)
