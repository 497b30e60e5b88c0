"""The pipeline bubble, measured two ways."""
from __future__ import annotations

from ..pipeline.schedules import SCHEDULES
from .constraints import interleave_group

__all__ = ["SCHEDULES", "bubble_fraction", "bubble_overhead"]



def _validate(pp: int, micro_batches: int, schedule: str, virtual_stages: int,
              interleave: str = "group_p") -> tuple[int, int, int]:
    for name, value in (("pp", pp), ("micro_batches", micro_batches),
                        ("virtual_stages", virtual_stages)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    p, m, v = int(pp), int(micro_batches), int(virtual_stages)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; choose schedule in {set(SCHEDULES)}")
    if schedule == "gpipe" and v > 1:
        raise ValueError(f"virtual_stages={v} needs the interleaved 1F1B schedule; "
                         "use schedule='1f1b' (or 'interleaved') or virtual_stages=1")
    if schedule == "interleaved" and v == 1:
        raise ValueError("schedule='interleaved' needs virtual_stages >= 2; "
                         "with one chunk per GPU it is plain '1f1b'")
    if v > 1 and p > 1 and interleave_group(p, m, interleave) is None:
        if interleave == "group_p":
            choices = ", ".join(str(p * k) for k in range(1, 4))
            raise ValueError(f"micro_batches={m} is not a multiple of pp={p}; Megatron-LM's "
                             f"interleaved schedule with its default group of p micro-batches "
                             f"needs m in {{{choices}, ...}} (Megatron Core >= 0.10 with "
                             f"--microbatch-group-size-per-virtual-pipeline-stage takes any "
                             f"m >= p: interleave='flexible'; PyTorch's rule: "
                             f"pipeline.schedules.interleaved_group)")
        raise ValueError(f"micro_batches={m} is fewer than pp={p}; an interleaved schedule "
                         f"needs a group of at least p micro-batches")
    return p, m, v


def bubble_fraction(pp: int, micro_batches: int, *, schedule: str = "1f1b",
                    virtual_stages: int = 1, interleave: str = "group_p") -> float:
    """Share of a step's wall time that each stage sits idle.

    GPipe (Huang et al. 2019, Section 2.3) and 1F1B (PipeDream-Flush,
    Narayanan et al. 2021, Section 2.2.1): with uniform stages a step lasts
    (m + p - 1)(t_f + t_b) of which m (t_f + t_b) is work, so the idle share
    is (p - 1)/(m + p - 1). Interleaved 1F1B with v chunks per GPU (Section
    2.2.2) shrinks the fill and drain to (p - 1)(t_f + t_b)/v:
    (p - 1)/(v m + p - 1). ``interleave`` says which m an interleaved schedule
    runs (``constraints.interleave_group``): by default Megatron-LM's default
    group of p micro-batches, m a multiple of p; ``"flexible"``, Megatron Core
    >= 0.10's free group, any m >= p. The share is the same for any group
    that runs (7/33 for p = 8, m = 13, v = 2 with a group of 13), as it is for
    PyTorch's relaxed schedule.

    Two different ratios are called "the bubble" in the literature, and the
    course keeps their names apart:

    - ``bubble_fraction``: idle time over a step's *wall time*, the share of the
      timeline a stage sits idle. (p - 1)/(m + p - 1) for GPipe and 1F1B.
      This is what a timeline shows and what a simulation measures.
    - ``bubble_overhead``: idle time over the *ideal compute time* m (t_f + t_b),
      how much longer a step takes than it would with no bubble. Megatron-LM's
      (p - 1)/m (Narayanan et al. 2021, Section 2.2.1), (1/v)(p - 1)/m
      interleaved (Section 2.2.2).

    They describe the same idle time: overhead = fraction / (1 - fraction).
    """
    p, m, v = _validate(pp, micro_batches, schedule, virtual_stages, interleave)
    return (p - 1) / (v * m + p - 1)


def bubble_overhead(pp: int, micro_batches: int, *, schedule: str = "1f1b",
                    virtual_stages: int = 1, interleave: str = "group_p") -> float:
    """Bubble time divided by ideal compute time.

    Narayanan et al. 2021 (Megatron-LM), Section 2.2.1: bubble time fraction
    t_pb / t_id = (p - 1)/m for GPipe and 1F1B; Section 2.2.2: (1/v)(p - 1)/m
    for the interleaved schedule with v model chunks per GPU. This ratio can
    exceed 1 (more idle than work); ``bubble_fraction`` never does.
    ``interleave`` as in ``bubble_fraction``.
    """
    p, m, v = _validate(pp, micro_batches, schedule, virtual_stages, interleave)
    return (p - 1) / (v * m)
