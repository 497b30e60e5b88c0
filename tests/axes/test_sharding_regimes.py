"""Measured equals predicted, byte for byte: what each of 4 ranks holds after one Adam step
of the default toy under DP, ZeRO-1/2/3, TP and PP (threeaxes.sharding.regimes), against the
cost model (cost.placement + ZeRO's accounting); ZeRO-3's gathered peak; bytes on the wire
against the ZeRO paper's volumes."""
import pytest

from threeaxes.launch import launch
from threeaxes.sharding.regimes import (
    REGIMES,
    measure_regimes,
    predicted_bytes,
    predicted_gathered_peak,
    predicted_wire_bytes,
)
from threeaxes.toy import ToyConfig, make_batch

CFG = ToyConfig()          # float32, the drop's model
WORLD = 4


@pytest.fixture(scope="module")
def measured():
    return launch(measure_regimes, WORLD, CFG, make_batch(CFG, 8, seed=0), timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("regime", REGIMES)
def test_every_rank_holds_exactly_the_predicted_bytes(measured, regime):
    for rank, out in enumerate(measured):
        mine = out[regime]
        want = predicted_bytes(CFG, regime, WORLD, stage=mine["coords"]["pp"])
        assert mine["held"] == tuple(int(want[k]) for k in ("params", "grads", "optimizer", "total")), rank


@pytest.mark.slow
def test_the_sharded_terms_are_a_quarter_of_plain_dp(measured):
    """Independent of the cost model: ZeRO's three cuts, each exactly 1/4 on 4 ranks
    (the optimizer term less Adam's 4-byte step counters: 69 tensors, 1 bucket, 5 units)."""
    held = {regime: measured[0][regime]["held"] for regime in REGIMES}
    params, grads, optimizer = held["dp"][:3]
    assert held["zero1"][:2] == (params, grads) and held["zero1"][2] - 4 == (optimizer - 4 * 69) // 4
    assert held["zero2"][:2] == (params, grads // 4)
    assert held["zero3"][:2] == (params // 4, grads // 4) and held["zero3"][2] - 4 * 5 == (optimizer - 4 * 69) // 4


@pytest.mark.slow
def test_zero3_gathers_at_most_the_root_and_one_block(measured):
    assert {out["zero3"]["gathered_peak"] for out in measured} == {predicted_gathered_peak(CFG)}


@pytest.mark.slow
def test_bytes_on_the_wire_follow_the_zero_paper(measured):
    for regime in ("dp", "zero2", "zero3"):
        assert {out[regime]["wire"] for out in measured} == {predicted_wire_bytes(CFG, regime, WORLD)}
    # ZeRO-1 with ZeroRedundancyOptimizer's interface: gradients all-reduced (2 Psi), then the
    # updated shards all-gathered (1 Psi): half as much again as the paper's reduce-scatter version
    assert {out["zero1"]["wire"] for out in measured} == {1.5 * predicted_wire_bytes(CFG, "zero1", WORLD)}


def test_an_unknown_regime_names_the_choices():
    with pytest.raises(ValueError, match="choose from"):
        predicted_bytes(CFG, "zero4", WORLD)
