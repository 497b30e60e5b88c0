"""ZeRO stages 1-3 / FSDP from scratch: shard the model states over the dp ranks. `ZeroOptimizer`
(ZeRO-1, zero1.py), `Zero2Optimizer` (ZeRO-2, zero2.py), `fully_shard` (ZeRO-3 / FSDP, fsdp.py),
`held_bytes` (accounting.py); flat buffers cut into dp ranges (flat.py); state in PyTorch's layout
(state.py, fsdp_state.py). Every collective goes through `threeaxes.comms` on the "dp" axis."""
from threeaxes.sharding.accounting import HeldBytes, held_bytes
from threeaxes.sharding.flat import FlatLayout, check_shardable, shard_of
from threeaxes.sharding.fsdp import GATHERED, GatheredBytes, ShardedUnit, fully_shard, units_of
from threeaxes.sharding.fsdp_state import gathered_state, load_gathered_state
from threeaxes.sharding.zero1 import ShardedBucket, ZeroOptimizer
from threeaxes.sharding.zero2 import GradientShardReducer, Zero2Optimizer

__all__ = [
    "FlatLayout", "check_shardable", "shard_of",
    "ZeroOptimizer", "ShardedBucket", "Zero2Optimizer", "GradientShardReducer",
    "fully_shard", "ShardedUnit", "units_of", "gathered_state", "load_gathered_state",
    "held_bytes", "HeldBytes", "GATHERED", "GatheredBytes",
]
