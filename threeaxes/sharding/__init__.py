"""ZeRO stages 1-3 / FSDP from scratch: shard the model states over the dp ranks.

* `ZeroOptimizer` (ZeRO-1, zero1.py): optimizer state sharded; gradients
  all-reduced as in plain DP; the updated shards all-gathered after the step.
* `Zero2Optimizer` (ZeRO-2, zero2.py): also the gradients, reduce-scattered
  from backward hooks (`GradientShardReducer`).
* `fully_shard` (ZeRO-3 / FSDP, fsdp.py): also the parameters, gathered per
  unit just before its forward and its backward, freed after each.
* `held_bytes` (accounting.py): what a rank really holds; `GATHERED` (fsdp.py):
  the whole ZeRO-3 parameters alive now, and their peak.

Every stage cuts flat buffers into dp equal ranges (flat.py); every
collective goes through `threeaxes.comms` on the "dp" axis: the layout's, or
with none, the default process group's (`threeaxes.dims.dp_layout`). ZeRO-1/2's state in
PyTorch's layout: state.py; ZeRO-3's whole parameters: fsdp_state.py.
"""
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
