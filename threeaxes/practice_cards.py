"""The practice set's nine flashcards, (question, answer) each: the default deck of
`threeaxes.widgets.FlashcardDeck` and `print_flashcards`."""

__all__ = ["CARDS"]

CARDS = (
    ("Data parallelism: what does it do, and what stops it?",
     "In its plain, replicated form every GPU holds the whole model and takes its own slice of "
     "the batch; the gradients are all-reduced once a step. It stops when the whole model's "
     "states no longer fit one GPU; ZeRO/FSDP shard them."),
    ("Tensor parallelism: what does it do, and what does it need?",
     "It cuts each layer's matrices (MLP width, attention heads) across GPUs and combines the "
     "partial results inside every layer. That traffic needs NVLink, so it stays in a node."),
    ("Pipeline parallelism: what does it do, and what does it cost?",
     "Consecutive layers become stages on different GPUs and micro-batches flow through them. "
     "It sends one activation per micro-batch at each stage edge, so slower links do; the cost "
     "is the bubble."),
    ("ZeRO-1, ZeRO-2, ZeRO-3 / FSDP: what gets sharded?",
     "Over the data-parallel ranks, ZeRO-1 shards the optimizer states, ZeRO-2 the gradients "
     "too, ZeRO-3 (FSDP) the parameters as well. Under ZeRO-3 a layer's weights are gathered "
     "just before it runs and dropped after; the traffic mostly hides behind compute."),
    ("Where do TP and PP go?",
     "TP inside a node, where per-layer traffic is cheap; PP across nodes, where only stage "
     "edges cross the slower fabric; DP on top of both for the biggest models."),
    ("What is 3D parallelism, and why do the largest runs use it?",
     "Data, tensor and pipeline parallelism at once, because each removes a different limit: "
     "TP the per-layer memory in a node, PP the memory across nodes, DP the batch scale."),
    ("When is FSDP the better choice than TP or PP?",
     "When memory must shrink but the team wants to keep data-parallel code: no layer surgery, "
     "no pipeline schedule, parameters gathered layer by layer on demand."),
    ("How does the 16-bytes-a-parameter count turn into a plan?",
     "16N above one GPU: add FSDP/ZeRO or TP. Above one node: add PP across nodes (or shard "
     "with ZeRO-3 across them). Whatever fits, DP multiplies the batch."),
    ("What is a pipeline bubble, and how do you shrink it?",
     "The idle time while the pipeline fills at the start of a step and drains at the end. "
     "More, smaller micro-batches shrink it, at the price of more messages."),
)
