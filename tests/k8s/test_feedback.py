"""The feedback loop's Kubernetes side: NodeMetrics from the loopback API server feed the loop
(iro_fed.feedback), which is re-exported from iro_fed.k8s.feedback for older imports."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import iro_fed.feedback as generic
import iro_fed.k8s.testing as fake_api
from iro_fed.k8s.feedback import FeedbackLoop, NodeMetricsFeed, UsageModel
from iro_fed.testing import wait_for

T0 = 1_796_000_000.0  # a fixed time for the decisions and the measurements (2026-11-29)


def rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@pytest.fixture
def measured_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[float | None], None]:
    """Sets the ``timestamp`` the loopback API server gives NodeMetrics: a fixed time, or (None)
    a new second on every measurement, as metrics-server's change after each kubelet scrape."""

    def set_clock(at: float | None) -> None:
        if at is None:
            ticks = itertools.count(int(T0))
            monkeypatch.setattr(fake_api, "_now", lambda: rfc3339(next(ticks)))
        else:
            monkeypatch.setattr(fake_api, "_now", lambda: rfc3339(at))

    return set_clock


def test_the_loop_is_the_generic_one():
    assert FeedbackLoop is generic.FeedbackLoop and UsageModel is generic.UsageModel


def run(loop: FeedbackLoop, rng: np.random.Generator, factor: float, steps: int) -> list[float]:
    """Nodes of 8 cores with random requests; pods use ``factor`` x their request (+ noise)."""
    errors = []
    for i in range(steps):
        node = f"n{i % 5}"
        requested = float(rng.uniform(1000, 5000))
        loop.predict(f"pod-{i}", node, requested, 8000.0)
        observed = factor * requested / 8000.0 + float(rng.normal(0, 0.01))
        errors.append(loop.observe(node, observed))
    return errors


def test_one_class_shift_triggers_one_fine_tune_and_the_error_comes_back_down():
    rng = np.random.default_rng(7)
    fired = []
    loop = FeedbackLoop(threshold=0.08, alpha=0.3, min_samples=5, on_drift=fired.append)
    before = run(loop, rng, factor=1.0, steps=40)
    assert loop.signals == [] and len(loop.calibrations) == 1 and np.mean(before[5:]) < 0.03
    shifted = run(loop, rng, factor=1.8, steps=40)  # pods now use 80 % more than they request
    assert len(loop.signals) == 1 and fired == loop.signals
    sig = loop.signals[0]
    assert sig.moving_error > sig.threshold
    assert sig.factor_before == pytest.approx(1.0, abs=0.02)
    assert sig.factor_after == pytest.approx(1.8, abs=0.1)
    assert sig.error_after < sig.threshold
    assert sig.samples >= 5  # refit only on what was observed since the shift
    assert max(shifted[:5]) > 0.08  # right after the shift the error is large
    assert np.mean(shifted[-20:]) < 0.03  # and small again after the fine-tune
    assert loop.model.factor == pytest.approx(1.8, abs=0.05)


def test_node_metrics_feed_observes_nodes_with_a_decision_and_skips_the_rest(api, kube, measured_at):
    measured_at(T0)
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0 - 60)  # decided a minute before
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    api.node_metrics = {"n0": {"cpu": "1", "memory": "1Gi"},  # 1000m of 8000m
                        "n1": {"cpu": "3", "memory": "1Gi"},  # no decision there: skipped
                        "n2": {"cpu": "bogus", "memory": "1Gi"}}
    loop.predict("ns/p2", "n2", 1000.0, 4000.0)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    assert feed.poll() == 1 and feed.polls == 1
    d = loop.by_key["ns/p0"]
    assert d.observed_util == pytest.approx(0.125)
    assert d.errors["utilization"] == pytest.approx(0.125 - 0.25)
    assert loop.by_key["ns/p2"].observed_util is None  # an unreadable quantity is not an observation


def test_node_metrics_with_a_base_load_do_not_fine_tune_on_every_cooldown(api, kube, measured_at):
    """metrics-server counts the kubelet and system daemons, which no pod requests: every node
    shows 2,500m more than its pods use. No usage factor explains that, so fine-tunes cannot
    remove the error; they must come ever more rarely, not once per cooldown for ever."""
    measured_at(None)  # every poll reads new measurements
    loop = FeedbackLoop(threshold=0.1, alpha=0.3, min_samples=5, cooldown=20, calibration=5, clock=lambda: T0 - 60)
    requested = {f"n{i}": 1000.0 + 1500.0 * i for i in range(5)}  # 1000m .. 7000m of 8 cores
    for node, req in requested.items():
        loop.predict(f"ns/{node}-pod", node, req, 8000.0)
    api.node_metrics = {node: {"cpu": f"{int(req + 2500)}m", "memory": "1Gi"} for node, req in requested.items()}
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    for _ in range(200):  # 1,000 observations: 50 cooldowns
        assert feed.poll() == 5
    at = [t.observation for t in loop.signals]
    assert 1 <= len(at) <= 6, at
    assert all(b - a >= 2 * 20 for a, b in zip(at[1:], at[2:], strict=False)), at
    d = loop.by_key["ns/n0-pod"]
    assert d.observed_util == pytest.approx(3500 / 8000)  # usage over the same allocatable CPU as predicted


