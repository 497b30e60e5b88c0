"""The rules a (dp, tp, pp, ...) configuration must follow, with errors that
say what to change.

- dp * tp * pp equals the number of GPUs.
- tp divides the attention heads (each rank takes whole heads: Shoeybi et al.
  2019, Section 3) and, with grouped-query attention, the key/value heads.
- tp stays inside a node unless told otherwise (Narayanan et al. 2021,
  Section 3.2, Takeaway #1: TP's all-reduces need NVLink).
- pp divides the layers (equal stages), pp * v when interleaving, and the
  interleaved schedule needs the micro-batch count to be a multiple of pp
  (Narayanan et al. 2021, Section 2.2.2).
- the global batch splits evenly over dp replicas and each replica's share
  into micro-batches.
- ZeRO stages 2 and 3 are not combined with pipelining (DeepSpeed's pipeline
  engine allows ZeRO-1 only: sharded gradients would have to be reduced after
  every micro-batch).
"""
from __future__ import annotations

from .activations import RECOMPUTE

__all__ = ["divisors", "fmt_choices", "valid_tp", "check_model_split", "check_config"]


def divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def fmt_choices(values) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}"


def _positive(name, value):
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def valid_tp(model, cluster, allow_tp_across_nodes: bool = False) -> list:
    """Every tp that divides the GPUs and the heads and, unless allowed, fits a node."""
    out = []
    for t in divisors(cluster.n_gpus):
        if model.n_heads % t or model.kv_heads % t:
            continue
        if not allow_tp_across_nodes and (t > cluster.gpus_per_node or cluster.gpus_per_node % t):
            continue
        out.append(t)
    return out


def check_model_split(model, tp: int, pp: int, *, zero_stage: int = 0,
                      tp_choices=None) -> None:
    """tp divides the heads (and key/value heads), pp the layers; ZeRO-2/3 only
    without pipelining. ``tp_choices`` is what the error suggests (default:
    every tp that divides the heads)."""
    _positive("tp", tp)
    _positive("pp", pp)
    if tp_choices is None:
        tp_choices = [t for t in divisors(model.n_heads) if model.kv_heads % t == 0]
    if model.n_heads % tp:
        raise ValueError(f"tp={tp} does not divide n_heads={model.n_heads}; "
                         f"choose tp in {fmt_choices(tp_choices)}")
    if model.kv_heads % tp:
        raise ValueError(f"tp={tp} does not divide n_kv_heads={model.kv_heads}; "
                         f"choose tp in {fmt_choices(tp_choices)}")
    if model.n_layers % pp:
        raise ValueError(f"pp={pp} does not divide n_layers={model.n_layers}; "
                         f"choose pp in {fmt_choices(divisors(model.n_layers))}")
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage!r}; choose zero_stage in {{0, 1, 2, 3}}")
    if zero_stage >= 2 and pp > 1:
        raise ValueError(f"zero_stage={zero_stage} with pp={pp}: sharding gradients or "
                         "parameters fights pipeline micro-batching (DeepSpeed's pipeline "
                         "engine allows only ZeRO-1); choose zero_stage in {0, 1} or pp=1")


def check_config(model, cluster, global_batch: int, *, dp, tp, pp, micro_batch,
                 micro_batches, zero_stage, recompute, virtual_stages,
                 allow_tp_across_nodes) -> int:
    """Raise ValueError, saying what to change, unless the configuration is
    valid; return the micro-batch size."""
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp), ("virtual_stages", virtual_stages)):
        _positive(name, value)
    n, v = cluster.n_gpus, virtual_stages
    if dp * tp * pp != n:
        hint = f"; try dp={n // (tp * pp)}" if n % (tp * pp) == 0 else ""
        raise ValueError(f"dp({dp}) * tp({tp}) * pp({pp}) = {dp * tp * pp} != "
                         f"n_gpus({n}){hint}")
    good_tp = valid_tp(model, cluster, allow_tp_across_nodes)
    check_model_split(model, tp, pp, zero_stage=zero_stage, tp_choices=good_tp)
    if not allow_tp_across_nodes and (tp > cluster.gpus_per_node or cluster.gpus_per_node % tp):
        raise ValueError(f"tp={tp} does not fit in one node of {cluster.gpus_per_node} GPUs; "
                         f"choose tp in {fmt_choices(good_tp)} or pass "
                         "allow_tp_across_nodes=True")
    if global_batch % dp:
        raise ValueError(f"global_batch={global_batch} does not split evenly over "
                         f"dp={dp}; choose a global batch that is a multiple of {dp}")
    per_replica = global_batch // dp
    mbs = micro_batch
    if mbs is None:
        if micro_batches is None:
            raise ValueError("give micro_batch (sequences per micro-batch) or micro_batches")
        if per_replica % micro_batches:
            raise ValueError(f"micro_batches={micro_batches} does not divide the per-replica "
                             f"batch {per_replica} (global_batch={global_batch} / dp={dp}); "
                             f"choose micro_batches in {fmt_choices(divisors(per_replica))}")
        mbs = per_replica // micro_batches
    if isinstance(mbs, bool) or int(mbs) != mbs or mbs < 1 or per_replica % mbs:
        raise ValueError(f"micro_batch={mbs} does not divide the per-replica batch "
                         f"{per_replica} (global_batch={global_batch} / dp={dp}); "
                         f"choose micro_batch in {fmt_choices(divisors(per_replica))}")
    m = per_replica // mbs
    if micro_batches is not None and micro_batches != m:
        raise ValueError(f"micro_batch={mbs} gives {m} micro-batches, not {micro_batches}; "
                         "give one of the two")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r}; choose recompute in {set(RECOMPUTE)}")
    if v > 1:
        if pp == 1:
            raise ValueError(f"virtual_stages={v} needs pipeline parallelism; "
                             "use virtual_stages=1 or pp > 1")
        if model.n_layers % (pp * v):
            raise ValueError(f"n_layers={model.n_layers} does not split into pp*virtual_stages"
                             f"={pp * v} chunks; choose virtual_stages in "
                             f"{fmt_choices(divisors(model.n_layers // pp))}")
        if m % pp:
            raise ValueError(f"{m} micro-batches is not a multiple of pp={pp}; the interleaved "
                             "schedule needs it (change micro_batch or virtual_stages=1)")
    return int(mbs)
