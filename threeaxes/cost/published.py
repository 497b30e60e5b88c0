"""Published training runs, and the planner's prediction for each."""
from __future__ import annotations

from typing import Any, NamedTuple

from .compute import megatron_flops
from .evaluate import PlanResult
from .planner import SHAPES, plan, search
from .presets import Cluster, Model, a100_cluster, custom_model

__all__ = ["PublishedRun", "NARAYANAN_2021_TABLE1", "OtherRun", "OTHER_RUNS", "predict_other",
           "takeaway1_fastest_split", "NARAYANAN_2021_TABLE2_PTDP",
           "MEGATRON_2021", "table1_model", "table1_cluster", "achieved_tflops", "Prediction",
           "predict", "PublishedIteration", "KORTHIKANTI_2022_TABLE5", "predict_iteration"]

VOCAB, SEQ_LEN = 51200, 2048          # Narayanan et al. 2021, Section 5.1


class PublishedRun(NamedTuple):
    params_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    n_gpus: int
    batch: int                 # sequences of 2048 tokens per step
    tflops_per_gpu: float      # achieved, eq. 3 FLOPs
    percent_peak: int | None   # of 312 teraFLOP/s
    aggregate_pflops: float | None
    micro_batch: int | None = None   # when the paper gives it

    @property
    def dp(self) -> int:
        return self.n_gpus // (self.tp * self.pp)


