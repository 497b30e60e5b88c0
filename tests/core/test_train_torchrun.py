"""Beyond one machine: the 3D trainer runs unchanged under torchrun.

Two torchrun "nodes" on this machine (--nnodes 2 --nproc-per-node 4, a static
rendezvous on localhost, gloo) run the same `train_3d` call a notebook makes
with `launch(train_3d, 8, ...)`, and end with exactly the same parameters.
"""
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
    import os, sys
    import torch
    from threeaxes.launch import launch
    from threeaxes.toy import ToyConfig, make_batch
    from threeaxes.train import full_state, train_3d

    if __name__ == "__main__":
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


def test_two_torchrun_nodes_train_exactly_like_the_notebook_launch(tmp_path):
    script, out = tmp_path / "train3d.py", tmp_path / "state.pt"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    port = _free_port()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "4",
         "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
         str(script), str(out)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    try:
        logs = [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(log[-3000:] for log in logs)

    cfg = ToyConfig(dtype=torch.float64)
    batches = [make_batch(cfg, 8, seed=step) for step in range(2)]
    notebook = full_state(launch(train_3d, 8, cfg, batches, dp=2, tp=2, pp=2, m=2, lr=0.1, timeout=120))
    torchrun = torch.load(out)
    assert set(torchrun) == set(notebook)
    for name in notebook:
        assert torch.equal(torchrun[name], notebook[name]), name
