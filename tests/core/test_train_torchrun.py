"""Beyond one machine: launch and the 3D trainer run unchanged under torchrun.

Two torchrun "nodes" on this machine (--nnodes 2 --nproc-per-node 4, a static
rendezvous on localhost, gloo), one run read by both tests: `launch(fn, 8, ...)`
runs fn in the torchrun processes themselves, on the real group, and refuses a
world size torchrun did not start; the same `train_3d` call a notebook makes with
`launch(train_3d, 8, ...)` ends with exactly the same parameters.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from threeaxes.launch import launch
from threeaxes.toy import ToyConfig, make_batch
from threeaxes.train import full_state, train_3d

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SCRIPT = """
    import json, os, sys
    import torch, torch.distributed as dist
    from threeaxes.launch import launch
    from threeaxes.toy import ToyConfig, make_batch
    from threeaxes.train import full_state, train_3d

    def fn(rank, world_size, scale):
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        return {"rank": rank, "sum": t.item() * scale, "pid": os.getpid()}

    if __name__ == "__main__":
        results = launch(fn, 8, 10.0)
        try:
            launch(fn, 3, 1.0)
            mismatch = None
        except ValueError as exc:
            mismatch = str(exc)
        # one file per rank: the ranks' stdout lines would interleave in torchrun's pipe
        with open(f"result-{os.environ['RANK']}.json", "w") as out:
            json.dump({"rank": int(os.environ["RANK"]), "pid": os.getpid(),
                       "results": results, "mismatch": mismatch,
                       "backend": dist.get_backend()}, out)

        cfg = ToyConfig(dtype=torch.float64)
        batches = [make_batch(cfg, 8, seed=step) for step in range(2)]
        results = launch(train_3d, 8, cfg, batches, dp=2, tp=2, pp=2, m=2, lr=0.1)
        if int(os.environ["RANK"]) == 0:
            torch.save(full_state(results), sys.argv[1])
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The folder the 8 torchrun ranks wrote into: their reports and rank 0's trained state."""
    tmp_path = tmp_path_factory.mktemp("torchrun")
    script, out = tmp_path / "train3d.py", tmp_path / "state.pt"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    port = _free_port()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "4",
         "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
         # the agents check their ranks once a second, not every 0.1 s (torchrun's default):
         # on 2 busy cores that polling cost about 7 CPU-s of the run's 55
         "--monitor-interval", "1", str(script), str(out)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    try:
        logs = [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(log[-3000:] for log in logs)
    return tmp_path


def test_under_torchrun_fn_runs_on_the_real_group(two_nodes):
    reports = [json.loads((two_nodes / f"result-{rank}.json").read_text()) for rank in range(8)]
    assert [r["rank"] for r in reports] == list(range(8))
    pids = [r["pid"] for r in reports]
    for report in reports:
        # every rank gets every rank's result, computed in the torchrun processes themselves:
        # the sum of rank + 1 over 8 ranks is 36, times the scale 10
        assert report["results"] == [{"rank": rank, "sum": 360.0, "pid": pids[rank]} for rank in range(8)]
        assert "torchrun started WORLD_SIZE=8" in report["mismatch"]
        # each node holds 4 ranks: nccl where it has a GPU for each
        assert report["backend"] == ("nccl" if torch.cuda.device_count() >= 4 else "gloo")


def test_two_torchrun_nodes_train_exactly_like_the_notebook_launch(two_nodes):
    cfg = ToyConfig(dtype=torch.float64)
    batches = [make_batch(cfg, 8, seed=step) for step in range(2)]
    notebook = full_state(launch(train_3d, 8, cfg, batches, dp=2, tp=2, pp=2, m=2, lr=0.1, timeout=120))
    torchrun = torch.load(two_nodes / "state.pt")
    assert set(torchrun) == set(notebook)
    for name in notebook:
        assert torch.equal(torchrun[name], notebook[name]), name
