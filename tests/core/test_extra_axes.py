"""cp and ep as one-axis layouts (threeaxes.extra_axes) and comms.all_to_all: what
torch.distributed gives, traced with the bytes convention of comms' docstring, whose
per-rank wire bytes are network.bytes_sent_per_gpu's (n - 1)/n S, derived by hand below."""
import sys

import cloudpickle
import pytest
import torch

from threeaxes import comms
from threeaxes.cost import network
from threeaxes.dims import ParallelDims
from threeaxes.extra_axes import AxisLayout
from threeaxes.launch import launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

F64 = 8


def _on_cp_and_ep(rank, world_size):
    from threeaxes import trace
    from threeaxes.extra_axes import axis_layout

    out = {}
    cp = axis_layout("cp")
    # rank r holds [100r + 0, 100r + 1, ..., 100r + 7]: chunk j = two numbers for rank j
    x = (torch.arange(8, dtype=torch.float64) + 100 * rank).view(8, 1).repeat(1, 3)
    with trace.record() as t:
        out["a2a"] = comms.all_to_all(x, "cp", dims=cp)
        out["a2a_dim1"] = comms.all_to_all(x.t().contiguous(), "cp", dims=cp, dim=1)
        prev, nxt = cp.ring_neighbours()
        # communication: pass my rank around the ring, even ranks send first (no deadlock)
        msg, got = torch.tensor([float(rank)]), torch.empty(1)
        if cp.coord("cp") % 2 == 0:
            comms.send(msg, dst=nxt, axis="cp", dims=cp)
            comms.recv(got, src=prev, axis="cp", dims=cp)
        else:
            comms.recv(got, src=prev, axis="cp", dims=cp)
            comms.send(msg, dst=nxt, axis="cp", dims=cp)
        out["from_prev"] = got.item()
    out["trace"] = t
    ep = axis_layout("ep")
    with trace.record() as t:
        out["summed"] = comms.all_reduce(torch.ones(2, dtype=torch.float64), "ep", dims=ep).tolist()
    out["ep_trace"] = t
    out["errors"] = {}
    for name, call in {"no_layout": lambda: comms.all_to_all(x, "ep"),
                       "wrong_axis": lambda: comms.all_to_all(x, "ep", dims=cp),
                       "three_axes": lambda: comms.all_reduce(x, "dp", dims=cp),
                       "uneven": lambda: comms.all_to_all(x[:6], "cp", dims=cp)}.items():
        try:
            call()
        except ValueError as exc:
            out["errors"][name] = str(exc)
    return out


@pytest.fixture(scope="module")
def ranks():
    return launch(_on_cp_and_ep, 4)


def test_all_to_all_sends_chunk_j_to_rank_j(ranks):
    for me, r in enumerate(ranks):
        # by hand: rank `me` receives, from each rank j in order, j's chunk number `me`
        expected = torch.tensor([100.0 * j + 2 * me + k for j in range(4) for k in range(2)],
                                dtype=torch.float64).view(8, 1).repeat(1, 3)
        assert torch.equal(r["a2a"], expected)
        assert torch.equal(r["a2a_dim1"], expected.t())


def test_all_to_all_matches_torch_all_to_all_list_api(ranks):
    # an independent path: the list form, chunks received from each rank concatenated
    per_rank_inputs = [(torch.arange(8, dtype=torch.float64) + 100 * j).view(8, 1).repeat(1, 3)
                       for j in range(4)]
    for me, r in enumerate(ranks):
        expected = torch.cat([x.chunk(4)[me] for x in per_rank_inputs])
        assert torch.equal(r["a2a"], expected)


def test_cp_ring_send_recv_reaches_the_previous_rank(ranks):
    assert [r["from_prev"] for r in ranks] == [3.0, 0.0, 1.0, 2.0]
    assert all(r["summed"] == [4.0, 4.0] for r in ranks)


def test_events_name_the_axis_and_bytes_follow_the_convention(ranks):
    for me, r in enumerate(ranks):
        events = r["trace"].events
        assert [e.op for e in events][:2] == ["all_to_all", "all_to_all"]
        assert all(e.axis == "cp" and e.group == (0, 1, 2, 3) for e in events)
        a2a = events[0]
        assert a2a.bytes == 8 * 3 * F64            # the whole input, 24 float64
        # by hand: 3 of the 4 chunks (6 numbers each) leave the rank: 18 float64
        assert network.bytes_sent_per_gpu("all_to_all", a2a.bytes, 4) == 18 * F64
        sends = [e for e in events if e.op == "send"]
        assert len(sends) == 1 and sends[0].peer == (me + 1) % 4 and sends[0].bytes == 4
        assert [e.axis for e in r["ep_trace"].events] == ["ep"]


def test_errors_say_what_to_pass(ranks):
    errors = ranks[0]["errors"]
    assert errors["no_layout"] == ("axis='ep' runs on its one-axis layout; pass "
                                   "dims=threeaxes.extra_axes.axis_layout('ep') (made on every rank)")
    assert errors["wrong_axis"] == "axis='ep' is not this layout's axis; this one-axis layout runs only on 'cp'"
    assert errors["three_axes"].startswith("axis='dp' is not this layout's axis")
    assert errors["uneven"] == ("all_to_all over cp=4 ranks needs dim 0 (6) to be a multiple of 4; "
                                "pad the tensor")


def test_one_axis_layout_arithmetic_without_processes():
    cp = AxisLayout("cp", n_ranks=4).at(2)
    assert cp.ranks("cp") == [0, 1, 2, 3] and cp.coord("cp") == 2 and cp.size("cp") == 4
    assert cp.ring_neighbours() == (1, 3)
    assert AxisLayout("ep", 2, rank=5, members=(4, 5)).coord("ep") == 1
    with pytest.raises(ValueError, match=r"^axis='pp': a one-axis layout is for 'cp' or 'ep'"):
        AxisLayout("pp", 2)
    with pytest.raises(ValueError, match=r"not bound to a rank"):
        AxisLayout("cp", 2).coord("cp")
    with pytest.raises(ValueError, match="no process group"):
        cp.group("cp")


def test_the_three_axes_still_refuse_cp():
    with pytest.raises(ValueError, match=r"^axis='cp' does not exist; choose one of 'dp', 'tp', 'pp'$"):
        ParallelDims(dp=2).axis_ranks("cp", 0)


def test_all_to_all_wire_bytes_and_time_by_hand():
    # 1 MB over 8 GPUs: 7 chunks of 125 kB leave each GPU; 7 latency steps
    assert network.bytes_sent_per_gpu("all_to_all", 1e6, 8) == pytest.approx(875e3)
    t = network.collective_time("all_to_all", 1e6, 8, bandwidth=1e9, latency=1e-6)
    assert t.latency == pytest.approx(7e-6) and t.bandwidth == pytest.approx(875e-6)
    assert network.bytes_sent_per_gpu("all_to_all", 1e6, 1) == 0.0
