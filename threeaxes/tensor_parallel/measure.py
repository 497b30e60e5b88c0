"""Measure a tensor-parallel step layer by layer: its collectives, its time, its stored activations.

    results = launch(tp_step, 2, cfg, batches, sequence_parallel=True)
    rows = comms_by_layer(results[0]["traces"][-1], rank=0)"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import torch

from threeaxes import trace as trace_module
from threeaxes.cost.network import bytes_sent_per_gpu
from threeaxes.dims import ParallelDims
from threeaxes.tensor_parallel.block import tensor_parallel_toy
from threeaxes.tensor_parallel.sequence import allreduce_sequence_parallel_grads, sequence_parallel_toy
from threeaxes.toy import ToyConfig, ToyTransformer, lm_loss
from threeaxes.trace import Event, Trace

SUBLAYERS = ("ln1", "attn", "ln2", "mlp")

__all__ = ["SUBLAYERS", "saved_bytes_by_module", "tp_step", "comms_by_layer", "comms_outside_layers"]


@contextlib.contextmanager
def saved_bytes_by_module(model: torch.nn.Module, names: Iterable[str]) -> Iterator[dict[str, dict[str, int]]]:
    """Count, per named submodule, the bytes autograd saves for backward while
    it runs forward (`torch.autograd.graph.saved_tensors_hooks`), and the bytes
    of its input.

    Yields {name: {"saved": bytes, "input": bytes}}, filled as the forward runs.
    Parameters are not counted (they are kept anyway), and a tensor saved twice
    in one module (q, k and v all keep their shared input) counts once.
    """
    names = list(names)
    counts = {name: {"saved": 0, "input": 0} for name in names}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[str, set[tuple[int, int | torch.SymInt, tuple[int, ...]]]] = {name: set() for name in names}
    inside: list[str] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
            for name in set(inside):  # a block and the sublayer inside it both count it
                if key not in seen[name]:
                    seen[name].add(key)
                    counts[name]["saved"] += t.numel() * t.element_size()
        return t

    def enter(name: str) -> Callable[[torch.nn.Module, tuple[Any, ...]], None]:
        def hook(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            inside.append(name)
            counts[name]["input"] += sum(a.numel() * a.element_size() for a in args
                                         if isinstance(a, torch.Tensor))
        return hook

    def leave(_module: torch.nn.Module, _args: tuple[Any, ...], _output: Any) -> None:
        inside.pop()

    handles: list[torch.utils.hooks.RemovableHandle] = []
    for name in names:
        module = model.get_submodule(name)
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield counts
    finally:
        for h in handles:
            h.remove()


def _sgd(model: torch.nn.Module, lr: float) -> None:
    # what torch.optim.SGD without momentum does; torch.optim's first import costs seconds per rank
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


def tp_step(rank: int, world_size: int, cfg: ToyConfig, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
            sequence_parallel: bool = False, lr: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """Train the toy on `batches` (one SGD step each) with tp = world_size.

    Returns, per rank: "losses" (one per step), "traces" (one Trace per step:
    a span per layer forward and backward, every collective, the optimizer),
    "grads" (the first step's gradients, this rank's shards), "state" (this
    rank's shard of the trained model), "activations" (first step,
    {"blocks.i.ln1": {"saved": bytes, "input": bytes}, ..., "blocks.i": ...}).

    * `tp_step` (a `launch` target) trains the toy with every block
      tensor-parallel (or sequence-parallel) over all the ranks, recording each
      step's trace with `trace.module_spans` (a forward and a backward span per
      layer) and, on the first step, the bytes autograd keeps for backward in
      each sublayer (`saved_bytes_by_module`).
    * `comms_by_layer` reads a trace: for each layer's forward and backward span,
      the collectives that ran inside it, their bytes (comms' convention: the
      whole tensor S), what they put on the wire per rank
      (`cost.network.bytes_sent_per_gpu`), and the span's time with and without
      them.
    """
    dims = ParallelDims.init(tp=world_size)
    full = ToyTransformer(cfg, seed=seed)
    model = (sequence_parallel_toy if sequence_parallel else tensor_parallel_toy)(full, dims)
    blocks = [f"blocks.{i}" for i in range(cfg.n_layers)]
    regions = blocks + [f"{b}.{part}" for b in blocks for part in SUBLAYERS]
    out: dict[str, Any] = {"losses": [], "traces": [], "grads": None, "state": None, "activations": None}
    for inputs, targets in batches:
        model.zero_grad(set_to_none=True)
        with trace_module.record() as t:
            with trace_module.module_spans(model), saved_bytes_by_module(model, regions) as held:
                loss = lm_loss(model(inputs), targets)
                loss.backward()
            if sequence_parallel:
                with trace_module.span("grad sync", module="sequence-parallel params"):
                    allreduce_sequence_parallel_grads(model, dims)
            if out["grads"] is None:
                # every parameter has a gradient after the backward just run
                out["grads"] = {n: cast(torch.Tensor, p.grad).detach().clone() for n, p in model.named_parameters()}
                out["activations"] = held
            with trace_module.span("optimizer"):
                _sgd(model, lr)
        out["losses"].append(loss.item())
        out["traces"].append(t)
    out["state"] = {n: v.detach().clone() for n, v in model.state_dict().items()}
    return out


def _inside(c: Event, span: Event) -> bool:
    return c.start >= span.start and c.end <= span.end


def comms_by_layer(trace: Trace, rank: int, layers: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One row per (layer, pass) compute span of `rank` in `trace`, in time order.

    Each row: "layer", "pass" ("forward"/"backward"), "seconds" (the span),
    "comm_seconds" and "compute_seconds" (the span without its collectives),
    "collectives" (the ops, in order), "count", "bytes" (S summed, comms'
    convention) and "wire_bytes" (what the ring algorithm sends per rank,
    `cost.network.bytes_sent_per_gpu`). `layers`: which layers (default every
    span with a module name, e.g. "blocks.0")."""
    spans = [e for e in trace.compute(rank=rank) if e.op in ("forward", "backward")
             and e.module is not None and (layers is None or e.module in layers)]
    comms = trace.comms(rank=rank)
    rows: list[dict[str, Any]] = []
    for span in sorted(spans, key=lambda e: e.start):
        mine = [c for c in comms if _inside(c, span)]
        comm_s = sum(c.seconds for c in mine)
        rows.append({"layer": span.module, "pass": span.op, "seconds": span.seconds,
                     "comm_seconds": comm_s, "compute_seconds": span.seconds - comm_s,
                     "collectives": [c.op for c in mine], "count": len(mine),
                     "bytes": sum(c.bytes for c in mine),
                     "wire_bytes": sum(bytes_sent_per_gpu(c.op, c.bytes, len(c.group)) for c in mine)})
    return rows


def comms_outside_layers(trace: Trace, rank: int, layers: Iterable[str]) -> list[Event]:
    """The collectives of `rank` that ran inside none of the given layers' spans
    (e.g. the sequence-parallel toy's gather before ln_f)."""
    spans = [e for e in trace.compute(rank=rank) if e.module in set(layers)]
    return [c for c in trace.comms(rank=rank) if not any(_inside(c, s) for s in spans)]
