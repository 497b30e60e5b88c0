"""Reference checks for drop 8 (DP, TP and PP together on eight ranks).

Two exercises, each judged by value and on real ranks:

* `layout_groups(dp, tp, pp, rank)`: the rank's dp, tp and pp group members
  and its pipeline neighbours. `expected_layout_groups` enumerates the mesh
  coordinates by brute force (a code path independent of `threeaxes.dims`);
  `check_layout_groups` runs on fresh ranks and compares the answer with the
  groups PyTorch's DeviceMesh actually built. `layout_mistake` names the usual
  mistakes (tp slowest instead of fastest, neighbours one rank apart).
* `collectives_per_step(dp, tp, pp, m, n_layers, stage, n_tensors)`: how many
  collectives a rank makes on each axis in one step. `check_collective_counts`
  trains one real 3D step on fresh ranks and compares with its trace.

Only plain values come back from the ranks: {"ok": bool, "message": str}.
"""
from __future__ import annotations

import itertools

from threeaxes.grading import as_int

__all__ = ["expected_layout_groups", "plain_layout_groups", "layout_mistake",
           "check_layout_groups", "plain_counts", "check_collective_counts"]

KEYS = ("dp", "tp", "pp", "prev", "next")


def _enumerate(dp, tp, pp, fastest_first=("tp", "dp", "pp")):
    """{rank: (dp, tp, pp) coordinates}, numbering ranks with `fastest_first[0]` fastest."""
    sizes = {"dp": dp, "tp": tp, "pp": pp}
    slow_to_fast = list(reversed(fastest_first))
    coords = {}
    for rank, values in enumerate(itertools.product(*(range(sizes[a]) for a in slow_to_fast))):
        c = dict(zip(slow_to_fast, values))
        coords[rank] = (c["dp"], c["tp"], c["pp"])
    return coords


def expected_layout_groups(dp, tp, pp, rank, fastest_first=("tp", "dp", "pp")) -> dict:
    """The answer by enumeration: members of each group share every other coordinate."""
    coords = _enumerate(dp, tp, pp, fastest_first)
    mine = coords[rank]
    out = {}
    for i, axis in enumerate(("dp", "tp", "pp")):
        out[axis] = sorted(r for r, c in coords.items()
                           if all(c[j] == mine[j] for j in range(3) if j != i))
    stage = mine[2]
    ring = out["pp"]
    out["prev"] = ring[stage - 1] if stage > 0 else None
    out["next"] = ring[stage + 1] if stage < pp - 1 else None
    return out


def plain_layout_groups(answer, name="layout_groups(...)") -> dict:
    """The answer as plain lists of ints and int-or-None, or an AssertionError saying why not."""
    if type(answer) is not dict or set(answer) != set(KEYS):
        raise AssertionError(f"{name} should return a dict with exactly the keys {list(KEYS)}")
    plain = {}
    for axis in ("dp", "tp", "pp"):
        if type(answer[axis]) not in (list, tuple, range):
            raise AssertionError(f"{name}[{axis!r}] should be a list of global ranks")
        plain[axis] = [as_int(r, f"{name}[{axis!r}] entry") for r in answer[axis]]
    for key in ("prev", "next"):
        plain[key] = None if answer[key] is None else as_int(answer[key], f"{name}[{key!r}]")
    return plain


def layout_mistake(got: dict, dp, tp, pp, rank) -> str | None:
    """None when `got` is right; otherwise a message naming the mistake."""
    want = expected_layout_groups(dp, tp, pp, rank)
    if got == want:
        return None
    where = f"for dp={dp}, tp={tp}, pp={pp}, rank {rank}"
    if got == expected_layout_groups(dp, tp, pp, rank, ("pp", "dp", "tp")) and tp > 1:
        return (f"{where} you numbered the ranks with tp slowest (pp fastest); tp is the fastest "
                f"axis, so a tp group is {tp} consecutive ranks: {want['tp']}")
    if got["prev"] == (rank - 1 if rank > 0 else None) or got["next"] == rank + 1:
        if got["prev"] != want["prev"] or got["next"] != want["next"]:
            return (f"{where} your pipeline neighbours are one rank apart ({got['prev']}, {got['next']}); "
                    f"the next stage is dp * tp = {dp * tp} ranks further: ({want['prev']}, {want['next']})")
    for key in KEYS:
        if got[key] != want[key]:
            return f"{where} {key} should be {want[key]}, got {got[key]}"
    return None


