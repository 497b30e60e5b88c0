"""Drop 12 on the student's side: the scenario (a 35% pipeline bubble, and the micro-batch
count is stuck), and how the visible check asks a `bubble` answer.

The scenario: GPT-3 175B on sixteen DGX A100-style nodes (128 A100 80GB
GPUs), trained with a Megatron-LM release from before Megatron Core 0.10,
which the team's cluster image pins: its interleaved schedule moves
micro-batches through each chunk in groups of exactly p, so it needs m to be
a multiple of p (Narayanan et al. 2021, Section 2.2.2; since Core 0.10
``--microbatch-group-size-per-virtual-pipeline-stage`` relaxes it, and p is
still the default). The planner is told so (``interleave="group_p"`` in the
scenario's assumptions). A global batch of 52 sequences of its
2,048-token context (a small recipe: GPT-3 itself used about 3.2M tokens a
step, Brown et al. 2020, Table 2.1), one sequence per micro-batch. The team
runs `CURRENT`: dp=4, tp=4, pp=8 with ZeRO-1, selective recomputation and
sequence parallelism, so each replica gets 52 / 4 = 13 micro-batches. The
batch is fixed by the training recipe and a micro-batch of one sequence
cannot shrink, so m = 52 / dp moves only with dp. The team wants the bubble
under `BUBBLE_TARGET`.

The references the hidden tests use are on the instructor's side
(`autograder/references/drop12.py`).
"""
from __future__ import annotations

from threeaxes.cost import get_cluster, get_model
from threeaxes.grading import REFUSED, as_number, sizing

__all__ = ["SCENARIO", "CURRENT", "MICRO_BATCH", "BUBBLE_TARGET", "REFUSED", "BARE_REFUSAL",
           "UNNAMED_REFUSAL", "names_the_rule", "value_or_refusal"]

SCENARIO = sizing.scenario(get_model("175B"), get_cluster("a100-80gb", n_nodes=16), 52,
                           assumptions={"interleave": "group_p"})
MICRO_BATCH = 1          # sequences per micro-batch: already the smallest there is
BUBBLE_TARGET = 0.25     # idle share of a step the team will accept
CURRENT = dict(dp=4, tp=4, pp=8, micro_batch=MICRO_BATCH, zero_stage=1, recompute="selective",
               sequence_parallel=True)

BARE_REFUSAL = "raises ValueError without a message"
UNNAMED_REFUSAL = "raises ValueError whose message does not name the rule"
# the words a message uses when it names the rule "m must be a multiple of p" (or its group of p)
RULE_WORDS = ("multiple", "divis", "divide", "%", "group")


def names_the_rule(message: str) -> bool:
    """Whether a ValueError's message names the interleaving rule (m a multiple of p), in
    any of the usual words: a multiple, divisible, divides, m % p, groups of p."""
    return any(word in message.lower() for word in RULE_WORDS)


def value_or_refusal(bubble, p: int, m: int, v: int):
    """What `bubble(p, m, v)` answers, as a plain value: the number, or `REFUSED` when it
    raises ValueError naming the rule (`BARE_REFUSAL` when it says nothing, `UNNAMED_REFUSAL`
    when its message does not name the rule). Any other error,
    or an answer that is not a number, fails naming the call."""
    call = f"bubble({p}, {m}, {v})"
    try:
        value = bubble(p, m, v)
    except ValueError as error:
        message = str(error).strip()
        return BARE_REFUSAL if not message else REFUSED if names_the_rule(message) else UNNAMED_REFUSAL
    except Exception as error:  # noqa: BLE001 - the student's error, reported with its input
        raise AssertionError(f"{call} raised {type(error).__name__}: {error}") from None
    return as_number(value, call)
