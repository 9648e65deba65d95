"""A bank promotion day the run reaches but whose promotion hours it misses is refused like a day
outside the run (given) or noted (the default): it was accepted and ran without a promotion."""

from __future__ import annotations

import pytest

from iro_fed.sim import SimConfigError, build_simulator

pytest.importorskip("numpy")


@pytest.mark.parametrize("hours, settings", [
    (30, {"promo_day": 1}),  # day 1 reached until 06:00, its promotion is 11:00-19:00
    (24, {"promo_day": 0, "start": "2020-03-02T20:00:00"}),  # starts after day 0's promotion
    (10, {"promo_day": 0}),  # ends before it
])
def test_a_promotion_the_run_misses_is_refused_when_given(hours: float, settings: dict) -> None:
    with pytest.raises(SimConfigError, match="promo_day.*promotion of day .* is not in this run"):
        build_simulator("bank", "greedy-objective", 0, hours, settings)


def test_a_promotion_the_run_reaches_in_part_runs() -> None:
    sim = build_simulator("bank", "greedy-objective", 0, 24, {"promo_day": 0, "start": "2020-03-02T18:00:00"})
    assert "outside_run" not in sim.sc.notes  # 18:00-19:00 holds the promotion's last ramp


def test_a_surge_past_the_run_is_refused_when_given_and_noted_by_default() -> None:
    # promo-surge's surge at 10:00 UTC in a 5-hour run from midnight: no surge pod, and no word of it
    with pytest.raises(SimConfigError, match="surge_start_h.*past this 5 h run"):
        build_simulator("promo-surge", "best-fit", 0, 5, {"surge_start_h": 10})
    sim = build_simulator("promo-surge", "best-fit", 0, 5, {})
    assert sim.sc.notes["surge_pods"] == 0
    assert any("surge_start_h" in m for m in sim.sc.notes["messages"])
    assert build_simulator("promo-surge", "best-fit", 0, 12, {"surge_start_h": 10}).sc.notes["surge_pods"] > 0
