"""The course's glossary: every term the drops' cores use, the drop whose core defines it, and
one sentence for each."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def _one_line(text: str) -> str:
    """Markdown wraps a term across lines at will: match on the text with its whitespace as spaces."""
    return re.sub(r"\s+", " ", text)


@dataclass(frozen=True)
class Term:
    name: str
    drop: int                      # the drop whose core defines it
    patterns: tuple[str, ...]      # where a core uses it
    sentence: str                  # the glossary's one sentence
    defines: str | None = None     # what its definition looks like in that core

    def used(self, text: str) -> bool:
        text = _one_line(text)
        return any(re.search(p, text) for p in self.patterns)

    def defined(self, text: str) -> bool:
        text = _one_line(text)
        if self.defines is not None:
            return re.search(self.defines, text) is not None
        for p in self.patterns:
            flags, p = (re.I, p.removeprefix("(?i)")) if p.startswith("(?i)") else (0, p)
            # bold or italic (a list's "* " bullets are neither: a marker hugs its text)
            bold = r"\*{1,2}(?=\S)[^*]*?(?:" + p + r")[^*]*?(?<=\S)\*{1,2}"
            explained = r"(?:" + p + r")[*_`]*\s*(?::|\(| is | are | means )"
            if re.search(bold, text, flags) or re.search(explained, text, flags):
                return True
        return False


TERMS = (
    Term("rank", 1, (r"\branks?\b",),
         "One of the processes that train together, numbered from 0; in the course each rank stands "
         "for one GPU.", r"processes \(ranks\)"),
    Term("gloo", 1, (r"\bgloo\b",),
         "PyTorch's backend for collectives between CPU processes; on GPUs the course uses NCCL, "
         "NVIDIA's."),
    Term("collective", 1, (r"(?i)\bcollectives?\b",),
         "A communication call that every rank of a group makes together, such as an all-reduce."),
    Term("group", 1, (r"(?i)\bgroups?\b",),
         "The ranks that make a collective together; along one axis of a layout, the ranks that "
         "share their coordinates on the other axes (drop 8)."),
    Term("all-reduce", 1, (r"(?i)all-reduces?\b",),
         "A collective in which every rank hands in a tensor and gets back the element-wise sum over "
         "all the ranks."),
    Term("activations", 1, (r"(?i)\bactivations?\b",),
         "The outputs each layer passes to the next; backward needs those stored from forward, so "
         "they cost memory in proportion to the batch."),
    Term("data parallelism (DP)", 1, (r"(?i)data[- ]parallel",),
         "Every rank runs the whole model on its own slice of the batch, and the ranks average their "
         "gradients once a step."),
    Term("tensor parallelism (TP)", 1, (r"(?i)tensor[- ]parallel",),
         "Every rank holds a slice of each layer's weight matrices, and the ranks exchange partial "
         "results inside every layer.", r"Tensor parallelism splits \*\*each layer's weights\*\*"),
    Term("pipeline parallelism (PP)", 1, (r"(?i)pipeline[- ]parallel",),
         "Every rank holds a run of consecutive layers and passes activations to the next rank.",
         r"Pipeline parallelism splits \*\*the layers\*\*"),
    Term("stage", 1, (r"(?i)\bstages?\b",),
         "The run of consecutive layers that one pipeline rank holds."),
    Term("model states (training state)", 2, (r"(?i)training state|model[- ]states?",),
         "What a rank keeps from one step to the next: the weights, their gradients and the "
         "optimizer's states (16 bytes a parameter with mixed-precision Adam, drop 9)."),
    Term("all-gather", 3, (r"(?i)all-gathers?\b",),
         "A collective in which every rank hands in a slice and gets back all the slices, "
         "concatenated."),
    Term("f and g maps", 3, (r"\*[fg]\*",),
         "Megatron-LM's two conjugate autograd functions: f is the identity forward and an all-reduce "
         "backward (before a column-cut layer), g an all-reduce forward and the identity backward "
         "(after a row-cut layer).", r"\*f\* is the identity"),
    Term("node", 3, (r"(?i)\bnodes?\b",),
         "One machine of a cluster, typically with 8 GPUs; links inside a node are many times faster "
         "than links between nodes."),
    Term("NVLink", 3, (r"NVLink",),
         "NVIDIA's direct GPU-to-GPU links inside a node, hundreds of GB/s per GPU."),
    Term("NVSwitch", 3, (r"NVSwitch",),
         "The switch chips inside a node that connect every GPU's NVLinks, so that any two GPUs of the "
         "node talk at full NVLink speed at once."),
    Term("InfiniBand", 3, (r"InfiniBand",),
         "The network between nodes, through network cards of about 25 to 50 GB/s each (often one per "
         "GPU), roughly ten times slower than NVLink."),
    Term("micro-batch", 4, (r"(?i)micro-?batch",),
         "A slice of a step's batch that goes through forward and backward on its own; the gradients "
         "of all the micro-batches are added before the optimizer steps."),
    Term("schedule", 4, (r"(?i)\bschedules?\b",),
         "The order in which each pipeline stage runs the forwards and backwards of its micro-batches."),
    Term("GPipe", 4, (r"GPipe",),
         "A pipeline schedule that runs every micro-batch's forward, then every backward."),
    Term("1F1B", 4, (r"1F1B",),
         "A pipeline schedule that, after a few forwards, alternates one forward with one backward, "
         "so the first stage holds at most p micro-batches of activations instead of m."),
    Term("bubble", 4, (r"(?i)\bbubbles?\b",),
         "The share of a pipeline step a stage sits idle while the pipeline fills and drains: "
         "(p−1)/(m+p−1) for GPipe and 1F1B."),
    Term("DDP", 5, (r"\bDDP\b",),
         "PyTorch's DistributedDataParallel, its wrapper that makes a model data parallel."),
    Term("bucket", 5, (r"(?i)\bbuckets?\b",),
         "A flat buffer of gradients all-reduced as one message, filled in the order backward "
         "finishes them."),
    Term("reduce-scatter", 6, (r"(?i)reduce-scatters?\b",),
         "A collective in which every rank hands in a whole tensor and gets back the sum over the "
         "ranks of one slice of it; followed by an all-gather it makes an all-reduce."),
    Term("ring", 6, (r"(?i)\bring all-reduce|\ba ring\b",),
         "The usual way to run a collective: each GPU sends slices to its neighbour around a circle, "
         "so an all-reduce of S bytes puts 2(t−1)/t·S, nearly 2S, on each GPU's link.",
         r"\*\*ring\*\*"),
    Term("sequence parallelism", 6, (r"(?i)sequence[- ]parallelism",),
         "Alongside tensor parallelism, it splits the token-wise parts of a block (LayerNorms, "
         "residual adds) along the sequence, so each rank stores s/t positions of them."),
    Term("interleaved schedule", 7, (r"(?i)interleav",),
         "A pipeline schedule in which each rank holds v smaller chunks of layers instead of one "
         "stage, so each hop is shorter and the bubble falls to (p−1)/(v·m+p−1)."),
    Term("ZeRO stages", 9, (r"ZeRO",),
         "ZeRO keeps data parallelism but shards its copies over the dp ranks: stage 1 the optimizer "
         "states, stage 2 the gradients too, stage 3 the weights as well.",
         r"ZeRO \(Rajbhandari et al\. 2020\) keeps data parallelism and shards"),
    Term("FSDP", 9, (r"FSDP",),
         "PyTorch's Fully Sharded Data Parallel, its counterpart of ZeRO-3."),
    Term("Ψ", 9, (r"Ψ|\\Psi",),
         "In ZeRO's traffic count, the model's parameter count (the size of one copy of the weights "
         "or gradients)."),
    Term("mixed-precision Adam", 9, (r"(?i)mixed-precision Adam",),
         "Training with 16-bit weights and gradients and an fp32 master copy and Adam state: 2 + 2 + "
         "12 = 16 bytes a parameter.", r"Mixed-precision Adam keeps, for every parameter"),
    Term("memory-efficient attention", 10, (r"(?i)memory-efficient attention|FlashAttention",),
         "Attention computed block by block without storing the s x s matrix of scores per head "
         "(FlashAttention is the best-known kernel); the course's planner assumes it unless told "
         "otherwise."),
    Term("activation recomputation", 10, (r"(?i)recomput",),
         "Keeping only some activations in forward and computing the rest again in backward: "
         "selective recomputation redoes the attention scores, full recomputation whole layers, at "
         "the price of extra compute."),
    Term("gradient accumulation", 10, (r"(?i)gradient accumulation|accumulat\w* (?:the )?gradients",),
         "Running a step's micro-batches one after another on the same ranks, adding their gradients, "
         "and stepping once; it trades time for activation memory without a pipeline."),
    Term("`plan`", 10, (r"`plan[`(]",),
         "The course's cost model for one layout: memory per GPU and step time, term by term.",
         r"`plan`\s+(?:is|prices|evaluates|returns|computes)\b"),
    Term("`search`", 10, (r"`search[`(]",),
         "The course's planner: it prices every layout the rules allow with `plan` and ranks those "
         "that fit, fastest first.",
         r"`search`\s+(?:is|runs|ranks|evaluates|prices|returns|tries)\b"),
    Term("MFU", 11, (r"\bMFU\b",),
         "Model FLOPs utilization: the model's useful FLOPs per second (recomputation not counted) "
         "divided by the GPUs' combined peak.",
         r"\*\*MFU\*\*|MFU\W{0,3}\((?i:model)|(?i:model FLOPs? utili[sz]ation)"),
    Term("key/value heads", 14, (r"(?i)key/value heads?|\bKV heads?|grouped-query|\bGQA\b",),
         "In grouped-query attention, the few heads of keys and values that several query heads "
         "share; tensor parallelism splits them too, or copies them when tp exceeds their number."),
    Term("context parallelism (CP)", 15, (r"(?i)context parallelism",),
         "Splitting each sequence over cp ranks, every layer bringing the other ranks' keys and "
         "values to each rank's queries (by a ring or an all-to-all)."),
    Term("all-to-all", 15, (r"(?i)all-to-all",),
         "A collective in which every rank sends a different slice to every other rank."),
    Term("mixture of experts (MoE)", 16, (r"(?i)mixture[- ]of[- ]experts|\bMoE\b",),
         "A layer whose MLP is replaced by several expert MLPs and a router that sends each token "
         "to a few of them."),
    Term("expert parallelism (EP)", 16, (r"(?i)expert parallelism",),
         "Placing a mixture of experts' experts on different ranks, tokens travelling to their "
         "experts' ranks and back by all-to-all."),
)

BY_NAME = {t.name: t for t in TERMS}


def markdown() -> str:
    """The glossary page's text: one table, terms in the order the course defines them."""
    rows = [f"| {t.name} | {t.drop} | {t.sentence} |" for t in sorted(TERMS, key=lambda t: t.drop)]
    return "\n".join(["## Terms, in the order the drops define them", "",
                      "| term | defined in drop | meaning |", "| --- | --- | --- |", *rows])


PAGE = Path(__file__).resolve().parent.parent / "notebooks" / "glossary.ipynb"


def write_page(path: Path = PAGE) -> None:
    """Put markdown() into the page's cell tagged "glossary".

    Each entry is data a test reads (tests/checks/test_glossary.py): `patterns` find the term in a core's
    prose (markdown cells; regular expressions, case-sensitive unless they say (?i)), and `defines`
    finds its definition in the defining drop's core; left out, a definition is the term in bold
    (`**...**` around a match of a pattern, the course's way of marking a term at first use) or in
    italics, or the term followed by a colon, a parenthesis, "is", "are" or "means".
    The glossary page (notebooks/glossary.ipynb) is `markdown()`, written by
    `python -m threeaxes.glossary --write`.
    """
    import json

    nb = json.loads(path.read_text())
    (cell,) = [c for c in nb["cells"] if "glossary" in c["metadata"].get("tags", [])]
    cell["source"] = markdown().splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m threeaxes.glossary --write   (rewrites notebooks/glossary.ipynb)")
    write_page()
