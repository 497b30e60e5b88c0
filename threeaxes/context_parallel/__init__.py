"""Context parallelism: the toy's attention split along the sequence over cp ranks, two ways with
the same result as one process: `ring_attention` (ring.py, online_softmax.py) and
`ulysses_attention` (ulysses.py). split.py says which tokens a rank holds, attention.py runs the
toy's layer this way, measure.py on launched ranks, memory.py the activations a rank holds.
The cp group is a one-axis layout: `threeaxes.extra_axes.axis_layout("cp")`."""
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
