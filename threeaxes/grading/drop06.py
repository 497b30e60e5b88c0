"""Reference checks for drop 6 (tensor parallelism's collectives, layer by layer).

Two exercises:

* `tp_wire_bytes_per_block(b, s, h, t, bytes_per_element, sequence_parallel)`:
  the bytes one GPU sends for the tp collectives of one block in one training
  step (forward and backward). `expected_wire_bytes` builds the answer from
  `threeaxes.cost.network.bytes_sent_per_gpu`, collective by collective;
  `wire_bytes_mistake` names the usual slips (forward only, the tensor size S
  instead of wire bytes, the missing (t-1)/t, an all-gather counted as an
  all-reduce).
* `sp_mlp_sublayer(x, shard, dims)`: the MLP half of a sequence-parallel block,
  written with the provided maps. `check_sp_mlp` runs on fresh ranks and
  compares its output and every gradient with one process.

Only plain values come back from the ranks: {"ok": bool, "message": str, "max_abs_diff": float}.
"""
from __future__ import annotations

import math

from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.grading import as_number

__all__ = ["SEQUENCE_PARALLEL_COLLECTIVES", "TENSOR_PARALLEL_COLLECTIVES", "expected_wire_bytes",
           "wire_bytes_mistake", "check_sp_mlp"]

# The tp collectives of one block in one step, each about one whole (b, s, h) activation.
# Plain TP (Megatron's g forward, f backward, once per sublayer, two sublayers):
TENSOR_PARALLEL_COLLECTIVES = {"forward": ("all_reduce",) * 2, "backward": ("all_reduce",) * 2}
# TP + SP (Korthikanti et al. 2022, figure 5): an all-gather and a reduce-scatter per
# sublayer forward, their conjugates backward.
SEQUENCE_PARALLEL_COLLECTIVES = {"forward": ("all_gather", "reduce_scatter") * 2,
                                 "backward": ("all_gather", "reduce_scatter") * 2}


def expected_wire_bytes(b, s, h, t, bytes_per_element, sequence_parallel, passes=("forward", "backward")):
    """Bytes one GPU sends (ring algorithms) for one block's tp collectives."""
    size = b * s * h * bytes_per_element  # S: one whole activation
    plan = SEQUENCE_PARALLEL_COLLECTIVES if sequence_parallel else TENSOR_PARALLEL_COLLECTIVES
    return sum(bytes_sent_per_gpu(op, size, t) for p in passes for op in plan[p])


def _same(a, b) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def wire_bytes_mistake(answer, b, s, h, t, bytes_per_element, sequence_parallel) -> str | None:
    """None when the answer is right; otherwise a message naming the mistake."""
    args = f"tp_wire_bytes_per_block({b}, {s}, {h}, {t}, {bytes_per_element}, {sequence_parallel})"
    got = as_number(answer, args)
    want = expected_wire_bytes(b, s, h, t, bytes_per_element, sequence_parallel)
    if _same(got, want):
        return None
    size = b * s * h * bytes_per_element
    n_collectives = 8 if sequence_parallel else 4
    if t == 1:
        return f"{args} = {got:g}: with t=1 there is no other rank, so nothing is sent"
    if _same(got, want / 2):
        return (f"{args} = {got:g}, half the answer: you counted only the forward collectives; "
                f"backward makes as many again (the conjugate of each map)")
    if _same(got, n_collectives * size) or _same(got, n_collectives * size / 2):
        return (f"{args} = {got:g}: you counted the tensor size S = b*s*h*bytes per collective; "
                f"the question asks what one GPU sends, which a ring collective makes a fraction "
                f"of S: (t-1)/t S for an all-gather or a reduce-scatter, 2(t-1)/t S for an all-reduce")
    if not sequence_parallel and (_same(got, 4 * 2 * size) or _same(got, 2 * 2 * size)):
        return (f"{args} = {got:g}: you counted 2 S per all-reduce; the ring sends 2(t-1)/t S, "
                f"you forgot the (t-1)/t factor")
    if sequence_parallel and (_same(got, 2 * want) or _same(got, want * 2 * t / (t - 1))):
        return (f"{args} = {got:g}: an all-gather or a reduce-scatter sends (t-1)/t S, half of "
                f"what an all-reduce of S sends; you counted each as an all-reduce")
    return f"{args} = {got:g} is not what one GPU sends per block per step"


# -- exercise 2: the MLP half of a sequence-parallel block ---------------------------

