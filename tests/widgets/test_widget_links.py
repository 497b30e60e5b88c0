"""The link explorer (drop 11), driven by moving its controls: the tensor-parallel
time it shows is checked against the ring all-reduce written out by hand."""
import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.cost import GB, get_model
from threeaxes.widgets.links import LinkExplorer

MODEL = get_model("175B")


def tp_seconds_by_hand(tp, pp, m, bandwidth, latency, mbs=1):
    """4 ring all-reduces of the (mbs, s, h) bf16 activation per layer per micro-batch
    (Shoeybi et al. 2019): each 2 (tp - 1) steps of latency plus 2 (tp - 1)/tp * S / B."""
    size = 2 * mbs * MODEL.seq_len * MODEL.d_model
    one = 2 * (tp - 1) * latency + 2 * (tp - 1) / tp * size / bandwidth
    return (MODEL.n_layers // pp) * m * 4 * one


def test_tp_across_4_gpu_nodes_runs_at_the_infiniband_rate():
    # drop 11's new cluster: one 25 GB/s NIC per node of 4 GPUs
    w = LinkExplorer(gpus_per_node=4, inter_node_gbps=25.0, nics_per_node=1, tp=8, pp=8)
    d = w.data
    assert (d.chosen.dp, d.chosen.micro_batches) == (4, 128)     # 256 / 64; 512 / 4 / 1
    assert not d.links["tp"].inside_node
    assert d.chosen.time.tp_comm == pytest.approx(tp_seconds_by_hand(8, 8, 128, 25 * GB, 10e-6))
    assert d.baseline.time.tp_comm == pytest.approx(tp_seconds_by_hand(8, 8, 128, 300 * GB, 5e-6))
    assert "tp across nodes" in w.message.value
    assert f"{d.per_gpu_ratio:.0%}" in w.message.value and d.per_gpu_ratio < 1
    labels = [t.get_text() for t in w.figure.axes[0].get_yticklabels()]
    assert labels == ["8-GPU nodes, preset links", "4-GPU nodes, 1 x 25 GB/s NICs"]


def test_with_one_nic_per_gpu_the_tp_ring_crosses_over_four_nics():
    # NCCL runs one ring per NIC: 4 members per node drive the node's 4 NICs, 4 x 25 GB/s
    w = LinkExplorer(gpus_per_node=4, inter_node_gbps=25.0, tp=8, pp=8)
    assert w.data.cluster.nics == 4
    assert w.data.chosen.time.tp_comm == pytest.approx(
        tp_seconds_by_hand(8, 8, 128, 100 * GB, 10e-6))


def test_moving_the_node_size_to_8_puts_tp_back_on_nvlink():
    w = LinkExplorer(gpus_per_node=4, tp=8, pp=8)
    w.controls["gpus_per_node"].value = 8            # what a dropdown move does
    assert w.data.links["tp"].inside_node
    assert w.data.chosen.time == w.data.baseline.time
    assert w.data.per_gpu_ratio == pytest.approx(1.0)


def test_doubling_the_infiniband_bandwidth_halves_the_bandwidth_term_of_tp():
    w = LinkExplorer(gpus_per_node=4, tp=8, pp=8, inter_node_gbps=25.0)
    latency = tp_seconds_by_hand(8, 8, 128, float("inf"), 10e-6)
    slow = w.data.chosen.time.tp_comm - latency
    w.controls["inter_node_gbps"].value = 50.0
    fast = w.data.chosen.time.tp_comm - latency
    assert fast == pytest.approx(slow / 2)


def test_tp_inside_a_4_gpu_node_costs_what_it_costs_on_8_gpu_nodes():
    w = LinkExplorer(gpus_per_node=4, tp=4, pp=8)
    d = w.data
    assert d.links["tp"].inside_node and not d.links["dp"].inside_node
    assert d.chosen.time.tp_comm == pytest.approx(d.baseline.time.tp_comm)
    assert d.chosen.time.tp_comm == pytest.approx(tp_seconds_by_hand(4, 8, 64, 300 * GB, 5e-6))


@pytest.mark.parametrize("values, message", [
    (dict(tp=4, pp=64), "pp=64 does not divide n_layers=96"),
    (dict(tp=16, pp=32), "does not divide the 256 GPUs"),
])
def test_invalid_layout_shows_what_to_change(values, message):
    w = LinkExplorer()
    w.set(**values)
    assert w.data is None and w.figure is None
    assert message in w.error and message in w.message.value.replace("&#x27;", "'")
