"""Drop 12's scenario (a 35% pipeline bubble, and the micro-batch count is stuck). How a check asks a
`bubble` answer is `threeaxes.grading.drop12`; the hidden tests' references are on the instructor's
side (`autograder/references/drop12.py`)."""
from __future__ import annotations

from threeaxes.cost import get_cluster, get_model
from threeaxes.scenarios import scenario as sizing_scenario

__all__ = ["SCENARIO", "CURRENT", "MICRO_BATCH", "BUBBLE_TARGET"]

# The scenario: GPT-3 175B on sixteen DGX A100-style nodes (128 A100 80GB
# GPUs), trained with a Megatron-LM release from before Megatron Core 0.10,
# which the team's cluster image pins: its interleaved schedule moves
# micro-batches through each chunk in groups of exactly p, so it needs m to be
# a multiple of p (Narayanan et al. 2021, Section 2.2.2; since Core 0.10
# ``--microbatch-group-size-per-virtual-pipeline-stage`` relaxes it, and p is
# still the default). The planner is told so (``interleave="group_p"`` in the
# scenario's assumptions). A global batch of 52 sequences of its
# 2,048-token context (a small recipe: GPT-3 itself used about 3.2M tokens a
# step, Brown et al. 2020, Table 2.1), one sequence per micro-batch. The team
# runs `CURRENT`: dp=4, tp=4, pp=8 with ZeRO-1, selective recomputation and
# sequence parallelism, so each replica gets 52 / 4 = 13 micro-batches. The
# batch is fixed by the training recipe and a micro-batch of one sequence
# cannot shrink, so m = 52 / dp moves only with dp. The team wants the bubble
# under `BUBBLE_TARGET`.
SCENARIO = sizing_scenario(get_model("175B"), get_cluster("a100-80gb", n_nodes=16), 52,
                           assumptions={"interleave": "group_p"})
MICRO_BATCH = 1          # sequences per micro-batch: already the smallest there is
BUBBLE_TARGET = 0.25     # idle share of a step the team will accept
CURRENT = dict(dp=4, tp=4, pp=8, micro_batch=MICRO_BATCH, zero_stage=1, recompute="selective",
               sequence_parallel=True)
