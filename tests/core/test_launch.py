"""threeaxes.launch: N ranks from one call, results in rank order, the arguments it refuses
with what to change. The same call under torchrun is tests/core/test_train_torchrun.py (one
torchrun run serves it and the 3D trainer's test).

Rank functions here are pickled by value (as notebook functions are), so the
workers never import this test module.
"""

import os
import re
import sys
import threading

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from launch_helpers import assert_gone, assert_no_rank_processes

from threeaxes.launch import MAX_WORLD_SIZE, RankError, launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---- rank functions --------------------------------------------------------------------
def sum_of_ranks(rank, world_size, scale, offset=0):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)  # communication: sum over ranks
    return {"rank": rank, "world_size": world_size, "value": t.item() * scale + offset,
            "backend": dist.get_backend(), "pid": os.getpid()}


# ---- the contract ------------------------------------------------------------------------
def test_results_come_back_in_rank_order():
    results = launch(sum_of_ranks, 3, 10.0, offset=1)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["value"] for r in results] == [(0 + 1 + 2) * 10.0 + 1] * 3
    assert {r["world_size"] for r in results} == {3}
    assert {r["backend"] for r in results} == {"nccl" if torch.cuda.device_count() >= 3 else "gloo"}
    assert len({r["pid"] for r in results}) == 3 and os.getpid() not in {r["pid"] for r in results}
    assert_gone([r["pid"] for r in results])
    assert_no_rank_processes()


def test_lambdas_and_closures_travel_by_value():
    base = torch.arange(3.0)

    def add_base(rank, world_size):
        return base + rank

    assert [t.tolist() for t in launch(add_base, 2)] == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    assert launch(lambda rank, world_size: rank * world_size, 4) == [0, 4, 8, 12]


def test_one_rank_is_a_valid_group():
    assert launch(lambda rank, world_size: (dist.get_rank(), dist.get_world_size()), 1) == [(0, 1)]


def test_ranks_see_the_callers_environment_as_it_is_now(monkeypatch):
    launch(lambda rank, world_size: None, 1)  # the forkserver is running from here on
    monkeypatch.setenv("THREEAXES_LAUNCH_TEST", "set after the forkserver started")
    seen = launch(lambda rank, world_size: (os.environ.get("THREEAXES_LAUNCH_TEST"),
                                            os.environ["RANK"], os.environ["WORLD_SIZE"]), 2)
    assert seen == [("set after the forkserver started", "0", "2"),
                    ("set after the forkserver started", "1", "2")]
    assert "RANK" not in os.environ  # the caller's own environment is untouched


@pytest.mark.parametrize(
    "kwargs, fix",
    [
        ({"world_size": 0}, "from 1 to 64"),
        ({"world_size": MAX_WORLD_SIZE + 1}, "from 1 to 64"),
        ({"world_size": 2.0}, "whole number"),
        ({"world_size": True}, "whole number"),
        ({"world_size": 2, "timeout": 0}, "positive"),
        ({"world_size": 2, "timeout": -1.0}, "positive"),
        ({"world_size": 2, "timeout": float("nan")}, "positive"),
        ({"world_size": 2, "backend": "mpi"}, "'gloo' (CPU), 'nccl'"),
    ],
)
def test_bad_arguments_say_what_to_change(kwargs, fix):
    with pytest.raises(ValueError, match=re.escape(fix)):
        launch(sum_of_ranks, **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match=r"fn must be a function fn\(rank, world_size, ...\)"):
        launch("not a function", 2)


def test_nccl_without_a_gpu_per_rank_names_the_gpu_count():
    gpus = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"has {gpus} GPU\(s\); use backend='gloo'"):
        launch(sum_of_ranks, gpus + 1, 1.0, backend="nccl")


def test_unpicklable_arguments_fail_before_any_rank_starts():
    with pytest.raises(TypeError, match="could not pickle fn or its arguments"):
        launch(sum_of_ranks, 2, threading.Lock())
    assert_no_rank_processes()


def test_unpicklable_result_is_a_rank_error_that_says_why():
    with pytest.raises(RankError, match=r"rank \d of 2 raised(.|\n)*cannot be pickled"):
        launch(lambda rank, world_size: threading.Lock(), 2)
    assert_no_rank_processes()


def test_tensors_come_back_on_cpu_even_from_an_autograd_graph():
    def loss(rank, world_size):
        w = torch.ones(2, requires_grad=True)
        return (w * (rank + 1)).sum(), w

    (loss0, w0), (loss1, _) = launch(loss, 2)
    assert (loss0.item(), loss1.item()) == (2.0, 4.0)
    assert loss0.device.type == "cpu" and not loss0.requires_grad  # detached: graphs stay behind
    assert w0.requires_grad  # a leaf keeps its flag


def test_concurrent_launches_never_collide():
    results, errors = {}, []

    def run(i):
        try:
            results[i] = launch(sum_of_ranks, 2, float(i))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert {i: [r["value"] for r in results[i]] for i in range(4)} == {i: [1.0 * i] * 2 for i in range(4)}
    assert_no_rank_processes()


def test_destroy_process_group_runs_on_every_rank(tmp_path):
    def records_destroy(rank, world_size):
        original = dist.destroy_process_group

        def destroy(*args, **kwargs):
            (tmp_path / f"destroyed{rank}").write_text("yes")
            return original(*args, **kwargs)

        dist.destroy_process_group = destroy  # the worker looks it up after fn returns
        return rank

    assert launch(records_destroy, 2) == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["destroyed0", "destroyed1"]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_nccl_with_one_gpu_per_rank_returns_cpu_tensors():
    def on_gpu(rank, world_size):
        t = torch.full((2,), float(rank + 1), device="cuda")
        dist.all_reduce(t)  # communication: NCCL, one GPU per rank
        return dist.get_backend(), torch.cuda.current_device(), t

    results = launch(on_gpu, 2)
    assert [(backend, device) for backend, device, _ in results] == [("nccl", 0), ("nccl", 1)]
    for _, _, t in results:
        assert t.device.type == "cpu" and t.tolist() == [3.0, 3.0]
    # backend= overrides the automatic choice
    assert launch(lambda rank, world_size: dist.get_backend(), 2, backend="gloo") == ["gloo", "gloo"]
