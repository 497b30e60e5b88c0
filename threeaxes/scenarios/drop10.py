"""Drop 10's scenario (a 13B run that runs out of memory at step 4,000)."""
from __future__ import annotations

__all__ = ["ATTENTION", "MODEL_NAME", "CLUSTER_NAME", "N_GPUS", "TOKENS_PER_STEP", "SEQ_BEFORE", "SEQ_AFTER",
           "CRASHED", "SCENARIO_BEFORE", "SCENARIO", "scenario"]

MODEL_NAME, CLUSTER_NAME, N_GPUS = "13B", "a100-80gb", 32
TOKENS_PER_STEP = 512 * 2048          # kept by the curriculum: 512 x 2,048 = 256 x 4,096
SEQ_BEFORE, SEQ_AFTER = 2048, 4096
CRASHED = {"dp": 8, "tp": 4, "pp": 1, "micro_batch": 2, "zero_stage": 1}
# this run's attention materialises the s x s scores (no FlashAttention): the planner's
# default is memory-efficient attention, so the scenario says otherwise
ATTENTION = {"flash_attention": False}


def scenario(seq_len: int) -> dict:
    """The fixed model, cluster and batch at one sequence length, for `judge`.

    The story: Llama-2 13B trains on 32 A100 80GB GPUs (4 nodes of 8) with about a
    million tokens per step. Until step 4,000 a step is 512 sequences of 2,048
    tokens; from step 4,000 the curriculum switches to 256 sequences of 4,096.
    The configuration that ran fine, `CRASHED` (dp=8, tp=4, pp=1, micro-batches
    of 2, ZeRO-1), no longer fits. Its attention stores the s x s scores
    (`ATTENTION`: flash_attention=False, against the planner's default); with
    memory-efficient attention (FlashAttention, Dao et al. 2022) the same run
    would fit, and the notebook shows it.
    """
    from threeaxes.cost import get_cluster, get_model
    from threeaxes.scenarios import scenario as sizing_scenario

    return sizing_scenario(get_model(MODEL_NAME), get_cluster(CLUSTER_NAME, n_gpus=N_GPUS),
                           TOKENS_PER_STEP // seq_len, seq_len, assumptions=ATTENTION)


SCENARIO_BEFORE = scenario(SEQ_BEFORE)
SCENARIO = scenario(SEQ_AFTER)
