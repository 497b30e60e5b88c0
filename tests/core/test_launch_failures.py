"""threeaxes.launch when a rank fails: an exception raised on a rank, a rank that dies and a
collective one rank skips each come back here, naming the ranks, and leave no rank running.

Rank functions here are pickled by value (as notebook functions are), so the
workers never import this test module.
"""

import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from launch_helpers import assert_gone, assert_no_rank_processes, pids_in, write_pid

from threeaxes.launch import LaunchTimeout, RankError, launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---- rank functions --------------------------------------------------------------------
def fail_fast_on_rank_1(rank, world_size, directory):
    print(f"rank {rank} is up")
    write_pid(directory, rank)
    if rank == 1:
        pids_in(directory, world_size)  # every rank is up and running: now fail
        (Path(directory) / "raised_at").write_text(repr(time.time()))
        raise ValueError("rank 1 fails on purpose")
    time.sleep(30)


def rank_0_skips_all_reduce(rank, world_size, directory):
    write_pid(directory, rank)
    t = torch.ones(1)
    if rank != 0:
        dist.all_reduce(t)  # communication: rank 0 never joins, so this waits forever
    return rank


# ---- the failures ------------------------------------------------------------------------
def test_exception_raises_here_within_2_seconds_and_stops_the_others(tmp_path, capsys):
    with pytest.raises(RankError) as info:
        launch(fail_fast_on_rank_1, 3, tmp_path, timeout=60)
    raised_here = time.time()
    raised_on_rank = float((tmp_path / "raised_at").read_text())
    assert raised_here - raised_on_rank < 2.0
    message = str(info.value)
    assert info.value.ranks == [1] and isinstance(info.value, RuntimeError)
    assert "rank 1 of 3 raised" in message
    assert 'raise ValueError("rank 1 fails on purpose")' in message  # the rank's traceback
    assert "in fail_fast_on_rank_1" in message
    out = capsys.readouterr().out  # what the ranks printed before the error is not lost
    assert all(f"[rank {r}] rank {r} is up\n" in out for r in range(3))
    assert_gone(pids_in(tmp_path, 3, within=0))  # ranks 0 and 2 were sleeping for 30 s
    assert_no_rank_processes()


def test_a_rank_that_dies_is_named_with_its_exit_code():
    def dies(rank, world_size):
        if rank == 1:
            os._exit(3)
        time.sleep(30)

    with pytest.raises(RankError, match="rank 1 of 2 exited with code 3 before returning a result"):
        launch(dies, 2)
    assert_no_rank_processes()


def test_a_skipped_collective_times_out_naming_the_stuck_ranks(tmp_path):
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(rank_0_skips_all_reduce, 2, tmp_path, timeout=2)
    assert time.monotonic() - start >= 2.0   # it waited out the timeout before giving up
    message = str(info.value)
    assert info.value.ranks == [1] and isinstance(info.value, RankError)
    assert "rank(s) [1] of 2 were still running after timeout=2 s" in message
    assert "rank(s) [0] had finished" in message
    assert "skipped or added" in message and "timeout=" in message  # the likely fixes
    assert "rank 1 was here:" in message and "dist.all_reduce(t)" in message  # where it waits
    assert_gone(pids_in(tmp_path, 2, within=0))
    assert_no_rank_processes()
