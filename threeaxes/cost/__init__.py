"""The cost model: small pure functions, each citing its paper and equation.

Memory (model states, activations), the pipeline bubble, compute, collective
communication, cluster and model presets, and a planner that puts them
together. No torch: plain Python, so every notebook and test can use it.
"""
from .activations import (
    RECOMPUTE,
    ActivationBytes,
    FirstStageActivations,
    activation_bytes,
    first_chunk_in_flight,
    first_stage_activation_bytes,
    in_flight_micro_batches,
    llama_layer_bytes,
)
from .bubble import SCHEDULES, bubble_fraction, bubble_overhead
from .compute import TrainingFlops, flops_per_token, megatron_flops, mfu, step_time, training_flops, training_time
from .constraints import (
    INTERLEAVE_RULES,
    Violation,
    check_config,
    check_model_split,
    divisors,
    interleave_group,
    valid_tp,
    violations,
)
from .context import CP_MODES, ContextBytes, context_parallel_bytes, context_parallel_time, context_violations
from .experts import (
    MoE,
    active_params,
    expert_all_to_all_bytes,
    expert_all_to_all_time,
    expert_params,
    expert_violations,
)
from .kernel_time import LayerTime, dim_factor, gemm_efficiency, layer_time, logits_time
from .memory import (
    GB,
    PRECISIONS,
    STATE_TERMS,
    ZERO_REGIMES,
    GiB,
    MemoryBreakdown,
    ModelStateBytes,
    bytes_per_param,
    model_state_bytes,
)
from .network import (
    COLLECTIVES,
    CommTime,
    Link,
    all_gather_time,
    all_reduce_time,
    all_to_all_link,
    all_to_all_time,
    bytes_sent_per_gpu,
    collective_time,
    group_inside_node,
    group_link,
    group_strides,
    members_per_node,
    nics_per_group,
    p2p_time,
    reduce_scatter_time,
)
from .params import ParamCount, transformer_params
from .placement import LAYOUT_ORDER, RankParams, layout_strides, rank_params, rank_state_bytes
from .planner import DEFAULT_COMPUTE_EFFICIENCY, SHAPES, PlanResult, TimeBreakdown, plan, search
from .presets import CLUSTERS, MODELS, Cluster, Model, a100_cluster, custom_model, get_cluster, get_model, h100_cluster
from .stage_memory import ACTIVATION_SCALE, stage_memory
from .verdict import CONFIG_KEYS, Verdict, best_configuration, judge

__all__ = [
    "RECOMPUTE", "ActivationBytes", "FirstStageActivations", "activation_bytes",
    "first_stage_activation_bytes", "first_chunk_in_flight", "in_flight_micro_batches",
    "llama_layer_bytes", "SCHEDULES",
    "bubble_fraction", "bubble_overhead",
    "TrainingFlops", "flops_per_token", "megatron_flops", "mfu", "step_time",
    "training_flops", "training_time", "GB", "GiB", "PRECISIONS", "STATE_TERMS",
    "ZERO_REGIMES", "ModelStateBytes",
    "bytes_per_param", "model_state_bytes", "COLLECTIVES", "CommTime", "Link",
    "all_gather_time", "all_reduce_time", "bytes_sent_per_gpu", "collective_time",
    "group_inside_node", "group_link", "all_to_all_link", "group_strides", "members_per_node",
    "nics_per_group",
    "p2p_time", "reduce_scatter_time", "ParamCount",
    "transformer_params", "RankParams", "rank_params", "rank_state_bytes", "DEFAULT_COMPUTE_EFFICIENCY",
    "MemoryBreakdown", "PlanResult",
    "TimeBreakdown", "divisors", "plan", "search", "CLUSTERS", "MODELS", "Cluster", "Model",
    "a100_cluster", "custom_model", "get_cluster", "get_model", "h100_cluster",
    "check_config", "check_model_split", "Violation", "violations", "interleave_group",
    "INTERLEAVE_RULES", "CONFIG_KEYS", "Verdict",
    "best_configuration", "judge",
    "valid_tp", "ACTIVATION_SCALE", "stage_memory",
    "SHAPES", "LayerTime", "dim_factor", "gemm_efficiency", "layer_time", "logits_time",
    "CP_MODES", "ContextBytes", "context_parallel_bytes", "context_parallel_time",
    "context_violations", "MoE", "active_params", "expert_all_to_all_bytes",
    "expert_all_to_all_time", "expert_params", "expert_violations", "all_to_all_time",
    "LAYOUT_ORDER", "layout_strides",
]
