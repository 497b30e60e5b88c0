"""The practice set's self-checks q1-q8: each answer computed from the cost model (never
typed), the wrong answers students give with the hint for each, and the model answers in words.

    check("q3", 0.27)                  # prints what is right or what slipped
    reveal("q3")                       # the model answer and the number, folded
"""
from __future__ import annotations

import html
from typing import Any

from IPython.display import HTML

from .cost import GB, bubble_fraction, get_cluster, model_state_bytes
from .practice import GPU
from .practice_beyond import TRADES, q8_answer

__all__ = ["SELF_CHECKS", "check", "reveal"]


def _answers() -> dict:
    """Each checkable self-check: (kind, expected, the explanation shown on a slip)."""
    hbm = get_cluster(GPU).hbm_bytes
    return {
        "q1": ("number", hbm / model_state_bytes(1).total / 1e9,
               "the biggest model plain data parallelism trains on one 80 GB GPU is its "
               "memory over 16 bytes a parameter (billions)"),
        "q2": ("choice", "nvlink", "tensor parallelism talks inside every layer: it needs "
               "the fast link inside a node (nvlink), not infiniband"),
        "q3": ("number", bubble_fraction(4, 8), "the idle share of a p=4, m=8 step is "
               "(p-1)/(m+p-1), not (p-1)/m"),
        "q4": ("number", model_state_bytes(13e9, dp=16, zero_stage=3).total / GB,
               "ZeRO-3 divides all 16 bytes a parameter by the 16 ranks (GB per GPU)"),
        "q5": ("choice", "tp inside, pp across", "TP needs the node's fast link; the pipeline "
               "only sends at stage edges, so it can cross nodes"),
        "q6": ("number", 64 // (8 * 4), "dp x tp x pp = GPUs, so dp = 64 / (8 x 4)"),
        "q7": ("number", model_state_bytes(7e9).total / GB,
               "16N with N = 7e9 parameters, in GB (1e9 bytes)"),
        "q8": ("choice", q8_answer(), "what overflows is the activations of a long sequence, "
               "and only splitting the sequence divides what each GPU keeps of it"),
    }


SELF_CHECKS = tuple(_answers())
_CHOICES = {"q2": ("nvlink", "infiniband", "roce", "ethernet", "pcie", "any"),
            "q5": ("tp inside, pp across", "pp inside, tp across", "both inside", "both across",
                   "either way"),
            "q8": tuple(TRADES)}


def _slips() -> dict:
    """The wrong answers students give to each self-check, each with the hint that answers
    it: (the answer's value, what went wrong). Numbers computed with the slip made."""
    hbm = get_cluster(GPU).hbm_bytes
    state = model_state_bytes(1).total     # 16 bytes a parameter: 2 weights, 2 grads, 12 Adam
    return {
        "q1": [(hbm / 2 / 1e9, "2 bytes a parameter counts the fp16 weights alone; training also "
                               "keeps gradients and Adam's fp32 states: 16 bytes"),
               (hbm / 4 / 1e9, "4 bytes a parameter counts fp32 weights alone; with gradients and "
                               "Adam's states mixed-precision training keeps 16"),
               (hbm / 12 / 1e9, "12 bytes is Adam's fp32 part alone (master weights, two moments); "
                                "add the fp16 weights and gradients: 16"),
               (hbm / 8 / 1e9, "8 bytes counts weights and gradients but leaves out Adam's states"),
               (hbm / state, "that is the count of parameters; the question asks for billions"),
               (2**30 * 80 / state / 1e9, "80 GB is 80e9 bytes here, not 80 GiB")],
        "q2": [(c, "tensor parallelism sends an all-reduce inside every layer, forward and backward: "
                   f"only the link inside a node (nvlink) is fast enough, {c} is not") for c in
               ("infiniband", "roce", "ethernet", "pcie")] +
              [("any", "the link decides it: per-layer all-reduces on a slow link leave the GPUs "
                       "waiting, so tensor parallelism stays on nvlink inside a node")],
        "q3": [(3 / 8, "(p-1)/m is the overhead over the useful time, not the idle share of the "
                       "step: divide by m+p-1"),
               (4 / 12, "p/(m+p) counts one slot too many on each side: the idle share is "
                        "(p-1)/(m+p-1)"),
               (3 / 12, "(p-1)/(m+p) puts one slot too many below the line: (p-1)/(m+p-1)"),
               (1 / 8, "1/m is the idle share of one stage's fill alone; the pipeline has p-1 "
                       "of them"),
               (100 * 3 / 11, "that is a percentage; answer with the fraction (0 to 1)")],
        "q4": [(13e9 * state / GB, "nothing was divided: ZeRO-3 splits all 16 bytes over the 16 ranks"),
               (model_state_bytes(13e9, dp=16, zero_stage=1).total / GB,
                "that is ZeRO-1 (optimizer states only split); ZeRO-3 splits weights and "
                "gradients too"),
               (model_state_bytes(13e9, dp=16, zero_stage=2).total / GB,
                "that is ZeRO-2 (states and gradients split); ZeRO-3 splits the weights too"),
               (13e9 * state / 8 / GB, "dividing by 8 splits over one node; the question's data-"
                                        "parallel group is all 16 ranks"),
               (13e9 * state / 16 / 2**30, "that is GiB (2^30 bytes); answer in GB (1e9 bytes)")],
        "q5": [("pp inside, tp across", "swapped: tensor parallelism talks inside every layer, so it "
                                        "needs the node's fast link; the pipeline sends only at stage "
                                        "edges, so it can cross the slower fabric"),
               ("both inside", "one node's GPUs cannot hold the largest models: something must cross "
                               "nodes, and the pipeline crosses them most cheaply"),
               ("both across", "tensor parallelism across nodes puts its per-layer all-reduces on the "
                               "slow fabric; keep it inside a node"),
               ("either way", "the two axes send very differently: every layer (tp) against stage "
                              "edges only (pp), so the placement matters")],
        "q6": [(64 // 8, "64/8 leaves out the pipeline: dp x tp x pp = 64, so divide by both"),
               (64 // 4, "64/4 leaves out tensor parallelism: divide by tp x pp"),
               (8 * 4, "8 x 4 is the GPUs one replica needs (tp x pp); dp is how many replicas fit "
                       "in 64"),
               (64 / (8 + 4), "the axes multiply, they do not add: dp = 64 / (tp x pp)"),
               (64 - 8 - 4, "the axes multiply: dp = 64 / (tp x pp)")],
        "q7": [(7e9 * 2 / GB, "2 bytes a parameter counts the fp16 weights alone; training keeps 16"),
               (7e9 * 4 / GB, "4 bytes a parameter counts fp32 weights alone; training keeps 16"),
               (7e9 * 12 / GB, "12 bytes is Adam's fp32 part alone; add fp16 weights and gradients"),
               (7e9 * 8 / GB, "8 bytes leaves out Adam's states"),
               (7e9 * state / 2**30, "that is GiB (2^30 bytes); answer in GB (1e9 bytes)")],
        "q8": [("ep", "expert parallelism splits a mixture of experts' expert weights; this model "
                      "is dense, and its weights already fit: the activations are what overflow"),
               ("pp", "under 1F1B the first stage holds p micro-batches of L/p layers: about "
                      "the activations of one micro-batch of every layer; split the sequence "
                      "instead"),
               ("tp", "tp = 8 already fills the node and the model's 8 key/value heads; past "
                      "it the per-layer all-reduces cross the slow fabric, and the planner "
                      "refuses it"),
               ("dp", "more replicas split the batch, not a sequence: every GPU still keeps a "
                      "whole sequence's activations")],
    }


def _slip(name: str, answer: Any, rel: float) -> str | None:
    """The hint for a catalogued wrong answer, or None."""
    for value, hint in _slips().get(name, []):
        if answer == value if isinstance(value, str) else abs(answer - value) <= rel * abs(value):
            return hint
    return None


def check(name: str, answer: Any, *, rel: float = 0.02) -> bool:
    """Check a self-check answer; prints a pass line or the slip. None: not answered yet."""
    answers = _answers()
    if name not in answers:
        raise ValueError(f"self-check {name!r} unknown; choose one of {list(answers)}")
    kind, expected, hint = answers[name]
    if answer is None:
        print(f"{name}: not answered yet (replace None with your answer)")
        return False
    if kind == "choice":
        if not isinstance(answer, str) or answer.strip().lower() not in _CHOICES[name]:
            raise ValueError(f"{name}: answer with one of {_CHOICES[name]}")
        answer = answer.strip().lower()
        right = answer == expected
    else:
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            raise ValueError(f"{name}: answer with a number, not {type(answer).__name__}")
        answer = float(answer)
        right = abs(answer - expected) <= rel * abs(expected)
    # a catalogued slip gets its own hint; any other wrong answer the general one
    print(f"{name}: right." if right else f"{name}: not yet: {_slip(name, answer, rel) or hint}.")
    return right


# the model answers, in words; the number each checks is computed (`_answers`)
_MODEL_ANSWERS = {
    "q1": "In plain (replicated) data parallelism each GPU keeps a whole replica and trains "
          "on its own slice of the batch; one all-reduce a step averages the gradients so every "
          "replica takes the same update. "
          "The hard limit is memory: the whole model, with its gradients and optimizer "
          "states, must fit every single GPU.",
    "q2": "It cuts the matrices inside each layer (MLP columns and rows, attention heads) "
          "and joins the partial results with an all-reduce or all-gather in every layer, "
          "forward and backward. Traffic that frequent needs NVLink/NVSwitch, so the tp group "
          "stays within a node.",
    "q3": "Consecutive layers become stages on different GPUs; activations go forward and "
          "gradients back only at stage edges, so slower links do. The bubble is the time "
          "GPUs wait while the pipeline fills and drains; many micro-batches shrink it.",
    "q4": "ZeRO-3 (FSDP's full sharding) splits parameters, gradients and optimizer states "
          "over the data-parallel ranks; ZeRO-1 splits only the optimizer states, ZeRO-2 the "
          "gradients too. Under ZeRO-3 a layer's weights are gathered just before it runs "
          "(forward, then again for backward) and freed right after. "
          "It saves memory like model splitting while the code stays data-parallel; the "
          "price is extra gathers, mostly hidden behind compute.",
    "q5": "Tensor parallelism inside a node, where per-layer traffic rides NVLink; pipeline "
          "parallelism across nodes, where only stage edges cross the slower fabric; data "
          "parallelism on top when the model outgrows a node.",
    "q6": "Each axis removes a different limit: TP the per-layer memory inside a node, PP "
          "the memory that no single node can hold, DP the batch size. At the largest "
          "scale no one axis is enough, and their sizes multiply to the GPU count.",
    "q7": "The 16-bytes-a-parameter count says whether one GPU is enough; this part says "
          "what to add when it is not: FSDP/ZeRO or TP past one GPU, PP past one node, "
          "DP wherever the batch should grow.",
    "q8": "Context parallelism when the activations of long sequences fill the GPU: each of "
          "cp ranks keeps s/cp of every sequence, and every layer pays to bring the other "
          "ranks' keys and values (a ring, an all-gather or an all-to-all). Expert "
          "parallelism when a mixture of experts' expert weights fill it: each of ep ranks "
          "keeps a share of whole experts, and every MoE layer pays four all-to-alls a "
          "micro-batch to send tokens to their experts and back. Drops 15 and 16 build both.",
}


def reveal(name: str) -> HTML:
    """The model answer and the computed number, folded under "Show the answer"."""
    answers = _answers()
    if name not in answers:
        raise ValueError(f"self-check {name!r} unknown; choose one of {list(answers)}")
    kind, expected, hint = answers[name]
    value = expected if kind == "choice" else f"{expected:,.4g}"
    return HTML(f"<details><summary>Show the answer</summary><p>{html.escape(_MODEL_ANSWERS[name])}"
                f"</p><p>The check's answer: <b>{html.escape(str(value))}</b> ({html.escape(hint)})."
                "</p></details>")
