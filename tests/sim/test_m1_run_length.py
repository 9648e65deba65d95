"""A scenario's traffic and pods must not depend on the run's length.

With the same seed and start, a run of ``h`` hours is the first ``h`` hours of a run of ``2h``:
the services' traffic agrees on the common steps and the pods that arrive inside the short run
are the same pods (every PodSpec field). Before, bank and edge-iot drew every service's noise
and then the jobs from one shared stream (a longer run shifted every later draw), and
promo-surge stopped drawing at the first surge pod past the run's end (dropping later-drawn
pods that arrive inside it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from iro_fed.sim.model import PodSpec, Scenario
from iro_fed.sim.scenarios import build_scenario

# (scenario, short run's hours, settings): each short run ends inside something the long one
# continues (a surge, a night's batch, an hour of analytics jobs); some start off midnight. The
# first (the defect's repro) has traffic only: the bank's first job arrives at 08:00.
CASES = [
    ("bank", 2.0, {}),
    ("bank", 30.0, {}),
    ("bank", 20.0, {"start": "2020-03-02 06:00:00"}),
    ("bank", 7.5, {"start": "2020-03-02 17:30:00", "promo_day": 0}),
    ("edge-iot", 2.0, {}),
    ("edge-iot", 13.0, {"start": "2020-03-02 06:30:00"}),
    ("promo-surge", 10.5, {}),
    ("promo-surge", 2.0, {"start": "2020-03-06 09:00:00"}),
]


def _ids(case: tuple) -> str:
    name, hours, settings = case
    return f"{name}-{hours:g}h" + ("-" + settings["start"][11:16] if "start" in settings else "")


def _pod(pod: PodSpec, steps: int) -> dict:
    """All fields; a departure at or past ``steps`` reads -1 (the builders' "stays to the run's end")."""
    fields = dataclasses.asdict(pod)
    if fields["departure"] >= steps:
        fields["departure"] = -1
    return fields


def _inside(scenario: Scenario, steps: int) -> list[dict]:
    return [_pod(p, steps) for p in scenario.pods if p.arrival < steps]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_short_run_is_the_start_of_a_long_one(case: tuple, seed: int) -> None:
    name, hours, settings = case
    short = build_scenario(name, seed=seed, hours=hours, **settings)
    long = build_scenario(name, seed=seed, hours=2 * hours, **settings)
    n = short.steps
    assert long.steps == 2 * n
    assert [s.name for s in short.services] == [s.name for s in long.services]
    for a, b in zip(short.services, long.services, strict=True):
        np.testing.assert_array_equal(a.traffic, b.traffic[:n], err_msg=f"{name} {a.name}")
    if (name, hours) != ("bank", 2.0):  # else the comparison says nothing
        assert short.pods
        assert len(long.pods) > len(short.pods)  # the long run has pods of its own after the short one
    assert [_pod(p, n) for p in short.pods] == _inside(long, n)


def test_bank_start_at_six_gets_the_days_jobs() -> None:
    """Jobs are drawn per UTC day: a run from 06:00 holds the same jobs as the run from midnight
    of that date, at the same clock times (steps shifted by the 6 hours)."""
    midnight = build_scenario("bank", seed=3, hours=48.0, promo_day=-1)
    six = build_scenario("bank", seed=3, hours=24.0, promo_day=-1, start="2020-03-02 06:00:00")
    shift = 360
    want = [dataclasses.replace(p, arrival=p.arrival - shift, deadline=p.deadline - shift)
            for p in midnight.pods if shift <= p.arrival < shift + six.steps]
    assert six.pods and six.pods == want


@pytest.mark.parametrize("name", ["bank", "edge-iot", "promo-surge"])
def test_same_seed_same_scenario_other_seed_other(name: str) -> None:
    a, b, c = (build_scenario(name, seed=s, hours=24.0) for s in (5, 5, 6))
    assert a.pods == b.pods
    for sa, sb in zip(a.services, b.services, strict=True):
        np.testing.assert_array_equal(sa.traffic, sb.traffic)
    assert a.pods != c.pods
    assert all(not np.array_equal(sa.traffic, sc.traffic) for sa, sc in zip(a.services, c.services, strict=True))


@pytest.mark.parametrize("name", ["bank", "edge-iot"])
def test_services_have_their_own_noise(name: str) -> None:
    """No two services share a noise stream (a key per service index)."""
    services = build_scenario(name, seed=1, hours=6.0).services
    for i, a in enumerate(services):
        for b in services[i + 1:]:  # equal noise: a constant ratio (the daily curve is shared)
            assert np.std(np.log(a.traffic / b.traffic)) > 0.01, (a.name, b.name)
