"""The rules a (dp, tp, pp, ...) configuration must follow, with errors that
say what to change."""
from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from .activations import RECOMPUTE
from .context import context_violations
from .experts import expert_violations

if TYPE_CHECKING:
    from .presets import Cluster, Model

__all__ = ["Violation", "violations", "divisors", "fmt_choices", "valid_tp", "check_model_split",
           "check_config", "INTERLEAVE_RULES", "interleave_group"]

# which micro-batch groups an interleaved schedule may use (`violations`' docstring)
INTERLEAVE_RULES = {
    "flexible": "Megatron Core >= 0.10 with --microbatch-group-size-per-virtual-pipeline-stage",
    "group_p": "Megatron-LM's default group of p (its only one before Megatron Core 0.10)",
}


def interleave_group(pp: int, micro_batches: int, rule: str = "flexible") -> int | None:
    """The micro-batch group N an interleaved schedule on ``pp`` stages uses for
    ``micro_batches``, or None when the rule refuses that m.

    ``"group_p"``: N = p, so m must be a multiple of p (Narayanan et al. 2021,
    Section 2.2.2; Megatron-LM's default). ``"flexible"``: the smallest N with
    p <= N <= m and m % N == 0 or m % N >= p (Megatron Core >= 0.10), the one
    that keeps the fewest micro-batches in flight; any m >= p has one (N = m).
    """
    if rule not in INTERLEAVE_RULES:
        raise ValueError(f"interleave={rule!r}; choose interleave in {set(INTERLEAVE_RULES)}")
    return _group(int(pp), int(micro_batches), rule)


@lru_cache(maxsize=4096)
def _group(p: int, m: int, rule: str) -> int | None:
    if rule == "group_p":
        return p if m % p == 0 else None
    for n in range(p, m + 1):
        if m % n == 0 or m % n >= p:
            return n
    return None


def divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def fmt_choices(values: Iterable[object]) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}"


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def valid_tp(model: Model, cluster: Cluster, allow_tp_across_nodes: bool = False) -> list:
    """Every tp that divides the GPUs and the heads and, unless allowed, fits a node."""
    out = []
    for t in divisors(cluster.n_gpus):
        if model.n_heads % t or model.kv_heads % t:
            continue
        if not allow_tp_across_nodes and (t > cluster.gpus_per_node or cluster.gpus_per_node % t):
            continue
        out.append(t)
    return out


class Violation(NamedTuple):
    """One broken rule of a configuration: which rule, and a message with the
    numbers and what to change."""
    rule: str
    message: str


def _split_violations(model: Model, tp: int, pp: int, zero_stage: int, tp_choices: Iterable[int],
                      allow_sharded_pp: bool = False, suggest_flags: bool = True) -> list:
    found = []
    if model.n_heads % tp:
        found.append(Violation("tp_heads", f"tp={tp} does not divide n_heads={model.n_heads}; "
                                           f"choose tp in {fmt_choices(tp_choices)}"))
    if model.kv_heads != model.n_heads and model.kv_heads % tp:
        found.append(Violation("tp_kv_heads", f"tp={tp} does not divide n_kv_heads={model.kv_heads}; "
                                              f"choose tp in {fmt_choices(tp_choices)}"))
    if model.n_layers % pp:
        found.append(Violation("pp_layers", f"pp={pp} does not divide n_layers={model.n_layers}; "
                                            f"choose pp in {fmt_choices(divisors(model.n_layers))}"))
    if zero_stage not in (0, 1, 2, 3):
        found.append(Violation("zero_stage", f"zero_stage={zero_stage!r}; choose zero_stage in "
                                             "{0, 1, 2, 3}"))
    elif zero_stage >= 2 and pp > 1 and not allow_sharded_pp:
        flag = " (or pass allow_sharded_pp=True)" if suggest_flags else ""
        found.append(Violation("zero_pp", f"zero_stage={zero_stage} with pp={pp}: this planner follows "
                                          "DeepSpeed's rule that pipelining goes with ZeRO-1 at most "
                                          "(its pipeline engine would have to reduce sharded gradients "
                                          "after every micro-batch; FSDP with pipelining, as in Llama 3, "
                                          "is another framework's choice); choose zero_stage in "
                                          f"{{0, 1}} or pp=1{flag}"))
    return found


