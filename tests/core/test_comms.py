"""threeaxes.comms: each collective gives what torch.distributed gives, on the group
of the axis it names, and records one trace Event (op, axis, the group's global
ranks, bytes by the module docstring's convention, start <= end).

One launch of 4 gloo ranks runs three layouts, each written out by hand below:

    (dp=2, tp=2)  rank = dp * 2 + tp    dp groups [0, 2] [1, 3]; tp groups [0, 1] [2, 3]
    (dp=2, pp=2)  rank = pp * 2 + dp    pp groups [0, 2] [1, 3]
    (dp=4)        one dp group [0, 1, 2, 3], for the ring sizes over n = 4
"""
import sys

import cloudpickle
import pytest
import torch

from threeaxes import comms, trace
from threeaxes import dims as dims_module
from threeaxes.cost import network
from threeaxes.dims import ParallelDims
from threeaxes.launch import launch
from threeaxes.trace import Event, Trace

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/

F64, F32 = 8, 4  # bytes per number


def _errors(calls):
    out = {}
    for name, call in calls.items():
        try:
            call()
        except ValueError as exc:
            out[name] = str(exc)
    return out


def _every_collective(rank, world_size):
    from threeaxes import comms, trace
    from threeaxes.dims import ParallelDims

    out = {}
    grid = ParallelDims.init(dp=2, tp=2)
    x = torch.arange(4, dtype=torch.float64) + 10 * rank      # rank r holds [10r, 10r+1, 10r+2, 10r+3]
    with trace.record() as t:
        out["summed"] = comms.all_reduce(x.clone(), "dp").tolist()
        out["gathered"] = comms.all_gather(x, "tp").tolist()
        out["scattered"] = comms.reduce_scatter(torch.full((4,), rank + 1.0, dtype=torch.float64), "dp").tolist()
        out["broadcast"] = comms.broadcast(torch.full((3,), float(rank)), "tp", src=grid.ranks("tp")[1]).tolist()
    out["grid"] = t

    pipe = ParallelDims.init(dp=2, pp=2)
    with trace.record() as t:
        if pipe.is_first_stage:
            comms.send(torch.tensor([7.0, 8.0]) + rank, dst=pipe.next_rank, axis="pp")
            out["got"] = None
        else:
            out["got"] = comms.recv(torch.empty(2), src=pipe.prev_rank, axis="pp").tolist()
    out["pipe"] = t
    other = pipe.ranks("dp")[1 - pipe.coord("dp")]   # my dp neighbour: not in my pp group
    out["errors"] = _errors({
        "send_outside": lambda: comms.send(torch.zeros(2), dst=other, axis="pp"),
        "recv_outside": lambda: comms.recv(torch.zeros(2), src=other, axis="pp"),
        "no_such_axis": lambda: comms.all_reduce(torch.zeros(2), "xp"),
        "product": lambda: ParallelDims.init(dp=3),
    })

    ParallelDims.init(dp=4)
    with trace.record() as t:
        comms.all_reduce(torch.ones(4, dtype=torch.float64), "dp")
        comms.all_gather(torch.ones(4, dtype=torch.float64), "dp")
        comms.reduce_scatter(torch.ones(16, dtype=torch.float64), "dp")
    out["ring"] = t

    # asynchronous: the call returns at once, the sum is there after wait()
    with trace.record() as t:
        pending = comms.all_reduce(torch.full((5,), float(rank)), "dp", async_op=True)
        out["events_before_wait"] = len(t.events)
        out["async_sum"] = pending.wait().tolist()
        pending.wait()   # a second wait neither blocks nor records again
    out["async"] = t
    return out


@pytest.fixture(scope="module")
def ranks():
    return launch(_every_collective, 4, timeout=120)


def _coords(rank):
    """(dp, tp) in the (dp=2, tp=2) grid, by hand: rank = dp * 2 + tp."""
    return rank // 2, rank % 2


