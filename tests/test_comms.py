"""threeaxes.comms: each collective gives what torch.distributed gives, and the
trace records op, axis and payload bytes."""
import torch

from threeaxes.launch import launch


def _every_collective(rank, world_size):
    import torch.distributed as dist
    from threeaxes import comms

    x = torch.arange(4, dtype=torch.float64) + 10 * rank          # rank r holds [10r, 10r+1, 10r+2, 10r+3]
    with comms.trace() as t:
        summed = comms.all_reduce(x.clone(), axis="dp")
        gathered = comms.all_gather(x, axis="tp")
        scattered = comms.reduce_scatter(torch.ones(2 * world_size, dtype=torch.float64) * (rank + 1), axis="dp")
        b = comms.broadcast(torch.full((3,), float(rank)), src=1)
        if rank == 0:
            comms.send(torch.tensor([7.0, 8.0]), dst=1)
            got = None
        elif rank == 1:
            got = comms.recv(torch.empty(2), src=0).tolist()
        else:
            got = None
        dist.barrier()
    return {"summed": summed.tolist(), "gathered": gathered.tolist(), "scattered": scattered.tolist(),
            "broadcast": b.tolist(), "got": got,
            "events": [(e.op, e.axis, e.bytes, e.peer) for e in t.events]}


def test_collectives_give_the_textbook_results_and_trace_their_bytes():
    world = 3
    results = launch(_every_collective, world)
    for rank, r in enumerate(results):
        # Worked by hand: the sum over ranks of [10r + i] is [30 + 3i].
        assert r["summed"] == [30.0, 33.0, 36.0, 39.0]
        assert r["gathered"] == [10.0 * q + i for q in range(world) for i in range(4)]
        assert r["scattered"] == [6.0, 6.0]                    # 1 + 2 + 3, this rank's 2 of the 6 entries
        assert r["broadcast"] == [1.0, 1.0, 1.0]
        ops = [(op, axis, nbytes) for op, axis, nbytes, _ in r["events"]]
        assert ops[:4] == [("all_reduce", "dp", 32), ("all_gather", "tp", 32),
                           ("reduce_scatter", "dp", 8 * 2 * world), ("broadcast", "world", 12)]
    assert results[1]["got"] == [7.0, 8.0]
    assert ("send", "pp", 8, 1) in results[0]["events"]
    assert ("recv", "pp", 8, 0) in results[1]["events"]


def test_trace_sums_and_counts_by_op_and_axis():
    from threeaxes.comms import CommEvent, Trace

    t = Trace([CommEvent("all_reduce", "dp", 100, 0.0), CommEvent("all_reduce", "tp", 10, 0.0),
               CommEvent("send", "pp", 5, 0.0, peer=1)])
    assert t.total_bytes() == 115 and t.total_bytes("all_reduce") == 110 and t.total_bytes(axis="tp") == 10
    assert t.count("all_reduce", "dp") == 1 and t.count() == 3
    assert "peer=1" in str(t.events[2])
