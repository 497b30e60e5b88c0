"""Process groups freed and clean exits: layouts replaced in one run free their groups,
repeated launches leave no threads or file descriptors behind, and the sharding and
data-parallel runs print nothing on the ranks' stderr (no "terminate called without an
active exception"), which a probe shows really reaches the test."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import cloudpickle
import pytest

from threeaxes.launch import launch

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self")

LAYOUTS = [dict(dp=2, tp=2), dict(dp=2, pp=2), dict(tp=2, pp=2)]


def _counts():
    """(threads, open file descriptors) of this process, C++ threads included."""
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def _relayout(rank, world_size, times):
    import torch

    from threeaxes import comms
    from threeaxes.dims import ParallelDims

    first = ParallelDims.init(**LAYOUTS[0])
    comms.all_reduce(torch.ones(1), "dp")
    before = _counts()
    for i in range(times):
        dims = ParallelDims.init(**LAYOUTS[(i + 1) % len(LAYOUTS)])
        axis = "tp" if dims.tp > 1 else "dp"
        # communication: one all-reduce on the new layout, so its groups are really in use
        comms.all_reduce(torch.ones(1), axis)
    ParallelDims.init(**LAYOUTS[0])
    after = _counts()
    try:
        first.group("dp")
        replaced = None
    except RuntimeError as exc:
        replaced = str(exc)
    return before, after, replaced


@pytest.mark.slow
def test_a_layout_replaced_in_one_run_frees_its_groups():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for before, after, replaced in launch(_relayout, 4, 21, timeout=120):
        # 21 more layouts, each making dp, tp and pp groups: none of them left behind
        assert after == before
        assert replaced.startswith("this layout's process groups were freed when a later "
                                   "ParallelDims.init replaced it")


def _one_layout(rank, world_size):
    import torch

    from threeaxes import comms
    from threeaxes.dims import ParallelDims

    ParallelDims.init(dp=world_size)
    # communication: one all-reduce over dp, so the group is really in use
    return comms.all_reduce(torch.ones(1), "dp").item()


@pytest.mark.slow
def test_twenty_launches_leave_no_threads_or_descriptors_behind():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    launch(_one_layout, 2)   # warm: the forkserver and its pipes exist from now on
    before = _counts()
    for _ in range(20):
        assert launch(_one_layout, 2) == [2.0, 2.0]
    assert _counts() == before


SCRIPT = textwrap.dedent('''
    import torch
    from threeaxes.launch import launch

    def run(rank, world_size, layout):
        from threeaxes import sharding
        from threeaxes.data_parallel import DataParallel, average_gradients
        from threeaxes.dims import ParallelDims
        from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss, make_batch

        cfg = ToyConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=2, seq_len=8)
        inputs, targets = make_batch(cfg, 4, seed=rank)
        for stage in ("dp", "zero1", "zero2", "zero3", "zero3_prefetch"):
            dims = ParallelDims.init(dp=world_size) if layout else None
            model = ToyTransformer(cfg, seed=0)
            if stage == "dp":
                wrapped = DataParallel(model, 1024, dims)
                lm_loss(wrapped(inputs), targets).backward()
                wrapped.finish_gradient_synchronization()
                average_gradients(model, dims)
                continue
            if stage == "zero1":
                opt = sharding.ZeroOptimizer(model.parameters(), torch.optim.AdamW, dims, lr=1e-3)
            elif stage == "zero2":
                opt = sharding.Zero2Optimizer(model.parameters(), torch.optim.AdamW, dims, lr=1e-3)
            else:
                for block in model.blocks:
                    sharding.fully_shard(block, dims, prefetch=stage.endswith("prefetch"))
                sharding.fully_shard(model, dims, prefetch=stage.endswith("prefetch"))
                opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            for _ in range(2):
                opt.zero_grad()
                lm_loss(model(inputs), targets).backward()
                if stage == "zero1":
                    for p in model.parameters():
                        # communication: average the gradients over every rank (plain DP)
                        torch.distributed.all_reduce(p.grad)
                opt.step()
            if stage == "zero1":
                opt.consolidate_state_dict(to=0)
        return True

    def probe(rank, world_size):
        import os

        if rank == 1:   # past Python's sys.stderr, as C++ writes "terminate called ..."
            os.write(2, b"fd 2 of rank 1\\n")
        return True

    if __name__ == "__main__":
        assert launch(run, 2, False) == [True, True]   # the default process group
        assert launch(run, 2, True) == [True, True]    # a ParallelDims layout, replaced 5 times
        assert launch(probe, 2) == [True, True]        # the one line stderr must hold
''')


@pytest.mark.slow
def test_the_sharding_runs_print_nothing_on_stderr(tmp_path):
    script = tmp_path / "sharding_runs.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "THREEAXES_PRESTART": "0"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # the ranks' own file descriptor 2 reaches this pipe (the probe's line is here), and
    # nothing else does: no warning, no "terminate called without an active exception"
    assert done.stderr == "fd 2 of rank 1\n"
    assert done.stdout == ""
