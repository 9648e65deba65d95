"""Feedback review: a bad time is refused, and one service P99 reading is one observation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from iro_fed.feedback import FeedbackLoop, observe_snapshot


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "2026-12-03T15:00:00Z", True])
def test_a_bad_time_is_refused_naming_at_and_nothing_is_lost(bad):
    """``observe(at=nan)`` dropped every decision waiting on the node without completing it
    (none is made at or before NaN, none after it); ``record_decision(at="...")`` was kept and
    made every later observation of its node raise TypeError."""
    loop = FeedbackLoop(calibration=0)
    loop.record_decision("p1", "n", {"a": 1000.0}, 4000.0, at=100.0)
    loop.record_decision("p2", "n", {"a": 2000.0}, 4000.0, at=200.0)
    with pytest.raises(ValueError, match=r"^at: "):
        loop.observe("n", 0.5, requests={"a": 2000.0}, capacity=4000.0, at=bad)
    with pytest.raises(ValueError, match=r"^at: "):
        loop.record_decision("p3", "n", {"a": 3000.0}, 4000.0, at=bad)
    with pytest.raises(ValueError, match=r"^at: "):
        loop.observe_latency("p1", 5.0, at=bad)
    with pytest.raises(ValueError, match=r"^at: "):
        observe_snapshot(loop, SimpleNamespace(nodes={}, services={}), at=bad)
    assert loop.observations == 0 and len(loop.decisions) == 2 and "p3" not in loop.by_key
    assert [d.key for d in loop.pending["n"]] == ["p1", "p2"]  # still waiting
    assert loop.observe("n", 0.5, at=250.0) == pytest.approx(0.0)
    assert loop.by_key["p1"].observed_util == 0.5 and loop.by_key["p2"].observed_util == 0.5


def test_numpy_scalars_are_numbers():
    """``observe`` refused an ``np.float32`` share (the requests and capacity took it)."""
    loop = FeedbackLoop(calibration=0)
    loop.record_decision("p1", "n", {"a": np.float32(2000.0)}, np.float32(4000.0), at=100.0)
    assert loop.observe("n", np.float32(0.5), at=np.float64(150.0)) == pytest.approx(0.0)
    assert loop.by_key["p1"].observed_util == 0.5


def _service(loop: FeedbackLoop, replicas: int) -> None:
    for i in range(replicas):
        loop.record_decision(f"web-{i}", f"n{i}", {"web": 1000.0}, 4000.0, klass="web",
                             network_latency_ms=4.0 + i, at=100.0)


def test_one_p99_reading_of_a_service_is_one_observation_not_one_per_pod():
    """A service's P99 went into the moving latency error once per new pod of the service: with
    8 replicas placed, one reading passed ``min_samples`` (5) and fired a fine-tune (with its
    actions: a DQN fine-tune, a federated round request) on a single measurement."""
    fired = []
    loop = FeedbackLoop(calibration=0, latency_threshold_ms=5.0, min_samples=5, on_drift=fired.append)
    _service(loop, 8)
    snap = SimpleNamespace(nodes={}, services={"web": SimpleNamespace(p99_latency_ms=30.0)})
    observe_snapshot(loop, snap, at=200.0)
    assert loop.signals == [] and fired == []
    assert loop.detectors["latency_ms"].count == 1
    # Every pod's decision is completed by it, against its own expectation.
    for i in range(8):
        d = loop.by_key[f"web-{i}"]
        assert d.observed_latency_ms == 30.0 and d.errors["latency_ms"] == pytest.approx(30.0 - 4.0 - i)
    # The reading's error is the mean over the pods it completed.
    assert loop.moving_latency_error == pytest.approx(np.mean([30.0 - 4.0 - i for i in range(8)]))
    assert len(loop.latency_experience) == 8  # each pod's network latency enters the offset fit


def test_a_latency_drift_fires_after_min_samples_readings():
    """Five readings, each completing new pods of the service: the fifth fires (as the docs say:
    ``min_samples`` observations since the error left the calm band)."""
    loop = FeedbackLoop(calibration=0, latency_threshold_ms=5.0, min_samples=5)
    counts = []
    for reading in range(5):
        for i in range(4):
            loop.record_decision(f"web-{reading}-{i}", f"n{i}", {"web": 1000.0}, 4000.0, klass="web",
                                 network_latency_ms=4.0, at=100.0 + reading)
        snap = SimpleNamespace(nodes={}, services={"web": SimpleNamespace(p99_latency_ms=30.0)})
        observe_snapshot(loop, snap, at=110.0 + reading)
        counts.append(len(loop.signals))
    assert counts == [0, 0, 0, 0, 1]
    assert loop.signals[0].quantity == "latency_ms"


@pytest.mark.parametrize("site", ["", "a/b", "x/../../escaped", "nul\0byte", None])
def test_a_round_request_site_that_is_no_file_name_part_is_refused_at_construction(tmp_path, site):
    """The site is part of the request's file name. "a/b" wrote the request into a subfolder of
    ``requests/`` that ``iro fed rounds`` never lists (lost), "x/../../escaped" wrote it outside
    the registry folder, and "" was written, then rejected by the consumer (site must be a
    non-empty string): each was found only at the trigger, hours later, if at all."""
    from iro_fed.feedback import FederatedRoundRequest

    with pytest.raises(ValueError, match=r"^site: "):
        FederatedRoundRequest(tmp_path / "reg", site=site)
    assert not (tmp_path / "reg").exists()


def test_a_round_request_of_a_plain_site_is_read_by_the_consumer(tmp_path):
    from iro_fed.federated.round_requests import RoundRequestQueue
    from iro_fed.feedback import FederatedRoundRequest, Trigger

    action = FederatedRoundRequest(tmp_path / "reg", site="edge-madrid.eu_1")
    trigger = Trigger("fine-tune", 0.0, 10, "utilization", 0.2, 0.1, 5, {"a": 1.0}, {"a": 1.5}, 0.01)
    path = action(FeedbackLoop(), trigger)
    pending = RoundRequestQueue(tmp_path / "reg").pending()
    assert [str(p) for p in pending] == [path]
