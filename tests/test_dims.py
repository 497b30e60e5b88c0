"""ParallelDims: layout arithmetic, checked without processes."""
import pytest

from threeaxes.dims import ParallelDims


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
    with pytest.raises(ValueError, match="choose one of"):
        dims.axis_ranks("ep", 0)