@pytest.mark.slow
def test_collectives_give_the_textbook_results_inside_their_group(ranks):
    for rank, r in enumerate(ranks):
        dp, tp = _coords(rank)
        # dp group {tp, tp + 2}: the sum of [10q + i] over it is [20 tp + 20 + 2i]
        assert r["summed"] == [20.0 * tp + 20 + 2 * i for i in range(4)]
        # tp group {2dp, 2dp + 1}: both ranks' vectors, in tp order
        assert r["gathered"] == [10.0 * q + i for q in (2 * dp, 2 * dp + 1) for i in range(4)]
        # (tp + 1) + (tp + 3), this rank's 2 of the 4 entries
        assert r["scattered"] == [2.0 * tp + 4] * 2
        # src is the second rank of the tp group, 2dp + 1
        assert r["broadcast"] == [2.0 * dp + 1] * 3
    # (dp=2, pp=2): ranks 0, 1 are the first stage and send to 2, 3
    assert [r["got"] for r in ranks] == [None, None, [7.0, 8.0], [8.0, 9.0]]


@pytest.mark.slow
def test_every_event_records_op_axis_group_bytes_and_time(ranks):
    for rank, r in enumerate(ranks):
        dp, tp = _coords(rank)
        dp_group, tp_group = (tp, tp + 2), (2 * dp, 2 * dp + 1)
        pp_group = (rank % 2, rank % 2 + 2)
        peer = rank + 2 if rank < 2 else rank - 2
        expected = [
            ("all_reduce", "dp", dp_group, 4 * F64, None),          # the tensor
            ("all_gather", "tp", tp_group, 2 * 4 * F64, None),      # the gathered output: 2 shards of 4
            ("reduce_scatter", "dp", dp_group, 4 * F64, None),      # the full input, not the kept half
            ("broadcast", "tp", tp_group, 3 * F32, None),           # the tensor
            ("send" if rank < 2 else "recv", "pp", pp_group, 2 * F32, peer),   # the message
        ]
        events = r["grid"].events + r["pipe"].events
        assert [(e.op, e.axis, e.group, e.bytes, e.peer) for e in events] == expected
        for e in events:
            assert e.rank == rank and e.kind == trace.COMM and e.start <= e.end


@pytest.mark.slow
def test_an_async_all_reduce_sums_after_wait_and_records_one_event(ranks):
    for rank, r in enumerate(ranks):
        assert r["async_sum"] == [6.0] * 5                     # 0 + 1 + 2 + 3
        assert r["events_before_wait"] == 0                    # recorded when waited on
        (e,) = r["async"].events
        assert (e.op, e.axis, e.group, e.bytes, e.rank) == ("all_reduce", "dp", (0, 1, 2, 3), 5 * F32, rank)
        assert e.start <= e.end


