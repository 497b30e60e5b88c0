"""References for drop 8 (DP, TP and PP together on eight ranks).

Two exercises, each judged by value against real ranks:

* `layout_groups(dp, tp, pp, rank)`: the rank's dp, tp and pp group members
  and its pipeline neighbours. `expected_layout_groups` enumerates the mesh
  coordinates by brute force (a code path independent of `threeaxes.dims`);
  `device_mesh_layout_groups` reads what PyTorch's DeviceMesh built on fresh
  ranks (`threeaxes.grading.drop08.mesh_layout_groups`) for the visible cases.
  `layout_mistake` names the usual mistakes (tp slowest instead of fastest,
  neighbours one rank apart).
* `collectives_per_step(dp, tp, pp, m, n_layers, stage, n_tensors)`: how many
  collectives a rank makes on each axis in one step. `traced_counts` trains
  real 3D steps on fresh ranks and counts each rank's collectives in the
  trace; `counts_mistake` compares the answer for every rank with them, and
  `traced_collectives` gives one stage's counts for the visible cases.

The rank functions the grader trusts run no student code and send back raw values
(`threeaxes.grading.drop08`: `check_on_ranks` starts only functions of `threeaxes.grading`).
`draw_layouts` and `draw_count_runs` pick the hidden tests' inputs at grading time.
"""
from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable
from typing import Any  # Any: a student's answer

from threeaxes.grading import as_int, ask_student, check_on_ranks
from threeaxes.grading.drop08 import mesh_layout_groups, traced_counts

__all__ = ["expected_layout_groups", "plain_layout_groups", "ask_layout_groups", "layout_mistake",
           "mesh_layout_groups", "device_mesh_layout_groups", "draw_layouts", "plain_counts",
           "count_mistake", "traced_counts", "traced_collectives", "counts_mistake", "draw_count_runs"]

KEYS = ("dp", "tp", "pp", "prev", "next")


def _enumerate(dp: int, tp: int, pp: int,
               fastest_first: tuple[str, ...] = ("tp", "dp", "pp")) -> dict[int, tuple[int, int, int]]:
    """{rank: (dp, tp, pp) coordinates}, numbering ranks with `fastest_first[0]` fastest."""
    sizes = {"dp": dp, "tp": tp, "pp": pp}
    slow_to_fast = list(reversed(fastest_first))
    coords = {}
    for rank, values in enumerate(itertools.product(*(range(sizes[a]) for a in slow_to_fast))):
        c = dict(zip(slow_to_fast, values))
        coords[rank] = (c["dp"], c["tp"], c["pp"])
    return coords


def expected_layout_groups(dp: int, tp: int, pp: int, rank: int,
                           fastest_first: tuple[str, ...] = ("tp", "dp", "pp")) -> dict:
    """The answer by enumeration: members of each group share every other coordinate."""
    coords = _enumerate(dp, tp, pp, fastest_first)
    mine = coords[rank]
    out: dict[str, Any] = {}   # each axis: its ranks; prev, next: a rank or None
    for i, axis in enumerate(("dp", "tp", "pp")):
        out[axis] = sorted(r for r, c in coords.items()
                           if all(c[j] == mine[j] for j in range(3) if j != i))
    stage = mine[2]
    ring = out["pp"]
    out["prev"] = ring[stage - 1] if stage > 0 else None
    out["next"] = ring[stage + 1] if stage < pp - 1 else None
    return out


def plain_layout_groups(answer: Any, name: str = "layout_groups(...)") -> dict:
    """The answer as plain lists of ints and int-or-None, or an AssertionError saying why not."""
    if type(answer) is not dict or set(answer) != set(KEYS):
        raise AssertionError(f"{name} should return a dict with exactly the keys {list(KEYS)}")
    plain: dict[str, Any] = {}   # as expected_layout_groups's
    for axis in ("dp", "tp", "pp"):
        if type(answer[axis]) not in (list, tuple, range):
            raise AssertionError(f"{name}[{axis!r}] should be a list of global ranks")
        plain[axis] = [as_int(r, f"{name}[{axis!r}] entry") for r in answer[axis]]
    for key in ("prev", "next"):
        plain[key] = None if answer[key] is None else as_int(answer[key], f"{name}[{key!r}]")
    return plain


def ask_layout_groups(layout_groups: Callable[..., object], dp: int, tp: int, pp: int, rank: int) -> dict:
    """The answer for one rank as plain values; any error names the call."""
    call = f"layout_groups({dp}, {tp}, {pp}, {rank})"
    return plain_layout_groups(ask_student(layout_groups, call, dp, tp, pp, rank), call)