def _raise_all(found: list[Violation]) -> None:
    """One ValueError that names every violation (the first alone when there is one)."""
    if len(found) == 1:
        raise ValueError(found[0].message)
    if found:
        raise ValueError(f"{len(found)} problems with this configuration:\n"
                         + "\n".join(f"- {v.message}" for v in found))


def check_model_split(model: Model, tp: int, pp: int, *, zero_stage: int = 0,
                      tp_choices: Iterable[int] | None = None, allow_sharded_pp: bool = False) -> None:
    """tp divides the heads (and key/value heads), pp the layers; ZeRO-2/3 only
    without pipelining (DeepSpeed's rule) unless ``allow_sharded_pp``.
    ``tp_choices`` is what the error suggests (default: every tp that divides
    the heads). Raises ValueError naming every problem."""
    _positive("tp", tp)
    _positive("pp", pp)
    if tp_choices is None:
        tp_choices = [t for t in divisors(model.n_heads) if model.kv_heads % t == 0]
    _raise_all(_split_violations(model, tp, pp, zero_stage, tp_choices, allow_sharded_pp))


def violations(model: Model, cluster: Cluster, global_batch: int, *, dp: int, tp: int, pp: int,
               micro_batch: int | None = None, micro_batches: int | None = None, zero_stage: int = 0,
               recompute: str = "none", virtual_stages: int = 1, allow_tp_across_nodes: bool = False,
               suggest_flags: bool = True,
               allow_sharded_pp: bool = False, interleave: str = "flexible", cp: int = 1,
               ep: int = 1, etp: int | None = None, cp_mode: str = "ring",
               seq_len: int | None = None, flash_attention: bool = True,
               sequence_parallel: bool = False) -> list:
    """Every rule the configuration breaks, as `Violation`s ([] when it follows them all).

    Rules (below): "gpus", "tp_heads", "tp_kv_heads", "tp_node",
    "pp_layers", "zero_stage", "zero_pp", "batch_dp", "micro_batch",
    "recompute", "interleave"; with context parallelism (``cp`` > 1, the
    sequence of ``seq_len``, default the model's, split ``cp_mode``'s way)
    ``context.context_violations``'s "cp_seq" and "cp_heads" and "cp_flash"
    (Megatron-LM's context parallelism runs on fused attention, which never
    stores the scores: ``flash_attention``); with experts (``ep``, ``etp``:
    default tp) ``experts.expert_violations``'s "ep_moe", "ep_experts" and
    "ep_fold", and "ep_sp": with tp > 1 Megatron Core needs sequence parallelism
    for expert parallelism (its MoE README). dp * tp * cp * pp = GPUs. Values that
    are not positive integers are not a configuration at all: they raise
    ValueError. `suggest_flags=False` leaves out the hints to pass
    allow_tp_across_nodes or allow_sharded_pp (a student's configuration has no
    such key: the rule is the point).

    - dp * tp * pp equals the number of GPUs.
    - tp divides the attention heads (each rank takes whole heads: Shoeybi et al.
      2019, Section 3) and, with grouped-query attention, the key/value heads.
    - tp stays inside a node unless told otherwise (Narayanan et al. 2021,
      Section 3.2, Takeaway #1: TP's all-reduces need NVLink).
    - pp divides the layers (equal stages), pp * v when interleaving, and the
      interleaved schedule needs micro-batches it can move through each chunk in
      groups (``interleave_group``). Which m it accepts is a framework's rule:
      Megatron-LM sends groups of N micro-batches, and since Megatron Core 0.10
      (``--microbatch-group-size-per-virtual-pipeline-stage``,
      ``ModelParallelConfig.microbatch_group_size_per_vp_stage``) N may be any
      value with p <= N <= m and m % N == 0 or m % N >= p
      (``megatron/core/pipeline_parallel/schedules.py``,
      ``forward_backward_pipelining_with_interleaving``): every m >= p runs
      (``interleave="flexible"``, the planner's default). Its default N is p, the
      only group before Core 0.10 and the rule of Narayanan et al. 2021, Section
      2.2.2: m a multiple of p (``interleave="group_p"``). PyTorch's
      ScheduleInterleaved1F1B has a third rule (max(1, m // p) equal rounds,
      ``threeaxes.pipeline.schedules.interleaved_group``).
    - the global batch splits evenly over dp replicas and each replica's share
      into micro-batches.
    - ZeRO stages 2 and 3 are not combined with pipelining unless asked
      (``allow_sharded_pp``). This is DeepSpeed's rule, not a law: its pipeline
      engine allows ZeRO-1 only, since sharded gradients would have to be reduced
      after every micro-batch. Other frameworks combine them: Llama 3 was trained
      with FSDP and pipelining together (Dubey et al. 2024, Section 3.3.2), and
      torchtitan composes FSDP2 with PyTorch's pipelining.
    """
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp), ("virtual_stages", virtual_stages),
                        ("cp", cp), ("ep", ep)):
        _positive(name, value)
    n, v = cluster.n_gpus, virtual_stages
    found = []
    if cp == 1 and dp * tp * pp != n:
        hint = f"; try dp={n // (tp * pp)}" if n % (tp * pp) == 0 else ""
        found.append(Violation("gpus", f"dp({dp}) * tp({tp}) * pp({pp}) = {dp * tp * pp} != "
                                       f"n_gpus({n}){hint}"))
    elif cp > 1 and dp * tp * cp * pp != n:
        hint = f"; try dp={n // (tp * cp * pp)}" if n % (tp * cp * pp) == 0 else ""
        found.append(Violation("gpus", f"dp({dp}) * tp({tp}) * cp({cp}) * pp({pp}) = "
                                       f"{dp * tp * cp * pp} != n_gpus({n}){hint}"))
    if cp > 1:
        found += [Violation(*x) for x in context_violations(
            model.n_heads, model.kv_heads, model.seq_len if seq_len is None else seq_len,
            cp=cp, tp=tp, mode=cp_mode)]
        if not flash_attention:
            found.append(Violation("cp_flash", f"cp={cp} needs memory-efficient attention "
                                               "(Megatron-LM's context parallelism runs on fused "
                                               "attention); use flash_attention=True or cp=1"))
    found += [Violation(*x) for x in expert_violations(getattr(model, "moe", None), ep=ep,
                                                       etp=tp if etp is None else etp, tp=tp,
                                                       cp=cp, dp=dp)]
    if ep > 1 and tp > 1 and not sequence_parallel:
        found.append(Violation("ep_sp", f"ep={ep} with tp={tp} needs sequence parallelism "
                                        "(Megatron Core's rule for MoE with tensor parallelism); "
                                        "use sequence_parallel=True or tp=1"))
    good_tp = valid_tp(model, cluster, allow_tp_across_nodes)
    found += _split_violations(model, tp, pp, zero_stage, good_tp, allow_sharded_pp, suggest_flags)
    if not allow_tp_across_nodes and (tp > cluster.gpus_per_node or cluster.gpus_per_node % tp):
        flag = " or pass allow_tp_across_nodes=True" if suggest_flags else ""
        g = cluster.gpus_per_node
        # two ways to break the rule: a group larger than a node, or one that straddles two
        broken = (f"does not fit in one node of {g} GPUs" if tp > g else
                  f"does not divide the {g} GPUs of a node, so some tp groups would straddle two nodes")
        found.append(Violation("tp_node", f"tp={tp} {broken}; choose tp in {fmt_choices(good_tp)}{flag}"))
    if recompute not in RECOMPUTE:
        found.append(Violation("recompute", f"recompute={recompute!r}; choose recompute in "
                                            f"{set(RECOMPUTE)}"))
    m = None
    if global_batch % dp:
        found.append(Violation("batch_dp", f"global_batch={global_batch} does not split evenly over "
                                           f"dp={dp}; choose a global batch that is a multiple of {dp}"))
    else:
        mbs, problem = _micro_batch(global_batch // dp, global_batch, dp, micro_batch, micro_batches)
        if problem:
            found.append(Violation("micro_batch", problem))
        else:
            assert mbs is not None   # _micro_batch gives a size or a problem
            m = global_batch // dp // mbs
    if v > 1:
        if pp == 1:
            found.append(Violation("interleave", f"virtual_stages={v} needs pipeline parallelism; "
                                                 "use virtual_stages=1 or pp > 1"))
        elif model.n_layers % (pp * v):
            choices = divisors(model.n_layers // pp) if model.n_layers % pp == 0 else [1]
            found.append(Violation("interleave", f"n_layers={model.n_layers} does not split into "
                                                 f"pp*virtual_stages={pp * v} chunks; choose "
                                                 f"virtual_stages in {fmt_choices(choices)}"))
        if pp > 1 and m is not None and interleave_group(pp, m, interleave) is None:
            if interleave == "group_p":
                found.append(Violation("interleave", f"{m} micro-batches is not a multiple of pp={pp}; "
                                                     "Megatron-LM's interleaved schedule with its "
                                                     "default group of p micro-batches (the only one "
                                                     "before Megatron Core 0.10) needs it (change "
                                                     "micro_batch or virtual_stages=1)"))
            else:
                found.append(Violation("interleave", f"{m} micro-batches is fewer than pp={pp}; "
                                                     "Megatron Core's interleaved schedule needs a "
                                                     "group of at least p micro-batches (change "
                                                     "micro_batch or virtual_stages=1)"))
    return found


def _micro_batch(per_replica: int, global_batch: int, dp: int, micro_batch: int | None,
                 micro_batches: int | None) -> tuple[int | None, str | None]:
    """(micro-batch size, None), or (None, what is wrong with the micro-batching)."""
    where = f"the per-replica batch {per_replica} (global_batch={global_batch} / dp={dp})"
    mbs = micro_batch
    if mbs is None:
        if micro_batches is None:
            return None, "give micro_batch (sequences per micro-batch) or micro_batches"
        if isinstance(micro_batches, bool) or int(micro_batches) != micro_batches or micro_batches < 1 \
                or per_replica % micro_batches:
            return None, (f"micro_batches={micro_batches} does not divide {where}; "
                          f"choose micro_batches in {fmt_choices(divisors(per_replica))}")
        mbs = per_replica // micro_batches
    if isinstance(mbs, bool) or int(mbs) != mbs or mbs < 1 or per_replica % mbs:
        return None, (f"micro_batch={mbs} does not divide {where}; "
                      f"choose micro_batch in {fmt_choices(divisors(per_replica))}")
    if micro_batches is not None and micro_batches != per_replica // mbs:
        return None, (f"micro_batch={mbs} gives {per_replica // mbs} micro-batches, not "
                      f"{micro_batches}; give one of the two")
    return int(mbs), None


def check_config(model: Model, cluster: Cluster, global_batch: int, *, dp: int, tp: int, pp: int,
                 micro_batch: int | None, micro_batches: int | None, zero_stage: int, recompute: str,
                 virtual_stages: int, allow_tp_across_nodes: bool, allow_sharded_pp: bool = False,
                 interleave: str = "flexible", **beyond: Any) -> int:
    """Raise ValueError naming every broken rule (`violations`), saying what to
    change; otherwise return the micro-batch size. ``beyond``: cp, ep, etp,
    cp_mode, seq_len, flash_attention, sequence_parallel (`violations`)."""
    _raise_all(violations(model, cluster, global_batch, dp=dp, tp=tp, pp=pp, micro_batch=micro_batch,
                          micro_batches=micro_batches, zero_stage=zero_stage, recompute=recompute,
                          virtual_stages=virtual_stages, allow_tp_across_nodes=allow_tp_across_nodes,
                          allow_sharded_pp=allow_sharded_pp, interleave=interleave, **beyond))
    mbs = _micro_batch(global_batch // dp, global_batch, dp, micro_batch, micro_batches)[0]
    assert mbs is not None   # no violation above, so the micro-batching has a size
    return mbs