# --- review: which measurement belongs to which decision ---------------------------------------------


def test_node_metrics_measured_before_a_placement_do_not_complete_it(api, kube, measured_at):
    """metrics-server serves the kubelet's last scrape (15-60 s old): read right after a bind,
    it cannot show the new pod. It completed the decision with the node's usage without the pod
    (error -0.25 here) and fitted it against requests with the pod."""
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0)
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)  # bound at T0 ...
    api.node_metrics = {"n0": {"cpu": "2", "memory": "1Gi"}}
    measured_at(T0 - 2)  # ... measured 2 s before (whole seconds: taken at T0 - 1 at the latest)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    assert feed.poll() == 0 and loop.observations == 0
    assert loop.by_key["ns/p0"].observed_util is None  # still waiting for a measurement that can show it
    measured_at(T0 + 15)  # the next scrape
    assert feed.poll() == 1
    d = loop.by_key["ns/p0"]
    assert d.observed_util == pytest.approx(0.25) and d.errors["utilization"] == pytest.approx(0.0)
    assert d.observed_at == T0 + 15  # the start of that second (the earliest the scrape was taken)


def test_a_measurement_between_two_placements_is_fitted_against_the_requests_it_saw(api, kube, measured_at):
    now = [T0]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: now[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)  # at T0: 2000m on the node
    now[0] = T0 + 30
    loop.predict("ns/p1", "n0", 6000.0, 8000.0)  # at T0 + 30: 6000m
    api.node_metrics = {"n0": {"cpu": "2", "memory": "1Gi"}}
    measured_at(T0 + 10)  # after the first bind, before the second
    assert NodeMetricsFeed(kube, loop, interval_s=3600).poll() == 1
    assert loop.by_key["ns/p0"].observed_util == pytest.approx(0.25)
    assert loop.by_key["ns/p1"].observed_util is None
    assert loop.experience[-1].requests == {"default": 2000.0}  # not the 6000m that came later
    assert loop.errors[-1] == pytest.approx(0.0)


def test_a_poll_interval_that_is_not_positive_is_refused(kube):
    loop = FeedbackLoop(threshold=0.1)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="interval_s: must be a finite number > 0"):
            NodeMetricsFeed(kube, loop, interval_s=bad)


# --- review: each scrape once, against what the node holds now ---------------------------------------


def test_each_node_metrics_scrape_is_fed_once(api, kube):
    """metrics-server serves a node's last scrape (same ``timestamp``) until the next one, 60 s
    later by default, and the feed polls every 30 s: each measurement was observed twice, which
    doubled its weight in the moving error."""
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0 - 60)
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    loop.predict("ns/p1", "n1", 4000.0, 8000.0)
    api.set_node_metrics("n0", "2", at=T0)
    api.set_node_metrics("n1", "4", at=T0)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    assert feed.poll() == 2 and loop.observations == 2
    assert feed.poll() == 0 and loop.observations == 2  # the same two scrapes, read again
    assert feed.repeats == 2
    api.set_node_metrics("n0", "3", at=T0 + 60)  # n0 scraped again, n1 not yet
    assert feed.poll() == 1 and loop.observations == 3
    assert loop.experience[-1].observed == pytest.approx(3000 / 8000)
    api.set_node_metrics("n1", "4", at=T0 - 60)  # an older scrape (another metrics-server replica): not newer
    assert feed.poll() == 0 and loop.observations == 3


def test_a_feed_started_twice_is_refused(kube):
    loop = FeedbackLoop(threshold=0.1)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600).start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            feed.start()  # two threads would feed every poll twice
    finally:
        feed.stop()
    with pytest.raises(RuntimeError, match="already started"):
        feed.start()  # nor restarted once stopped
    assert sum(t.name == "node-metrics-feed" and t.is_alive() for t in threading.enumerate()) == 0


