"""Context parallelism: the toy's attention split along the sequence over cp ranks.

Two ways, the same result as one process (tests/axes/test_context_parallel.py):

* `ring_attention`: queries stay, key/value blocks go round the ring, the online
  softmax adds them up (`ring.py`, `online_softmax.py`);
* `ulysses_attention`: an all-to-all exchanges heads for sequence and back (`ulysses.py`).

`split.py` says which tokens a rank holds (the load-balanced causal split),
`attention.py` runs the toy's attention layer this way, `measure.py` on launched
ranks, `memory.py` gives the
activations a rank holds (the bytes it sends are the cost model's,
`threeaxes.cost.context.context_parallel_bytes`). The cp group is a one-axis
layout: `threeaxes.extra_axes.axis_layout("cp")`.
"""
from threeaxes.context_parallel.attention import METHODS, ContextParallelAttention, all_reduce_grads
from threeaxes.context_parallel.measure import (
    attention_inputs,
    cp_attention_run,
    one_process_attention,
    saved_bytes,
    wire_bytes,
)
from threeaxes.context_parallel.memory import attention_activation_bytes
from threeaxes.context_parallel.ring import ring_attention
from threeaxes.context_parallel.split import (
    causal_pairs,
    check_split,
    gather_sequence,
    sequence_positions,
    split_sequence,
)
from threeaxes.context_parallel.ulysses import heads_to_sequence, sequence_to_heads, ulysses_attention

__all__ = ["METHODS", "ContextParallelAttention", "all_reduce_grads", "attention_activation_bytes",
           "ring_attention", "causal_pairs",
           "check_split", "gather_sequence", "sequence_positions", "split_sequence",
           "heads_to_sequence", "sequence_to_heads", "ulysses_attention", "attention_inputs",
           "cp_attention_run", "one_process_attention", "saved_bytes", "wire_bytes"]
