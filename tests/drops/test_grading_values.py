"""threeaxes.grading: answers become plain values, and impostors are refused."""
import numpy as np
import pytest
import torch

from threeaxes.grading import as_choice, as_int, as_int_tuple, as_number, assert_close, check_on_ranks


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __float__(self):
        return 5.0


class FloatThatEqualsEverything(float):
    def __eq__(self, other):
        return True


def test_numbers_from_python_numpy_and_zero_dim_tensors_become_floats():
    assert as_number(3) == 3.0 and type(as_number(3)) is float
    assert as_number(np.float32(2.5)) == 2.5
    assert as_number(torch.tensor(4.0)) == 4.0


@pytest.mark.parametrize("impostor", [AlwaysEqual(), FloatThatEqualsEverything(1.0), True, "5", [5.0]])
def test_objects_that_are_not_plain_numbers_are_refused(impostor):
    with pytest.raises(AssertionError, match="should be a number"):
        as_number(impostor)


class ClaimsTorch:
    """A class that says it is torch's: `.item()` used to be asked of anything from there."""
    __module__ = "torch"
    item_called = False

    def item(self):
        ClaimsTorch.item_called = True
        return 5.0


def test_only_torch_and_numpy_own_types_are_asked_for_item():
    with pytest.raises(AssertionError, match="should be a number"):
        as_number(ClaimsTorch())
    assert not ClaimsTorch.item_called


def test_arrays_and_nan_are_refused_with_a_hint():
    with pytest.raises(AssertionError, match="single number"):
        as_number(torch.ones(3))
    with pytest.raises(AssertionError, match="finite"):
        as_number(float("nan"))


def test_ints_choices_and_tuples():
    assert as_int(4.0) == 4 and as_int(np.int64(3)) == 3
    with pytest.raises(AssertionError, match="whole number"):
        as_int(2.5)
    assert as_choice("  Batch ", {"batch", "layers"}) == "batch"
    with pytest.raises(AssertionError, match="not one of"):
        as_choice("heads", {"batch", "layers"})
    with pytest.raises(AssertionError, match="should be a string"):
        as_choice(AlwaysEqual(), {"batch"})
    assert as_int_tuple([2, 2, 4], length=3) == (2, 2, 4)
    with pytest.raises(AssertionError, match="3 entries"):
        as_int_tuple((2, 2), length=3)


def test_assert_close_uses_a_relative_tolerance():
    assert_close(1e9 + 1, 1e9, rel=1e-6)
    with pytest.raises(AssertionError, match="is not right. check the units"):
        assert_close(2e9, 1e9, hint="check the units")


def test_check_on_ranks_only_takes_reference_checks_from_the_grading_package():
    with pytest.raises(ValueError, match="a runner from threeaxes.grading"):
        check_on_ranks(lambda rank, world_size: True, 2)


def test_check_on_ranks_runs_the_check_imported_fresh_not_a_forgery():
    from threeaxes.grading import drop02

    def forged(rank, world_size, student_fn):          # claims to be the rank runner
        return {"ok": True, "message": "forged"}
    forged.__module__, forged.__name__ = drop02.__name__, "gradients_after_average"

    def no_division(grads_model, world_size):          # a wrong student answer: sums, never divides
        import torch.distributed as dist
        for p in grads_model.parameters():
            dist.all_reduce(p.grad)

    results = check_on_ranks(forged, 2, no_division)
    # the real runner ran: raw gradients came back, not the forged approval
    assert [sorted(r) for r in results] == [["error", "grads", "rank", "shapes"]] * 2


def test_a_student_function_still_works_after_a_hidden_test_reimports_threeaxes():
    """A hidden test drops every threeaxes module and imports the grading code afresh. The
    student's function keeps the old `all_gather` it imported; check_on_ranks must send it by
    name (each worker imports its own), not pickle the dropped module's classes by value."""
    import sys

    from threeaxes import comms
    from threeaxes.sharding import flat  # noqa: F401 - any module the grading code does not import

    namespace = {"comms": comms, "all_gather": comms.all_gather, "torch": torch}
    exec("def shard(flat, rank, n):\n"
         "    k = -(-flat.numel() // n)\n"
         "    return torch.cat([flat, flat.new_zeros(k * n - flat.numel())])[rank * k:(rank + 1) * k].clone()\n"
         "def gather(shard, numel, dims):\n"
         "    return all_gather(shard, 'dp', dims=dims)[:numel]\n", namespace)
    saved = dict(sys.modules)
    try:
        for name in [n for n in sys.modules if n == "threeaxes" or n.startswith("threeaxes.")]:
            del sys.modules[name]
        from threeaxes.grading import check_on_ranks as fresh_check_on_ranks
        from threeaxes.grading import drop09
        results = fresh_check_on_ranks(drop09.shard_gather_raw, 2, namespace["shard"], namespace["gather"],
                                       [[1.0, 2.0, 3.0]])
    finally:
        sys.modules.clear()
        sys.modules.update(saved)
    # each rank cut its shard, and one all-gather over dp put the three numbers back
    assert [r[0]["error"] for r in results] == [None, None], results
    assert [r[0]["shard"] for r in results] == [((2,), [1.0, 2.0]), ((2,), [3.0, 0.0])], results
    assert [r[0]["gathered"] for r in results] == [((3,), [1.0, 2.0, 3.0])] * 2, results