def test_node_metrics_are_judged_against_the_requests_the_node_holds_now(api, kube):
    """The feed compared every measurement with the requests recorded at the node's latest
    placement: pods that finished since still counted, and a node that emptied gave errors of
    -0.75 on every scrape, so the loop fine-tuned on nothing."""
    now: dict[str, tuple[dict[str, float], float] | None] = {"n0": ({"default": 1500.0}, 8000.0), "n1": None}
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=0, clock=lambda: T0 - 60)
    loop.predict("ns/p0", "n0", 6000.0, 8000.0)  # 6000m when it was placed; 1500m of it still runs
    loop.predict("ns/p1", "n1", 1000.0, 8000.0)  # n1 is gone from the cluster
    feed = NodeMetricsFeed(kube, loop, interval_s=3600, current=now.get)
    api.set_node_metrics("n0", "1500m", at=T0)
    api.set_node_metrics("n1", "1", at=T0)
    assert feed.poll() == 1  # n1: not known now, not judged
    assert loop.experience[-1].requests == {"default": 1500.0} and loop.experience[-1].capacity == 8000.0
    assert loop.errors[-1] == pytest.approx(0.0)
    assert loop.by_key["ns/p0"].observed_util == pytest.approx(1500 / 8000)  # the decision is completed
    now["n0"] = ({}, 8000.0)  # every pod of n0 finished
    for i in range(1, 11):
        api.set_node_metrics("n0", "0", at=T0 + 60 * i)
        assert feed.poll() == 1
    assert list(loop.errors)[-10:] == [0.0] * 10
    assert loop.signals == []  # nothing drifted


def test_with_current_requests_a_measurement_older_than_the_latest_placement_waits(api, kube):
    """The node's current requests count a pod placed after the measurement, which cannot show
    it: the measurement is skipped, the next scrape is judged."""
    clock = [T0]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)  # placed at T0; the cache counts it
    feed = NodeMetricsFeed(kube, loop, interval_s=3600, current=lambda node: ({"default": 2000.0}, 8000.0))
    api.set_node_metrics("n0", "0", at=T0 - 30)  # scraped before the pod started
    assert feed.poll() == 0 and loop.observations == 0
    api.set_node_metrics("n0", "2", at=T0 + 30)
    assert feed.poll() == 1 and loop.errors[-1] == pytest.approx(0.0)


wait_until = functools.partial(wait_for, timeout=10.0)  # the scheduler's cache follows the API server's watch


def test_the_scheduler_feeds_node_metrics_with_the_requests_in_its_cache(api, kubeconfig):
    """``iro scheduler``: a pod that finished and one another scheduler placed are what the node
    holds now; the requests recorded when its pods were placed (3000m) are not."""
    from iro_fed.k8s.client import Kube
    from iro_fed.k8s.scheduler import IroScheduler
    from iro_fed.k8s.testing import make_node, make_pod

    def finish(name: str) -> None:
        pod = api.get("pods", f"default/{name}")
        api.update("pods", dict(pod, status=dict(pod["status"], phase="Succeeded")))

    def cached(name: str) -> str | None:
        """The phase of the pod in the scheduler's cache (None: not there)."""
        pod = s.cache.pods.store.get(f"default/{name}")
        return None if pod is None else pod["status"].get("phase", "")

    api.add_node(make_node("n0", cpu="8"))
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=0)
    kube = Kube.from_kubeconfig(kubeconfig, user_agent="iro-scheduler/feedback")
    s = IroScheduler(kube, identity="a", leader_election=False, window_s=0.1, watch_timeout_s=5,
                     feedback=loop, metrics_poll_s=3600)  # polled by hand below
    s.start()
    try:
        for name in ("p0", "p1"):
            api.add_pod(make_pod(name, cpu="1500m", scheduler="iro"))
        assert api.wait_for(lambda: all((api.get("pods", f"default/{p}") or {}).get("spec", {}).get("nodeName")
                                        for p in ("p0", "p1")), 15)
        assert wait_until(lambda: "n0" in loop.latest and loop.latest["n0"].requested_cpu == 3000.0)
        finish("p0")
        api.add_pod(make_pod("other", cpu="500m", node="n0"))
        assert wait_until(lambda: cached("p0") == "Succeeded" and cached("other"))
        api.set_node_metrics("n0", "2", at=time.time() + 60)
        assert s.metrics_feed.poll() == 1
        assert loop.experience[-1].requests == {"default": 2000.0} and loop.experience[-1].capacity == 8000.0
        assert loop.errors[-1] == pytest.approx(0.0)
        finish("p1")  # the node empties
        api.delete("pods", "default/other")
        assert wait_until(lambda: cached("p1") == "Succeeded" and cached("other") is None)
        for i in range(2, 8):
            api.set_node_metrics("n0", "0", at=time.time() + 60 * i)
            assert s.metrics_feed.poll() == 1
    finally:
        s.stop()
    assert list(loop.errors)[-6:] == [0.0] * 6 and loop.signals == []
