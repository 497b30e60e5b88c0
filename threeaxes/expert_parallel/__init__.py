"""Expert parallelism from scratch: a mixture-of-experts toy, its experts spread over ep ranks.
config.py (MoEConfig), routing.py (top-k, capacity, dispatch and combine in one process),
experts.py (the single-process reference), exchange.py (the all-to-all as an autograd map),
layer.py (ExpertParallelMoE), traffic.py (the all-to-all bytes by formula), measure.py (a
traced step on launched ranks). Every collective goes through `threeaxes.comms` on "ep"."""
from threeaxes.expert_parallel.config import MoEConfig
from threeaxes.expert_parallel.experts import Experts, MoELayer, MoEToy, moe_layers, skew_router_
from threeaxes.expert_parallel.layer import (
    ExpertParallelMoE,
    expert_parallel_toy,
    local_experts,
    shard_batch_ep,
    sum_replicated_grads,
)
from threeaxes.expert_parallel.routing import (
    Routing,
    assign_slots,
    choose_experts,
    combine,
    dispatch,
    expert_capacity,
    route,
)
from threeaxes.expert_parallel.traffic import ALL_TO_ALLS_PER_LAYER, moe_all_to_all_bytes

__all__ = [
    "MoEConfig", "Experts", "MoELayer", "MoEToy", "moe_layers", "skew_router_",
    "ExpertParallelMoE", "expert_parallel_toy", "local_experts", "shard_batch_ep",
    "sum_replicated_grads", "Routing", "assign_slots", "choose_experts", "combine", "dispatch",
    "expert_capacity", "route", "ALL_TO_ALLS_PER_LAYER", "moe_all_to_all_bytes",
]
