"""Link explorer: GPUs per node and the inter-node bandwidth -> the step time
of one layout, beside the same layout on 8-GPU nodes.

Drop 11's question in a widget: when does a layout's tensor-parallel group
leave the node, and what does that cost? The model, the GPU count, the global
batch and the rest of the configuration stay fixed (GPT-3 175B on 256 A100s by
default); the controls change the node size, the per-GPU InfiniBand bandwidth
and the layout's tp and pp (dp fills the GPUs).
"""
from __future__ import annotations

import html
from typing import Any, NamedTuple

import ipywidgets as widgets
from matplotlib.figure import Figure

from ..cost import GB, a100_cluster, get_model, group_link, plan
from ..cost.evaluate import PlanResult
from ..cost.network import Link
from ..cost.presets import Cluster
from ..plots import draw_time_breakdown
from .base import _WIDE, _Explorer


class LinkData(NamedTuple):
    baseline: PlanResult  # PlanResult on 8-GPU nodes with the preset links
    chosen: PlanResult    # PlanResult on the nodes and links the controls set
    cluster: Cluster      # the cluster the controls set
    links: dict[str, Link]  # axis -> Link the axis's group uses on that cluster
    per_gpu_ratio: float  # chosen tokens/s over baseline tokens/s (same GPU count)


class LinkExplorer(_Explorer[LinkData]):
    """Node size and inter-node bandwidth -> step time by term, beside 8-GPU nodes."""

    title = "Node size and links explorer"

    def __init__(self, model: str = "175B", n_gpus: int = 256, global_batch: int = 512,
                 config: dict[str, Any] | None = None, **initial: Any) -> None:
        self.model = get_model(model)
        self.n_gpus, self.global_batch = n_gpus, global_batch
        # every setting of plan() other than dp, tp, pp (the controls)
        self.config = dict(micro_batch=1, zero_stage=1, recompute="none",
                           sequence_parallel=True) if config is None else dict(config)
        c = {
            "gpus_per_node": widgets.Dropdown(options=[2, 4, 8, 16], value=4,
                                              description="GPUs per node", style=_WIDE),
            "inter_node_gbps": widgets.Dropdown(options=[12.5, 25.0, 50.0, 100.0, 200.0, 300.0],
                                                value=25.0, style=_WIDE,
                                                description="InfiniBand GB/s per NIC"),
            # NICs each node has (DGX: one per GPU); a group crossing nodes drives up to
            # one per member (cost.network.nics_per_group)
            "nics_per_node": widgets.Dropdown(options=[("one per GPU", 0), ("1", 1), ("2", 2),
                                                       ("4", 4), ("8", 8)], value=0,
                                              description="NICs per node", style=_WIDE),
            "tp": widgets.Dropdown(options=[1, 2, 4, 8, 16], value=8, description="tp"),
            "pp": widgets.Dropdown(options=[1, 2, 4, 8, 16, 32, 64], value=8,
                                   description="pp"),
        }
        rows = [widgets.HBox([c["gpus_per_node"], c["inter_node_gbps"], c["nics_per_node"]]),
                widgets.HBox([c["tp"], c["pp"]])]
        super().__init__(c, rows, initial)

    def _plan(self, cluster: Cluster, tp: int, pp: int) -> PlanResult:
        if self.n_gpus % (tp * pp):
            raise ValueError(f"tp({tp}) * pp({pp}) = {tp * pp} does not divide the "
                             f"{self.n_gpus} GPUs; choose a smaller tp or pp")
        return plan(self.model, cluster, self.global_batch, dp=self.n_gpus // (tp * pp),
                    tp=tp, pp=pp, allow_tp_across_nodes=True, **self.config)

    def compute(self) -> LinkData:
        v = self.values()
        per_node, tp, pp = v["gpus_per_node"], v["tp"], v["pp"]
        if self.n_gpus % per_node:
            raise ValueError(f"{self.n_gpus} GPUs do not fill nodes of {per_node}")
        cluster = a100_cluster(self.n_gpus // per_node, gpus_per_node=per_node,
                               inter_node_bandwidth=v["inter_node_gbps"] * GB,
                               nics_per_node=v["nics_per_node"] or None)
        chosen = self._plan(cluster, tp, pp)
        baseline = self._plan(a100_cluster(self.n_gpus // 8), tp, pp)
        dp = chosen.dp
        # stride and size of each group, tp fastest (Megatron's rank order)
        links = {"tp": group_link(cluster, 1, tp), "dp": group_link(cluster, tp, dp),
                 "pp": group_link(cluster, tp * dp, pp)}
        return LinkData(baseline, chosen, cluster, links,
                        chosen.tokens_per_second / baseline.tokens_per_second)

    def summary(self, d: LinkData) -> str:
        where = ", ".join(f"{axis} {'inside a node' if link.inside_node else 'across nodes'}"
                          for axis, link in d.links.items())
        fits = "" if d.chosen.fits else " <b>(does not fit in memory)</b>"
        return (f"{html.escape(d.chosen.label)} on {d.cluster.n_nodes} nodes of "
                f"{d.cluster.gpus_per_node}: {where}.<br>Step {d.chosen.time.total:.2f} s "
                f"against {d.baseline.time.total:.2f} s on 8-GPU nodes: each GPU trains "
                f"<b>{d.per_gpu_ratio:.0%}</b> of the tokens per second{fits}.")

    def draw(self, d: LinkData) -> Figure:
        return draw_time_breakdown(
            [("8-GPU nodes, preset links", d.baseline.time),
             (f"{d.cluster.gpus_per_node}-GPU nodes, {d.cluster.nics} x "
              f"{d.cluster.inter_node_bandwidth / GB:.0f} GB/s NICs", d.chosen.time)],
            title=f"tp={d.chosen.tp} pp={d.chosen.pp} dp={d.chosen.dp}: step time by term")
