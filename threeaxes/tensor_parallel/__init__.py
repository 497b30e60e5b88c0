"""Tensor parallelism from scratch: cut each layer's matmuls across the tp ranks. maps.py (the
conjugate autograd maps), layers.py (Column/RowParallelLinear), block.py (TPBlock,
tensor_parallel_toy), shard.py (full weights <-> a rank's shard), sequence.py (sequence
parallelism), measure.py (one traced step). Every collective goes through `threeaxes.comms`
with axis="tp"."""
from threeaxes.tensor_parallel.block import TPMLP, TPBlock, TPCausalSelfAttention, tensor_parallel_toy
from threeaxes.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from threeaxes.tensor_parallel.maps import (
    copy_to_tp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    scatter_to_tp_region,
)
from threeaxes.tensor_parallel.sequence import (
    SequenceParallelBlock,
    SequenceParallelToy,
    allreduce_sequence_parallel_grads,
    check_sequence_split,
    gather_from_sequence_region,
    reduce_scatter_to_sequence_region,
    scatter_to_sequence_region,
    sequence_parallel_toy,
)
from threeaxes.tensor_parallel.shard import (
    BLOCK_LAYOUT,
    check_tp_layout,
    gather_block_state,
    gather_model_state,
    layout_of,
    shard_block_state,
    shard_model_state,
)

__all__ = [
    "copy_to_tp_region", "reduce_from_tp_region", "gather_from_tp_region", "scatter_to_tp_region",
    "ColumnParallelLinear", "RowParallelLinear", "TPBlock", "TPCausalSelfAttention", "TPMLP",
    "tensor_parallel_toy", "BLOCK_LAYOUT", "check_tp_layout", "layout_of", "shard_block_state",
    "gather_block_state", "shard_model_state", "gather_model_state",
    "gather_from_sequence_region", "reduce_scatter_to_sequence_region", "scatter_to_sequence_region",
    "check_sequence_split", "SequenceParallelBlock", "SequenceParallelToy", "sequence_parallel_toy",
    "allreduce_sequence_parallel_grads",
]
