"""Collective costs: hand-derived alpha-beta times (Thakur et al. 2005)."""
import pytest

from threeaxes.cost import (
    a100_cluster,
    all_gather_time,
    all_reduce_time,
    bytes_sent_per_gpu,
    collective_time,
    group_inside_node,
    group_link,
    p2p_time,
    reduce_scatter_time,
)

GB = 1e9


def test_ring_all_reduce_by_hand():
    # 8 GPUs, 1 GB, 100 GB/s, 10 us: 2*7/8 GB / 100 GB/s = 17.5 ms, 14 steps of 10 us
    t = all_reduce_time(1 * GB, 8, 100 * GB, 10e-6)
    assert t.bandwidth == pytest.approx(0.0175)
    assert t.latency == pytest.approx(14 * 10e-6)
    assert t.total == pytest.approx(0.0175 + 140e-6)


def test_all_gather_and_reduce_scatter_by_hand():
    for fn in (all_gather_time, reduce_scatter_time):
        t = fn(4 * GB, 4, 50 * GB, 1e-6)
        assert t.bandwidth == pytest.approx(3 / 4 * 4 / 50)
        assert t.latency == pytest.approx(3e-6)


def test_all_reduce_is_reduce_scatter_plus_all_gather():
    # the identity sequence parallelism relies on (Korthikanti et al. 2022, 4.2.2)
    for n in (2, 3, 8, 64):
        ar = all_reduce_time(3 * GB, n, 25 * GB, 5e-6).total
        rs = reduce_scatter_time(3 * GB, n, 25 * GB, 5e-6).total
        ag = all_gather_time(3 * GB, n, 25 * GB, 5e-6).total
        assert ar == pytest.approx(rs + ag)


def test_p2p_by_hand():
    t = p2p_time(2 * GB, 25 * GB, 10e-6)
    assert t.total == pytest.approx(2 / 25 + 10e-6)


def test_bytes_each_gpu_sends():
    # all-reduce 2(n-1)/n S: the factor nccl-tests uses for bus bandwidth
    assert bytes_sent_per_gpu("all_reduce", 800, 8) == pytest.approx(1400)
    assert bytes_sent_per_gpu("all_gather", 800, 8) == pytest.approx(700)
    assert bytes_sent_per_gpu("reduce_scatter", 800, 8) == pytest.approx(700)
    assert bytes_sent_per_gpu("p2p", 800, 2) == 800
    # a traced send or recv (threeaxes.comms) is one point-to-point message
    assert bytes_sent_per_gpu("send", 800, 2) == bytes_sent_per_gpu("recv", 800, 2) == 800
    # approaches 2S for large n: the ring's bandwidth optimality (Patarasuk & Yuan 2009)
    assert bytes_sent_per_gpu("all_reduce", 1.0, 1024) == pytest.approx(2, rel=1e-3)


def test_one_gpu_moves_nothing():
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert collective_time(op, GB, 1, 100 * GB, 1e-5).total == 0


@pytest.mark.parametrize("stride, size, per_node, inside", [
    (1, 8, 8, True),     # tp=8 in a DGX
    (1, 16, 8, False),   # tp=16 spans two nodes
    (8, 4, 8, False),    # dp group of 4 with tp=8: one GPU per node
    (2, 4, 8, True),     # dp=4 with tp=2: 8 ranks in one node
    (4, 4, 8, False),    # dp=4 with tp=4: 16 ranks
    (1, 1, 8, True),
    (3, 2, 8, False),    # groups would straddle a node boundary
])
def test_group_placement(stride, size, per_node, inside):
    assert group_inside_node(stride, size, per_node) is inside


def test_group_link_picks_nvlink_or_infiniband():
    c = a100_cluster(4)
    assert group_link(c, 1, 8).bandwidth == c.intra_node_bandwidth
    assert group_link(c, 8, 4).bandwidth == c.inter_node_bandwidth
    assert not group_link(c, 8, 4).inside_node


@pytest.mark.parametrize("args", [(-1, 8, GB), (GB, 0, GB), (GB, 8, 0)])
def test_bad_arguments_raise(args):
    with pytest.raises(ValueError):
        all_reduce_time(*args)
    with pytest.raises(ValueError, match="choose op"):
        collective_time("broadcast", GB, 8, GB)


# -- several NICs per node: NCCL's parallel rings -----------------------------------------

from threeaxes.cost import members_per_node, nics_per_group  # noqa: E402


def test_members_per_node_by_hand():
    assert members_per_node(1, 16, 8) == 8      # a 16-wide tp group: 8 on each node
    assert members_per_node(8, 4, 8) == 1       # dp across 4 nodes, one rank on each
    assert members_per_node(4, 4, 8) == 2       # ranks 0, 4 | 8, 12
    assert members_per_node(1, 8, 4) == 4       # drop 11: tp = 8 on nodes of 4


@pytest.mark.parametrize("stride, size, g, nics, want", [
    (1, 8, 4, 4, 4),      # the node holds one group: min(k, NICs) = 4
    (1, 8, 4, 1, 1),      # one NIC for the node: 1
    (1, 64, 8, 8, 8),     # a world-wide ring on DGX nodes: all 8 NICs
    (8, 8, 8, 8, 1),      # dp across nodes, one member per node: its GPU's own NIC
    (8, 8, 8, 4, 0.5),    # 8 such groups share 4 NICs: half a NIC each
    (2, 8, 8, 8, 4),      # 2 groups of 4 members share 8 NICs: 4 each
])
def test_nics_per_group_by_hand(stride, size, g, nics, want):
    assert nics_per_group(stride, size, g, nics) == pytest.approx(want)