def layout_mistake(got: dict, dp: int, tp: int, pp: int, rank: int) -> str | None:
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


@functools.cache
def _mesh(dp: int, tp: int, pp: int) -> tuple:
    return tuple(check_on_ranks(mesh_layout_groups, dp * tp * pp, dp, tp, pp))


def device_mesh_layout_groups(dp: int, tp: int, pp: int, rank: int) -> dict:
    """The visible cases' answer: what the DeviceMesh built for `rank`, read on fresh
    ranks (the enumeration `expected_layout_groups` must agree, tests/drops/test_grading_drop08.py)."""
    real = dict(_mesh(dp, tp, pp)[rank])
    assert real == expected_layout_groups(dp, tp, pp, rank), (dp, tp, pp, rank)
    return real


def draw_layouts(rng: random.Random, n: int = 3, max_world: int = 16) -> list[tuple[int, int, int]]:
    """`n` random (dp, tp, pp) layouts of 2 to `max_world` ranks; the first has all three
    axes above 1 (every usual mistake shows there), the others any shape, a 1 included."""
    full = [(d, t, p) for d in (2, 3) for t in (2, 3) for p in (2, 3) if d * t * p <= max_world]
    other = [(d, t, p) for d in range(1, 5) for t in range(1, 5) for p in range(1, 5)
             if 2 <= d * t * p <= max_world and (d, t, p) not in full]
    return [rng.choice(full)] + rng.sample(other, n - 1)


def plain_counts(answer: Any, name: str = "collectives_per_step(...)") -> dict:
    if type(answer) is not dict or set(answer) != {"tp", "dp", "pp"}:
        raise AssertionError(f"{name} should return a dict with exactly the keys 'tp', 'dp', 'pp'")
    return {k: as_int(answer[k], f"{name}[{k!r}]") for k in ("tp", "dp", "pp")}


def count_mistake(got: dict, want: dict, dp: int, tp: int, pp: int, m: int, n_layers: int,
                  stage: int) -> str | None:
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


@functools.cache
def _traced(run: tuple[int, int, int, int, int]) -> tuple:
    return tuple(check_on_ranks(traced_counts, run[0] * run[1] * run[2], [run]))


def traced_collectives(dp: int, tp: int, pp: int, m: int, n_layers: int, stage: int, n_tensors: int) -> dict:
    """The visible cases' answer: the collectives a rank of `stage` counted in one real
    `train_3d` step of the run (dp, tp, pp, m, n_layers) on fresh ranks."""
    measured = [r[0] for r in _traced((dp, tp, pp, m, n_layers)) if r[0]["stage"] == stage]
    assert measured and all(r["n_tensors"] == n_tensors for r in measured), (stage, n_tensors, measured)
    assert all(r["counts"] == measured[0]["counts"] for r in measured)
    return dict(measured[0]["counts"])


def counts_mistake(collectives_per_step: Callable[..., object], runs: list[tuple[int, int, int, int, int]],
                   traced: list) -> str | None:
    """Call the answer once for each rank's arguments in each run and compare it with what
    `traced_counts` measured there; None when all agree, else the first mistake."""
    for i, (dp, tp, pp, m, n_layers) in enumerate(runs):
        asked: dict[tuple, dict] = {}
        for rank, per_run in enumerate(traced):
            measured = per_run[i]
            args = (dp, tp, pp, m, n_layers, measured["stage"], measured["n_tensors"])
            if args not in asked:
                call = f"collectives_per_step{args}"
                asked[args] = plain_counts(ask_student(collectives_per_step, call, *args), call)
            mistake = count_mistake(asked[args], measured["counts"], dp, tp, pp, m, n_layers,
                                    measured["stage"])
            if mistake:
                return f"rank {rank}, collectives_per_step{args}: {mistake}"
    return None


def draw_count_runs(rng: random.Random) -> list[tuple[int, int, int, int, int]]:
    """Three random runs (dp, tp, pp, m, n_layers) on 4 ranks: tp x pp, one with dp > 1, and
    tp = 4 or pp = 4 (middle stages); m from 1 to 3, one or two blocks per stage."""
    layouts = [(1, 2, 2), rng.choice([(2, 1, 2), (2, 2, 1), (4, 1, 1)]), rng.choice([(1, 1, 4), (1, 4, 1)])]
    return [(dp, tp, pp, rng.randint(1, 3), pp * rng.randint(1, 2)) for dp, tp, pp in layouts]
