"""ParallelDims: layout arithmetic and its errors, checked without processes; then,
on 8 launched ranks, the DeviceMesh's groups equal that arithmetic."""
import sys

import cloudpickle
import pytest

from threeaxes.dims import ParallelDims
from threeaxes.toy import ToyConfig


def test_world_size_mismatch_spells_out_the_arithmetic():
    with pytest.raises(ValueError, match=r"dp\(2\) \* tp\(2\) \* pp\(3\) = 12 != world_size\(8\)"):
        ParallelDims(dp=2, tp=2, pp=3, world_size=8)


def test_axis_sizes_must_be_positive():
    with pytest.raises(ValueError, match="positive integer"):
        ParallelDims(dp=0, tp=1, pp=1, world_size=0)


@pytest.mark.parametrize("dp,tp,pp", [(2, 2, 2), (1, 4, 2), (4, 1, 2), (8, 1, 1)])
def test_coords_round_trip_and_groups_partition_the_world(dp, tp, pp):
    dims = ParallelDims(dp, tp, pp, dp * tp * pp)
    for rank in range(dims.world_size):
        assert dims.rank_of(**dims.coords(rank)) == rank
    for axis, size in (("dp", dp), ("tp", tp), ("pp", pp)):
        groups = dims.all_groups(axis)
        assert len(groups) == dims.world_size // size
        assert sorted(r for g in groups for r in g) == list(range(dims.world_size))
        assert all(len(g) == size for g in groups)


def test_tp_ranks_are_neighbours_and_pp_is_slowest():
    dims = ParallelDims(dp=2, tp=2, pp=2, world_size=8)
    # Worked by hand: rank = pp * 4 + dp * 2 + tp.
    assert dims.all_groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert dims.all_groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert dims.all_groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert dims.coords(6) == {"dp": 1, "tp": 0, "pp": 1}


def test_bad_rank_and_axis_are_reported():
    dims = ParallelDims(1, 2, 1, 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        dims.coords(2)
    with pytest.raises(ValueError, match=r"^axis='ep' does not exist; choose one of 'dp', 'tp', 'pp'$"):
        dims.axis_ranks("ep", 0)
    with pytest.raises(ValueError, match=r"^axis='xp' does not exist"):
        dims.at(0).group("xp")


def test_tp_that_does_not_divide_the_heads_says_what_to_choose():
    with pytest.raises(ValueError, match=r"^tp=3 does not divide n_heads=4; choose tp in \{1, 2, 4\}$"):
        ParallelDims(tp=3).check_model(ToyConfig(n_heads=4))
    assert ParallelDims(tp=4).check_model(ToyConfig(n_heads=4)).tp == 4


def test_more_stages_than_layers_says_what_to_choose():
    with pytest.raises(ValueError, match=r"^pp=8 = 8 stages > n_layers=4: every stage needs a layer; "
                                         r"choose pp in \{1, 2, 4\}$"):
        ParallelDims(pp=8).check_model(ToyConfig(n_layers=4))
    with pytest.raises(ValueError, match=r"^pp=2 x v=4 = 8 stages > n_layers=4"):
        ParallelDims(pp=2).check_model(ToyConfig(n_layers=4), v=4)


def test_no_current_layout_says_how_to_make_one(monkeypatch):
    from threeaxes import dims as dims_module

    monkeypatch.setattr(dims_module, "_current", [])
    with pytest.raises(RuntimeError, match=r"^no parallel layout in this process; call "
                                           r"threeaxes\.dims\.ParallelDims\.init\(dp=\.\.\., tp=\.\.\., pp=\.\.\.\)"):
        dims_module.current()
    with pytest.raises(RuntimeError, match=r"torch.distributed is not running; call ParallelDims.init inside"):
        ParallelDims.init(dp=1)


def test_a_layout_not_bound_to_a_rank_says_how_to_bind_it():
    with pytest.raises(ValueError, match=r"not bound to a rank; use dims\.at\(rank\)"):
        ParallelDims(dp=2).coord("dp")


# Neighbours along pp, written out by hand (None past either end of a pipeline).
# (2, 2, 2): rank = pp * 4 + dp * 2 + tp; pipelines [r, r + 4] for r < 4.
# (2, 1, 4): rank = pp * 2 + dp; pipelines [0, 2, 4, 6] and [1, 3, 5, 7].
NEIGHBOURS = {
    (2, 2, 2): {0: (None, 4), 3: (None, 7), 4: (0, None), 7: (3, None)},
    (4, 1, 2): {0: (None, 4), 3: (None, 7), 5: (1, None), 7: (3, None)},
    (2, 1, 4): {0: (None, 2), 1: (None, 3), 2: (0, 4), 3: (1, 5), 4: (2, 6), 5: (3, 7),
                6: (4, None), 7: (5, None)},
}


@pytest.mark.parametrize("layout", sorted(NEIGHBOURS))
def test_pp_neighbours_at_the_ends_and_in_the_middle(layout):
    dims = ParallelDims(*layout)
    for rank, (prev, nxt) in NEIGHBOURS[layout].items():
        assert (dims.at(rank).prev_rank, dims.at(rank).next_rank) == (prev, nxt), rank
        assert dims.at(rank).is_first_stage == (prev is None)
        assert dims.at(rank).is_last_stage == (nxt is None)


def _mesh_groups(rank, world_size, layouts):
    """On launched ranks: for each layout, the global ranks of the DeviceMesh's group
    along every axis, the arithmetic ranks, and the pp neighbours."""
    import torch.distributed as dist

    out = {}
    for layout in layouts:
        dims = ParallelDims.init(*layout)
        out[layout] = {
            "mesh": {axis: dist.get_process_group_ranks(dims.group(axis)) for axis in ("dp", "tp", "pp")},
            "ranks": {axis: dims.ranks(axis) for axis in ("dp", "tp", "pp")},
            "coords": {axis: dims.coord(axis) for axis in ("dp", "tp", "pp")},
            "neighbours": (dims.prev_rank, dims.next_rank),
            "mesh_shape": tuple(dims.mesh.shape),
        }
    return out


@pytest.mark.slow
def test_device_mesh_groups_equal_the_arithmetic_on_8_ranks():
    from threeaxes.launch import launch

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/
    layouts = sorted(NEIGHBOURS)
    results = launch(_mesh_groups, 8, layouts, timeout=120)
    for layout in layouts:
        pure = ParallelDims(*layout)
        for rank, result in enumerate(results):
            got = result[layout]
            assert got["mesh_shape"] == (layout[2], layout[0], layout[1])    # (pp, dp, tp)
            assert got["coords"] == pure.coords(rank)
            for axis in ("dp", "tp", "pp"):
                # PyTorch's group along the axis is the arithmetic group, in axis order
                assert got["mesh"][axis] == got["ranks"][axis] == pure.axis_ranks(axis, rank), (layout, rank, axis)
            if rank in NEIGHBOURS[layout]:
                assert got["neighbours"] == NEIGHBOURS[layout][rank], (layout, rank)

