"""The practice set's scenarios a-d: each judged by the cost model when a student picks a
scheme and a configuration, and its model answer beside the decision tree's walk. The
self-checks are `threeaxes.practice_checks`, the flashcards `threeaxes.practice_cards`, the
optional drops beyond the three axes `threeaxes.practice_beyond` (named here too, as the
practice notebook imports them).

    pick("b", "tp", dict(dp=1, tp=8, pp=1, micro_batch=1))   # judged by the cost model
    reveal_scenario("b")                                      # the model answer, folded
"""
from __future__ import annotations

import html
from typing import NamedTuple

from IPython.display import HTML

from .cost import get_cluster, judge
from .cost.decide import SCHEMES, TreeWalk, model_of_size, walk_tree
from .cost.presets import Cluster, Model
from .practice_beyond import BEYOND_DROPS, LONG_CASE, long_case_plans

__all__ = ["Scenario", "SCENARIOS", "pick", "scenario_walk", "reveal_scenario",
           "BEYOND_DROPS", "LONG_CASE", "long_case_plans"]

GLOBAL_BATCH = 512   # sequences per step in every scenario (the seed gives none)
GPU = "a100-80gb"


class Scenario(NamedTuple):
    key: str
    story: str
    billions: float
    n_gpus: int
    split_layers: bool     # False: the team will not use tensor or pipeline parallelism
    seed_scheme: str       # a key of SCHEMES: the practice set's model answer
    bottleneck: str        # what the answer attacks, in a word
    why: str               # the model answer in a sentence

    @property
    def model(self) -> Model:
        return model_of_size(self.billions)

    @property
    def cluster(self) -> Cluster:
        return get_cluster(GPU, n_gpus=self.n_gpus)


SCENARIOS = {s.key: s for s in (
    Scenario("a", "about 1B parameters, 8 GPUs in one node on NVLink", 1, 8, True, "dp",
             "none: it fits",
             "16 bytes a parameter is a small fraction of one GPU, so every GPU keeps a "
             "whole replica and only the gradients travel."),
    Scenario("b", "about 30B parameters, 8 GPUs in one node on NVLink", 30, 8, True, "tp",
             "memory",
             "too big for one GPU, small enough for the node's memory together; NVLink "
             "carries the per-layer all-reduces of tensor parallelism (ZeRO-3 also fits, "
             "with full recomputation, but gathers the weights again for every "
             "micro-batch of the step)."),
    Scenario("c", "about 200B parameters, 64 GPUs in 8 nodes, NVLink inside, InfiniBand "
             "between", 200, 64, True, "3d", "memory and interconnect",
             "even one node's memory is too small: tensor parallelism stays on NVLink, the "
             "pipeline crosses the slower InfiniBand only at stage edges, data parallelism "
             "uses the GPUs left."),
    Scenario("d", "about 13B parameters, 16 GPUs in 2 nodes, the team refuses TP and PP",
             13, 16, False, "fsdp", "complexity",
             "the states do not fit one GPU whole, but sharded over all 16 ranks they do, "
             "and the code stays data-parallel."),
)}


def scenario_walk(key: str) -> TreeWalk:
    """The decision tree walked for scenario `key` (see `threeaxes.cost.decide`)."""
    s = _scenario(key)
    return walk_tree(s.model, s.cluster, GLOBAL_BATCH, split_layers=s.split_layers)


def _scenario(key: str) -> Scenario:
    if key not in SCENARIOS:
        raise ValueError(f"scenario {key!r} unknown; choose one of {sorted(SCENARIOS)}")
    return SCENARIOS[key]


def pick(key: str, scheme: str | None, config: dict | None) -> str:
    """Judge a student's scheme and configuration for scenario `key`: does it fit, how does
    it compare with the planner's best, which bottleneck the scheme attacks. Prints and
    returns the feedback; says what to fill in while the answer is still None."""
    s = _scenario(key)
    if scheme is None or config is None:
        text = (f"scenario {key}: not answered yet; set the scheme (one of {sorted(SCHEMES)}) "
                "and a config such as dict(dp=..., tp=..., pp=..., micro_batch=1)")
        print(text)
        return text
    scheme = str(scheme).strip().lower()
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}; choose scheme in {sorted(SCHEMES)}")
    if not isinstance(config, dict):
        raise ValueError(f"config={config!r} must be a dict such as dict(dp=8, tp=1, pp=1, "
                         "micro_batch=1)")
    config = {"micro_batch": 1, **config}
    if not s.split_layers and (config.get("tp", 1) > 1 or config.get("pp", 1) > 1):
        lines = [f"scenario {key}: the team refuses TP and PP; keep tp=1 and pp=1 and shard "
                 "with zero_stage instead"]
    else:
        verdict = judge(s.model, s.cluster, GLOBAL_BATCH, config=config)
        lines = [f"scenario {key} ({s.model.name} on {s.cluster.n_gpus} GPUs): "
                 + verdict.feedback]
    agreed = "agrees with" if scheme == s.seed_scheme else "differs from"
    lines.append(f"your scheme ({SCHEMES[scheme]}) {agreed} the model answer "
                 f"({SCHEMES[s.seed_scheme]}); the bottleneck here: {s.bottleneck}")
    text = "\n".join(lines)
    print(text)
    return text


def reveal_scenario(key: str) -> HTML:
    """Scenario `key`'s model answer beside the decision tree's walk and the planner's
    verdict, folded under "Show the answer"."""
    s, walk = _scenario(key), scenario_walk(key)
    steps = "".join(f"<li>{html.escape(d.question)} <b>{'yes' if d.answer else 'no'}</b>: "
                    f"{html.escape(d.numbers)}</li>" for d in walk.decisions)
    assert walk.result is not None and walk.verdict is not None   # every practice scenario fits
    return HTML(f"<details><summary>Show the answer for {key}</summary>"
                f"<p><b>{html.escape(SCHEMES[s.seed_scheme])}</b>: {html.escape(s.why)} "
                f"Bottleneck: {html.escape(s.bottleneck)}.</p><p>The tree on "
                f"{html.escape(str(s.model))}, {s.cluster.n_gpus} GPUs:</p><ol>{steps}</ol>"
                f"<p>It ends at <b>{html.escape(walk.result.label)}</b>; "
                f"the planner: {html.escape(walk.verdict.feedback)}</p></details>")
