"""The students of drops 13 and 14 who type the search's fastest fitting row as their pick and
answer nothing else (tests/drops/test_top_row_scores_half.py reads their grades)."""
from grading_harness import set_answer

from autograder.references.sizing import best_in_scenario
from threeaxes.scenarios import drop13, drop14

DROPS = {13: ("drop13-size-30b-on-32", drop13.SCENARIO), 14: ("drop14-defend-70b-on-64", drop14.SCENARIO)}
STUDENT = "top_row_only"


def fastest_row(scenario) -> dict:
    r = best_in_scenario(scenario)
    return dict(dp=r.dp, tp=r.tp, pp=r.pp, micro_batch=r.micro_batch, zero_stage=r.zero_stage,
                recompute=r.recompute, virtual_stages=r.virtual_stages,
                sequence_parallel=r.sequence_parallel)


def submissions() -> dict:
    """{(drop, STUDENT): build}: the release with only the pick typed in, the fastest row."""
    def build(name, scenario):
        return lambda course: set_answer(course.released(name), "my_config_answer",
                                         f"my_config = {fastest_row(scenario)!r}")
    return {(name, STUDENT): build(name, scenario) for name, scenario in DROPS.values()}