def _reference(cfg, batch, seed):
    """The MLP sublayer in one process, with random (nonzero) biases, its input and a
    fixed output weighting; the gradients of the loss sum(y * w)."""
    import torch

    from threeaxes.toy import Block

    gen = torch.Generator().manual_seed(seed)
    block = Block(cfg)
    with torch.no_grad():
        for p in list(block.ln2.parameters()) + list(block.mlp.parameters()):
            p.copy_(torch.randn(p.shape, generator=gen, dtype=cfg.dtype) * 0.3)
        block.ln2.weight.add_(1.0)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, generator=gen, dtype=cfg.dtype, requires_grad=True)
    w = torch.randn(batch, cfg.seq_len, cfg.d_model, generator=gen, dtype=cfg.dtype)
    y = x + block.mlp(block.ln2(x))
    (y * w).sum().backward()
    return block, x, w, y.detach()


def check_sp_mlp(rank, world_size, sp_mlp_sublayer, seq_len=8, batch=2, seed=0) -> dict:
    """On fresh ranks: the student's sequence-parallel MLP sublayer against one process."""
    import torch

    from threeaxes import comms
    from threeaxes.dims import ParallelDims
    from threeaxes.toy import ToyConfig

    dims = ParallelDims.init(tp=world_size)
    t, me = world_size, dims.coord("tp")
    cfg = ToyConfig(seq_len=seq_len, dtype=torch.float64)
    block, x, w, y = _reference(cfg, batch, seed)
    ln, mlp = block.ln2, block.mlp
    cuts = {"ln.weight": (ln.weight, None), "ln.bias": (ln.bias, None),
            "fc1.weight": (mlp.fc1.weight, 0), "fc1.bias": (mlp.fc1.bias, 0),
            "fc2.weight": (mlp.fc2.weight, 1), "fc2.bias": (mlp.fc2.bias, None)}
    shard = {k: (p.detach() if d is None else p.detach().chunk(t, d)[me]).clone().requires_grad_()
             for k, (p, d) in cuts.items()}
    x_mine = x.detach().chunk(t, 1)[me].clone().requires_grad_()
    where = f"rank {rank} of tp={t}"
    try:
        out = sp_mlp_sublayer(x_mine, shard, dims)
    except Exception as err:  # the student's code: report, do not crash the rank
        return {"ok": False, "message": f"{where}: sp_mlp_sublayer raised {type(err).__name__}: {err}",
                "max_abs_diff": math.inf}
    want = y.chunk(t, 1)[me]
    if not isinstance(out, torch.Tensor):
        return {"ok": False, "message": f"{where}: sp_mlp_sublayer should return a torch.Tensor, "
                f"got {type(out).__name__}", "max_abs_diff": math.inf}
    if tuple(out.shape) != tuple(want.shape):
        return {"ok": False, "message": f"{where}: the output has shape {tuple(out.shape)}; it should be "
                f"this rank's slice of the sequence, {tuple(want.shape)}: reduce-scatter fc2's partial "
                f"sums back to the slice", "max_abs_diff": math.inf}
    diff = (out.detach() - want).abs().max().item()
    if diff > 1e-10:
        extra = want + (t - 1) * shard["fc2.bias"].detach()
        if (out.detach() - extra).abs().max().item() < 1e-10:
            message = (f"{where}: the output is off by exactly {t - 1} times fc2's bias: the bias is "
                       f"added on every rank before the reduce-scatter sums them; add it once, after")
        else:
            message = (f"{where}: the output differs from one process by {diff:.2e}; each rank holds "
                       f"only s/t positions, so all-gather the LayerNorm output before fc1 "
                       f"(gather_from_sequence_region) and reduce-scatter fc2's partial sums "
                       f"(reduce_scatter_to_sequence_region)")
        return {"ok": False, "message": message, "max_abs_diff": diff}
    if not out.requires_grad:
        return {"ok": False, "message": f"{where}: the output carries no gradient; compute it with torch "
                f"operations and the provided maps (no torch.no_grad, no .detach())", "max_abs_diff": diff}
    (out * w.chunk(t, 1)[me]).sum().backward()
    grads = {"x": (x_mine.grad, x.grad.chunk(t, 1)[me])}
    for k, (p, d) in cuts.items():
        got = shard[k].grad
        if got is not None and d is None:
            # LayerNorm and fc2.bias saw this rank's positions only: sum over tp
            got = comms.all_reduce(got.clone(), "tp", dims=dims)
        grads[k] = (got, p.grad if d is None else p.grad.chunk(t, d)[me])
    for name, (got, ref) in grads.items():
        if got is None:
            return {"ok": False, "message": f"{where}: {name} got no gradient; use every tensor of `shard` "
                    f"and the provided maps", "max_abs_diff": diff}
        gdiff = (got - ref).abs().max().item()
        if gdiff > 1e-10:
            return {"ok": False, "message": f"{where}: the forward is right but the gradient of {name} "
                    f"is off by {gdiff:.2e}: a collective called directly has no backward; use the maps, "
                    f"whose backward runs the conjugate collective", "max_abs_diff": gdiff}
        diff = max(diff, gdiff)
    return {"ok": True, "message": f"{where}: output and every gradient equal one process",
            "max_abs_diff": diff}