def test_cross_node_link_is_the_nics_the_group_drives():
    dgx = a100_cluster(4)                                # 8 GPUs, 8 HDR NICs per node
    assert group_link(dgx, 1, 32).bandwidth == pytest.approx(8 * 25e9)
    assert group_link(dgx, 8, 4).bandwidth == pytest.approx(25e9)
    assert group_link(dgx, 1, 8).bandwidth == dgx.intra_node_bandwidth   # inside a node
    # never faster than NVLink: the ring's slowest hop decides
    fat = a100_cluster(4, inter_node_bandwidth=100e9)
    assert group_link(fat, 1, 32).bandwidth == fat.intra_node_bandwidth


def test_one_nic_per_node_matches_nccl_issue_412():
    # NVIDIA/nccl issue #412, maintainer's answer (2023-04-24): 8 NVLink GPUs and one HDR
    # 200G NIC per node, all_reduce_perf at 8 GB: "~24GB/s inter-node" bus bandwidth, and
    # more NICs next to the GPUs add bandwidth up to the NVLink rate.
    one_nic = a100_cluster(12, nics_per_node=1)
    busbw = group_link(one_nic, 1, one_nic.n_gpus).bandwidth
    assert busbw == pytest.approx(24e9, rel=0.05)
    more = [group_link(a100_cluster(12, nics_per_node=n), 1, 96).bandwidth for n in (1, 2, 4, 8)]
    assert more == sorted(more) and more[-1] <= one_nic.intra_node_bandwidth


def test_four_nics_per_node_matches_nccl_tests_issue_100():
    # NVIDIA/nccl-tests issue #100 (2022-01-17): two HGX A100 nodes with four ConnectX-6
    # 200 Gb/s NICs each, all_reduce_perf on 16 GPUs at 1-8 GB reaches 91 GB/s of bus
    # bandwidth: four NICs' worth (4 x 25 GB/s line rate), at 91% of it.
    two_nodes = a100_cluster(2, nics_per_node=4)
    busbw = group_link(two_nodes, 1, 16).bandwidth
    assert busbw == pytest.approx(4 * 25e9)
    assert 91e9 / busbw == pytest.approx(0.91, abs=0.01)
    assert busbw == pytest.approx(91e9, rel=0.10)


def test_three_nodes_of_four_nics_match_nccl_tests_issue_119():
    # NVIDIA/nccl-tests issue #119 (2022-11-17): three servers of 8 A100 SXM4 and four HDR
    # cards each, all_reduce_perf on 24 GPUs up to 128 MB: about 96 GB/s of bus bandwidth
    # at its peak against the 4 x 200 Gb/s = 100 GB/s the reporter expected. The 24-wide
    # ring has 8 members per node, so it drives min(8, 4) = 4 cards: 4 x 25 GB/s.
    three = a100_cluster(3, nics_per_node=4)
    busbw = group_link(three, 1, 24).bandwidth
    assert busbw == pytest.approx(4 * 25e9)
    assert busbw == pytest.approx(96e9, rel=0.05)     # stated tolerance: 5% of the peak


def test_dgx_a100_with_eight_hdr_nics_matches_nccl_issue_812():
    # NVIDIA/nccl issue #812, NVIDIA maintainer's comment (2023-03-31): "On an Nvidia
    # DGX-A100 system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW".
    # The preset DGX node has 8 NICs of 25 GB/s; a ring over all GPUs has 8 members per
    # node, so it drives min(8, 8) = 8 NICs: 8 x 25 = 200 GB/s, under NVLink's 300.
    dgx = a100_cluster(4)
    busbw = group_link(dgx, 1, dgx.n_gpus).bandwidth
    assert busbw == pytest.approx(min(8 * 25e9, 300e9))
    assert busbw == pytest.approx(192e9, rel=0.05)    # stated tolerance: 5% of the measurement


# -- an all-to-all across nodes: every GPU's own share of the NICs --------------------------

from threeaxes.cost import all_to_all_link, h100_cluster  # noqa: E402


def test_all_to_all_inside_a_node_runs_at_nvlink():
    h100 = h100_cluster(4)
    assert all_to_all_link(h100, 1, 8) == group_link(h100, 1, 8)


def test_all_to_all_across_nodes_is_bounded_by_each_gpus_nic_by_hand():
    # ep = 32 on 4 DGX H100 nodes (stride 1: 8 members a node): of each GPU's S bytes
    # 24/32 go to other nodes through its 50 GB/s NIC, 7/32 over 450 GB/s NVLink, at once:
    # 0.75 S / 50e9 = 15 ms a GB, so B = (31/32) S / 15 ms = 64.6 GB/s
    h100 = h100_cluster(4)
    link = all_to_all_link(h100, 1, 32)
    assert link.bandwidth == pytest.approx(31 / 32 / (24 / 32 / 50e9))
    assert not link.inside_node and link.latency == h100.inter_node_latency
    # a ring over the same ranks drives all 8 NICs (NCCL's parallel channels): 6 times faster
    assert group_link(h100, 1, 32).bandwidth == pytest.approx(400e9)
    # one member a node (stride 8): everything leaves the node over that GPU's NIC
    assert all_to_all_link(h100, 8, 4).bandwidth == pytest.approx(50e9)
    # four NICs for eight GPUs: each GPU has half a NIC
    half = h100_cluster(4, nics_per_node=4)
    assert all_to_all_link(half, 8, 4).bandwidth == pytest.approx(25e9)