# Narayanan et al. 2021, Table 1 (and the Megatron-LM README), row by row.
NARAYANAN_2021_TABLE1 = (
    PublishedRun(1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
    PublishedRun(3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
    PublishedRun(7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
    PublishedRun(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
    PublishedRun(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
    PublishedRun(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
    PublishedRun(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
    PublishedRun(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
    PublishedRun(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
    PublishedRun(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0),
)

# Narayanan et al. 2021, Table 2, the PTD-P rows (micro-batch 1). HELD OUT:
# not used to set the constants of kernel_time, which were fitted to Table 1
# only. The table gives the model-parallel size (96, 280), not its split;
# t = 8 (one node, Section 3 Takeaway #1) makes p = 12 and 35 (the 529.6B
# split is Table 1's). Its third 529.6B row (2,240 GPUs) is left out: we could
# not read its figure in a source we trust.
NARAYANAN_2021_TABLE2_PTDP = (
    PublishedRun(174.6, 96, 12288, 96, 8, 12, 384, 1536, 153, None, None, 1),
    PublishedRun(174.6, 96, 12288, 96, 8, 12, 768, 1536, 149, None, None, 1),
    PublishedRun(174.6, 96, 12288, 96, 8, 12, 1536, 1536, 141, None, None, 1),
    PublishedRun(529.6, 128, 20480, 105, 8, 35, 560, 2240, 171, None, None, 1),
    PublishedRun(529.6, 128, 20480, 105, 8, 35, 1120, 2240, 167, None, None, 1),
)

# What Megatron-LM did in 2021 (Section 5.1): full recomputation, no sequence
# parallelism or ZeRO, scatter/gather pipeline sends, gradients reduced after
# the backward pass, attention that stores its scores (FlashAttention came in
# 2022), the interleaved schedule in groups of p (m a multiple of p, Section
# 2.2.2), and Megatron-LM's own 20 bytes of state per parameter for fp16
# training (precision "megatron-fp16": its optimizer keeps an fp32 copy of the
# fp16 gradients beside the fp32 master weights and Adam's moments; Megatron
# Core User Guide, "Distributed Optimizer"); layers timed from their shapes
# (threeaxes.cost.kernel_time).
MEGATRON_2021: dict[str, Any] = dict(compute_efficiency=SHAPES, pp_scatter_gather=True, dp_overlap=0.0,
                     recomputes=("full",), sequence_parallel=(False,), zero_stages=(0,),
                     flash_attention=False, interleave="group_p", precision="megatron-fp16")


def table1_model(run: PublishedRun) -> Model:
    """The GPT model of one row: GPT-2 style layers, V = 51,200, s = 2048."""
    return custom_model(f"GPT {run.params_billion}B", run.layers, run.hidden, run.heads,
                        vocab_size=VOCAB, seq_len=SEQ_LEN)


def table1_cluster(run: PublishedRun) -> Cluster:
    """Selene's DGX A100 nodes, as many as the row used."""
    return a100_cluster(run.n_gpus // 8)


def achieved_tflops(result: PlanResult, run: PublishedRun) -> float:
    """teraFLOP/s per GPU as the paper counts them: eq. 3 over the step time."""
    flops = megatron_flops(run.batch, SEQ_LEN, run.layers, run.hidden, VOCAB,
                           recompute="full").total
    return flops / (result.time.total * run.n_gpus) / 1e12


class Prediction(NamedTuple):
    run: PublishedRun
    published: PlanResult      # PlanResult: the published (dp, tp, pp), best mbs and v
    best: PlanResult           # PlanResult: the planner's best of everything
    tflops_per_gpu: float      # predicted for the published configuration

    @property
    def ratio(self) -> float:
        """Predicted over published throughput."""
        return self.tflops_per_gpu / self.run.tflops_per_gpu

    @property
    def share_of_best(self) -> float:
        """Published configuration's tokens/s over the planner's best's."""
        return self.published.tokens_per_second / self.best.tokens_per_second


def predict(run: PublishedRun, **assumptions: Any) -> Prediction:
    """Search the row's model, cluster and batch under ``MEGATRON_2021``
    (override any of it with ``assumptions``); return the fastest fitting
    configuration with the published (dp, tp, pp) beside the best overall.

    Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
    Clusters Using Megatron-LM" (SC'21, arXiv 2104.04473), Table 1: weak scaling
    of GPT models from 1.7B to 1T parameters on Selene (DGX A100 nodes: 8 A100
    80GB on NVLink/NVSwitch, eight 200 Gb/s HDR InfiniBand cards per node;
    Section 5). The same table is in the Megatron-LM repository's README.
    Section 5.1 fixes what the table does not show: vocabulary 51,200, sequence
    length 2048, mixed precision, full activation recomputation (eq. 3 counts
    its extra forward pass), the interleaved pipeline schedule with the
    scatter/gather optimisation (Section 4.1). The micro-batch size and the
    number of model chunks per GPU are not published; the planner picks the
    fastest for the published (tp, pp, dp). Data-parallel gradients are
    all-reduced after the backward pass, not overlapped (``dp_overlap=0``);
    tensor-parallel all-reduces and pipeline sends sit on the critical path.
    Every published split is even (105 layers over 35 stages, 128 over 64), so
    no uneven layer split is modelled; the output layer does make the last
    stage the slowest, and the shape model times that stage.

    Throughput is compared in the paper's unit: teraFLOP/s per GPU, counting
    eq. 3's FLOPs (``megatron_flops(..., recompute="full").total``) over the
    step time.
    """
    options = {**MEGATRON_2021, **assumptions}
    if run.micro_batch is not None:
        options.setdefault("micro_batch_sizes", (run.micro_batch,))
    results = search(table1_model(run), table1_cluster(run), run.batch, **options)
    same = [r for r in results if (r.dp, r.tp, r.pp) == (run.dp, run.tp, run.pp)]
    if not same:
        raise ValueError(f"the planner finds no valid configuration with dp={run.dp} "
                         f"tp={run.tp} pp={run.pp} for the {run.params_billion}B row")
    return Prediction(run, same[0], results[0], achieved_tflops(same[0], run))


class PublishedIteration(NamedTuple):
    """A row of Korthikanti et al. 2022 (arXiv 2205.05198), Tables 3 and 5:
    seconds per iteration with full recomputation, and with sequence
    parallelism plus selective recomputation ("present work"). Same Selene
    A100 nodes, V = 51,200, s = 2048, no data parallelism."""
    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    n_gpus: int
    batch: int
    micro_batch: int
    virtual_stages: int        # Table 3: interleaving with 3 chunks for 175B and 530B
    full_recompute_s: float
    present_work_s: float


# HELD OUT as well (Megatron-LM's 2022 code, which overlaps some tensor-
# parallel communication with the backward pass; our model does not).
KORTHIKANTI_2022_TABLE5 = (
    PublishedIteration("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    PublishedIteration("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    PublishedIteration("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    PublishedIteration("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49),
)


def predict_iteration(run: PublishedIteration) -> tuple[PlanResult, PlanResult]:
    """(full recomputation, sequence parallel + selective) PlanResults for the
    published configuration, timed as ``MEGATRON_2021`` times layers."""
    model = custom_model(f"GPT {run.name}", run.layers, run.hidden, run.heads,
                         vocab_size=VOCAB, seq_len=SEQ_LEN)
    cluster = a100_cluster(max(1, run.n_gpus // 8))
    kw: dict[str, Any] = dict(dp=run.n_gpus // (run.tp * run.pp), tp=run.tp, pp=run.pp,
              micro_batch=run.micro_batch, virtual_stages=run.virtual_stages,
              compute_efficiency=SHAPES, pp_scatter_gather=True, flash_attention=False)
    return (plan(model, cluster, run.batch, recompute="full", **kw),
            plan(model, cluster, run.batch, recompute="selective", sequence_parallel=True, **kw))


class OtherRun(NamedTuple):
    """A published run outside Narayanan et al.'s tables, planned with its era's
    techniques (``MEGATRON_2021`` plus ``assumptions``): attention that stores its
    scores, no sequence parallelism, ZeRO at most 1, full recomputation."""
    name: str
    model: Model               # custom_model(...)
    cluster: Cluster           # Cluster
    batch: int                 # sequences per step
    dp: int
    tp: int
    pp: int
    tflops_per_gpu: float | None   # published, where the paper gives it
    source: str
    assumptions: dict[str, Any] = {}


OTHER_RUNS = (
    # Smith et al. 2022 (MT-NLG, arXiv 2201.11990), Sections 2.3-2.4: 105 layers,
    # hidden 20480, 128 heads, sequence 2048, batch 1920; 8-way tensor and 35-way
    # pipeline parallelism, data parallelism over 280 DGX A100 80GB nodes (dp = 8):
    # 60.1 s per iteration, 126 teraFLOP/s per GPU. Megatron-LM with DeepSpeed's
    # ZeRO-1 data parallelism. Vocabulary: GPT-2's 50,257, padded to 50,272 here.
    OtherRun("MT-NLG 530B", custom_model("MT-NLG 530B", 105, 20480, 128, vocab_size=50272,
                                         seq_len=SEQ_LEN),
             a100_cluster(280), 1920, 8, 8, 35, 126.0,
             "Smith et al. 2022, Sections 2.3-2.4", {"zero_stages": (0, 1)}),
    # Black et al. 2022 (GPT-NeoX-20B, arXiv 2204.06745), Sections 3-3.1 and the
    # released 20B config: 44 layers, hidden 6144, 64 heads, sequence 2048; tensor
    # parallelism 2, pipeline 4, ZeRO-1, fp16; twelve nodes of 8 A100-SXM4-40GB
    # with four HDR InfiniBand cards each (dp = 12); micro-batch 4 x 32 accumulation
    # steps x 12 replicas = 1,536 sequences (the paper rounds to "about 3.15M
    # tokens", 1,538). Vocabulary 50,432 (padded). A100 40GB: 1,555 GB/s of HBM.
    OtherRun("GPT-NeoX-20B", custom_model("GPT-NeoX-20B", 44, 6144, 64, vocab_size=50432,
                                          seq_len=SEQ_LEN),
             a100_cluster(12, name="A100 40GB", gpu="A100-SXM4-40GB", hbm_bytes=40e9,
                          hbm_bandwidth=1555e9, nics_per_node=4),
             1536, 12, 2, 4, None, "Black et al. 2022, Section 3; the released 20B.yml",
             {"zero_stages": (0, 1)}),
)


def predict_other(run: OtherRun, **assumptions: Any) -> Prediction:
    """As ``predict``, for one of ``OTHER_RUNS``: the fastest fitting configuration
    with the published (dp, tp, pp) beside the best of the era's search. Its
    ``tflops_per_gpu`` counts eq. 3's FLOPs for that model (NaN where the paper
    gives no figure to compare, ``ratio`` then NaN as well)."""
    options = {**MEGATRON_2021, **run.assumptions, **assumptions}
    results = search(run.model, run.cluster, run.batch, **options)
    same = [r for r in results if (r.dp, r.tp, r.pp) == (run.dp, run.tp, run.pp)]
    if not same:
        raise ValueError(f"the planner finds no valid configuration with dp={run.dp} "
                         f"tp={run.tp} pp={run.pp} for {run.name}")
    m = run.model
    flops = megatron_flops(run.batch, SEQ_LEN, m.n_layers, m.d_model, m.vocab_size,
                           recompute="full").total
    tflops = flops / (same[0].time.total * run.cluster.n_gpus) / 1e12
    proxy = PublishedRun(round(m.n_params / 1e9, 1), m.n_heads, m.d_model, m.n_layers, run.tp,
                         run.pp, run.cluster.n_gpus, run.batch,
                         run.tflops_per_gpu if run.tflops_per_gpu else float("nan"), None, None)
    return Prediction(proxy, same[0], results[0], tflops)


def takeaway1_fastest_split(model: Model, cluster: Cluster, batch: int, model_parallel: int,
                            **assumptions: Any) -> dict[int, PlanResult]:
    """{tp: fastest fitting PlanResult} over the splits tp * pp = ``model_parallel``
    with no data parallelism, under ``MEGATRON_2021`` with one chunk per GPU (plain
    1F1B): the experiment behind Narayanan et al. 2021's Takeaway #1 (Section 5.4.1,
    Figure 13: tensor parallelism up to the GPUs of a server, then pipelining)."""
    options = {**MEGATRON_2021, "max_virtual_stages": 1, **assumptions}
    out: dict[int, PlanResult] = {}
    for r in search(model, cluster, batch, only_fitting=True, **options):
        if r.dp == 1 and r.tp * r.pp == model_parallel:
            out.setdefault(r.tp, r)
    return out