@pytest.mark.slow
def test_bytes_sent_per_gpu_gives_the_rings_figure(ranks):
    """Written independently: over n = 4 ranks a ring cuts the tensor into n chunks.
    An all-reduce sends n - 1 chunks to add them up and n - 1 to share the sums; an
    all-gather forwards the n - 1 shards of the others; a reduce-scatter sends n - 1
    chunks; a send is its message."""
    n = 4
    ring = {"all_reduce": 2 * (n - 1) * (4 * F64 // n),   # 4 float64, chunks of 8 B
            "all_gather": (n - 1) * (4 * F64),            # shards of 4 float64
            "reduce_scatter": (n - 1) * (16 * F64 // n)}  # 16 float64, chunks of 32 B
    for r in ranks:
        events = r["ring"].events
        assert [e.op for e in events] == list(ring) and all(len(e.group) == n for e in events)
        for e in events:
            assert network.bytes_sent_per_gpu(e.op, e.bytes, len(e.group)) == ring[e.op], e.op
        sends = [e for e in r["pipe"].events if e.op == "send"]
        for e in sends:
            assert network.bytes_sent_per_gpu("p2p", e.bytes, len(e.group)) == 2 * F32


@pytest.mark.slow
def test_errors_on_ranks_say_what_to_pass(ranks):
    for rank, r in enumerate(ranks):
        other, pp_group = rank ^ 1, [rank % 2, rank % 2 + 2]
        assert r["errors"]["send_outside"] == (
            f"dst={other} is not in this rank's pp group {pp_group}; "
            f"pass a global rank from dims.ranks('pp')")
        assert r["errors"]["recv_outside"].startswith(f"src={other} is not in this rank's pp group")
        assert r["errors"]["no_such_axis"] == "axis='xp' does not exist; choose one of 'dp', 'tp', 'pp'"
        assert r["errors"]["product"] == (
            "dp(3) * tp(1) * pp(1) = 3 != world_size(4); change one axis so the product is 4")


# -- one process ----------------------------------------------------------------------------

def test_an_axis_that_does_not_exist_is_refused_before_any_group():
    with pytest.raises(ValueError, match=r"^axis='xp' does not exist; choose one of 'dp', 'tp', 'pp'$"):
        comms.all_reduce(torch.zeros(2), "xp", dims=ParallelDims(dp=2).at(0))


def test_without_a_layout_the_error_says_how_to_make_one(monkeypatch):
    monkeypatch.setattr(dims_module, "_current", [])
    with pytest.raises(RuntimeError, match=r"^no parallel layout in this process; call .*ParallelDims\.init"):
        comms.all_reduce(torch.zeros(2), "dp")


def test_a_send_outside_the_pp_group_is_refused_before_sending():
    # (dp=2, pp=2): rank 0's pp group is [0, 2]; rank 1 is its dp neighbour
    dims = ParallelDims(dp=2, pp=2).at(0)
    with pytest.raises(ValueError, match=r"^dst=1 is not in this rank's pp group \[0, 2\]"):
        comms.send(torch.zeros(2), dst=1, axis="pp", dims=dims)
    with pytest.raises(ValueError, match=r"^src=3 is not in this rank's pp group \[0, 2\]"):
        comms.recv(torch.zeros(2), src=3, axis="pp", dims=dims)


def test_a_layout_built_without_ranks_has_no_groups():
    with pytest.raises(ValueError, match=r"no process groups.*ParallelDims\.init\(dp=2, tp=1, pp=1\)"):
        comms.all_reduce(torch.zeros(2), "dp", dims=ParallelDims(dp=2).at(0))


def test_trace_counts_and_sums_by_op_and_axis():
    t = Trace([Event(0, trace.COMM, "all_reduce", 1.0, 2.0, axis="dp", group=(0, 2), bytes=100),
               Event(0, trace.COMM, "all_reduce", 2.0, 3.0, axis="tp", group=(0, 1), bytes=10),
               Event(0, trace.COMPUTE, "forward", 0.5, 1.0, module="stage 0", stage=0, microbatch=0),
               Event(0, trace.COMM, "send", 3.0, 4.0, axis="pp", group=(0, 4), bytes=5, peer=4)])
    assert t.total_bytes() == 115 and t.total_bytes("all_reduce") == 110 and t.total_bytes(axis="tp") == 10
    assert t.count("all_reduce", "dp") == 1 and t.count() == 3        # compute is not a collective
    assert [e.op for e in t.compute()] == ["forward"] and t.compute()[0].label == "0F0"
    assert "group=[0, 4]" in str(t.events[3]) and t.events[3].label == "send pp"
    later = Trace([Event(1, trace.COMM, "all_reduce", 0.0, 0.25, axis="dp", group=(1, 3), bytes=7)])
    merged = Trace.merge([t, later])
    assert [e.start for e in merged.events] == [0.0, 0.5, 1.0, 2.0, 3.0] and merged.ranks() == [0, 1]
    assert merged.rows()[1]["start"] == 0.5 and merged.rows()[1]["group"] == ()