def check_layout_groups(rank, world_size, layout_groups, dp, tp, pp) -> dict:
    """On fresh ranks: the student's answer for this rank against the DeviceMesh's groups."""
    import torch.distributed as dist

    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(dp, tp, pp)
    real = {axis: sorted(dist.get_process_group_ranks(dims.group(axis))) for axis in ("dp", "tp", "pp")}
    real.update(prev=dims.prev_rank, next=dims.next_rank)
    try:
        got = plain_layout_groups(layout_groups(dp, tp, pp, rank), f"layout_groups({dp}, {tp}, {pp}, {rank})")
    except AssertionError as err:
        return {"ok": False, "message": str(err)}
    if got != real:
        return {"ok": False, "message": layout_mistake(got, dp, tp, pp, rank)
                or f"rank {rank}: the mesh built {real}, you said {got}"}
    return {"ok": True, "message": f"rank {rank}: matches the groups the DeviceMesh built"}


def plain_counts(answer, name="collectives_per_step(...)") -> dict:
    if type(answer) is not dict or set(answer) != {"tp", "dp", "pp"}:
        raise AssertionError(f"{name} should return a dict with exactly the keys 'tp', 'dp', 'pp'")
    return {k: as_int(answer[k], f"{name}[{k!r}]") for k in ("tp", "dp", "pp")}


def count_mistake(got: dict, want: dict, dp, tp, pp, m, n_layers, stage) -> str | None:
    """None when right; otherwise what was probably miscounted."""
    if got == want:
        return None
    where = f"dp={dp}, tp={tp}, pp={pp}, m={m}, stage {stage}"
    if tp > 1 and got["tp"] * 2 == want["tp"]:
        return (f"{where}: tp {got['tp']} is half of {want['tp']}; you counted the forward's two "
                f"all-reduces per block but backward makes two more (the conjugate maps)")
    if tp > 1 and got["tp"] * m == want["tp"]:
        return f"{where}: tp {got['tp']} counts one microbatch; every one of the m={m} runs every block"
    if dp == 1 and got["dp"]:
        return f"{where}: with dp=1 there is nothing to average; no dp all-reduce is made"
    if got["pp"] != want["pp"] and stage in (0, pp - 1) and pp > 1:
        return (f"{where}: pp {got['pp']}; an end stage has one neighbour, so it sends m={m} "
                f"tensors per step, a middle stage 2m")
    return f"{where}: expected {want}, got {got}"


def check_collective_counts(rank, world_size, collectives_per_step, dp, tp, pp, m) -> dict:
    """On fresh ranks: train one 3D step, count this rank's collectives, compare with the answer."""
    from threeaxes.toy import ToyConfig, make_batch
    from threeaxes.train import train_3d

    cfg = ToyConfig(seq_len=8)
    result = train_3d(rank, world_size, cfg, [make_batch(cfg, 2 * dp * m, seed=0)],
                      dp=dp, tp=tp, pp=pp, m=m)
    trace, stage = result["trace"], result["coords"]["pp"]
    want = {"tp": trace.count("all_reduce", "tp"), "dp": trace.count("all_reduce", "dp"),
            "pp": trace.count("send", "pp")}
    args = (dp, tp, pp, m, cfg.n_layers, stage, len(result["params"]))
    try:
        got = plain_counts(collectives_per_step(*args), f"collectives_per_step{args}")
    except AssertionError as err:
        return {"ok": False, "message": str(err)}
    mistake = count_mistake(got, want, dp, tp, pp, m, cfg.n_layers, stage)
    if mistake:
        return {"ok": False, "message": f"rank {rank}: {mistake}"}
    return {"ok": True, "message": f"rank {rank}: {got} equals what the trace counted"}
