"""Tensor parallelism (threeaxes.tensor_parallel) next to PyTorch's parallelize_module:
tp=2 on 2 gloo ranks, one launch, the same weights; the block's output and gradients, and
two training steps, equal theirs and one process."""
from __future__ import annotations

import pytest
import torch
from tensor_parallel_helpers import BATCH, CFG, LR, STEPS, launch_by_value, toy_batches

from threeaxes.tensor_parallel import gather_block_state, gather_model_state, tensor_parallel_toy
from threeaxes.toy import ToyTransformer, make_batch, train_steps


def test_colwise_parallel_hands_back_plain_local_tensors_by_default():
    """The toy's attention reads its local head count from q's output width, which
    works under parallelize_module only if ColwiseParallel returns the local
    torch.Tensor, not a DTensor (use_local_output=True)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    assert ColwiseParallel().use_local_output is True
    assert RowwiseParallel().use_local_output is True


def _ours_and_torchs(rank, world_size, cfg, steps, batch, lr):
    """One rank: our TP toy next to parallelize_module's (ColwiseParallel on q, k, v,
    fc1; RowwiseParallel on proj, fc2; the rest replicated), same weights."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from threeaxes.dims import ParallelDims

    dims = ParallelDims.init(tp=world_size)
    mesh = dims.mesh["tp"]  # the layout's DeviceMesh is PyTorch's own: its tp axis feeds parallelize_module
    plan = {}
    for i in range(cfg.n_layers):
        plan.update({f"blocks.{i}.attn.q": ColwiseParallel(), f"blocks.{i}.attn.k": ColwiseParallel(),
                     f"blocks.{i}.attn.v": ColwiseParallel(), f"blocks.{i}.attn.proj": RowwiseParallel(),
                     f"blocks.{i}.mlp.fc1": ColwiseParallel(), f"blocks.{i}.mlp.fc2": RowwiseParallel()})
    theirs = parallelize_module(ToyTransformer(cfg, seed=0), mesh, plan)
    ours = tensor_parallel_toy(ToyTransformer(cfg, seed=0), dims)

    def full(t):  # communication (theirs): all-gather a sharded DTensor to the whole tensor
        return t.full_tensor() if isinstance(t, DTensor) else t.detach().clone()

    out = {}
    # one block, the same input and upstream gradient on both
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, dtype=cfg.dtype, generator=torch.Generator().manual_seed(3))
    upstream = torch.randn(x.shape, dtype=cfg.dtype, generator=torch.Generator().manual_seed(4))
    for who, model in (("ours", ours), ("theirs", theirs)):
        xi = x.clone().requires_grad_()
        y = model.blocks[0](xi)
        assert type(y) is torch.Tensor  # use_local_output=True: plain tensors leave the block
        y.backward(upstream)
        out[who] = {"y": y.detach(), "x.grad": xi.grad,
                    "grads": {n: full(p.grad) for n, p in model.blocks[0].named_parameters()}}
        model.zero_grad()

    out["ours"]["losses"] = train_steps(ours, [make_batch(cfg, batch, seed=s) for s in range(steps)], lr=lr)
    out["theirs"]["losses"] = train_steps(theirs, [make_batch(cfg, batch, seed=s) for s in range(steps)], lr=lr)
    out["ours"]["state"] = ours.state_dict()
    out["theirs"]["state"] = {n: full(p) for n, p in theirs.state_dict().items()}
    return out


@pytest.fixture(scope="module")
def torch_run():
    tp = 2
    results = launch_by_value(_ours_and_torchs, tp, CFG, STEPS, BATCH, LR)
    reference = ToyTransformer(CFG, seed=0)
    losses = train_steps(reference, toy_batches(), lr=LR, optimizer="sgd")
    return tp, results, reference, losses


@pytest.mark.slow
def test_block_forward_and_gradients_equal_parallelize_modules(torch_run):
    tp, results, reference, _ = torch_run
    # the block's output and input gradient: the same on every rank, for both
    for r in results:
        torch.testing.assert_close(r["ours"]["y"], r["theirs"]["y"], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(r["ours"]["x.grad"], r["theirs"]["x.grad"], rtol=1e-12, atol=1e-14)
    # parameter gradients: our shards gathered, theirs already gathered (full_tensor)
    ours = gather_block_state([r["ours"]["grads"] for r in results])
    for name, value in results[0]["theirs"]["grads"].items():
        torch.testing.assert_close(ours[name], value, rtol=1e-12, atol=1e-14, msg=lambda m: f"{name}: {m}")


@pytest.mark.slow
def test_two_steps_with_parallelize_module_equal_ours_and_one_process(torch_run):
    tp, results, reference, losses = torch_run
    ours = gather_model_state([r["ours"]["state"] for r in results])
    for r in results:
        assert r["ours"]["losses"] == pytest.approx(losses, rel=1e-12, abs=0)
        assert r["theirs"]["losses"] == pytest.approx(losses, rel=1e-12, abs=0)
        for name, value in reference.state_dict().items():
            torch.testing.assert_close(r["theirs"]["state"][name], value, rtol=1e-12, atol=1e-14,
                                       msg=lambda m: f"parallelize_module, {name}: {m}")
            torch.testing.assert_close(ours[name], r["theirs"]["state"][name], rtol=1e-12, atol=1e-14,
                                       msg=lambda m: f"ours vs parallelize_module, {name}: {m}")
