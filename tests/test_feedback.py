"""Feedback loop units: NNLS, the per-class usage model, the moving error with its calm band,
threshold and re-arming, calibration, the fine-tune actions and the Prometheus metrics."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from iro_fed.feedback import (
    DriftDetector,
    FederatedRoundRequest,
    FeedbackConfig,
    FeedbackLoop,
    Sample,
    UsageModel,
    network_latency,
    nnls,
    placement_terms,
)

# --- NNLS ---------------------------------------------------------------------------------------


def test_nnls_recovers_exact_non_negative_coefficients():
    a = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0]])
    x_true = np.array([0.5, 1.5, 0.25])
    assert nnls(a, a @ x_true) == pytest.approx(x_true, abs=1e-10)


def test_nnls_clamps_what_least_squares_would_make_negative():
    # Unconstrained least squares gives x = (2, -1); with x >= 0 the optimum is (x1 only) 6/5... hand-made:
    a = np.array([[1.0, 1.0], [1.0, 2.0]])
    b = np.array([1.0, 0.0])
    unconstrained = np.linalg.solve(a, b)
    assert unconstrained[1] < 0
    x = nnls(a, b)
    assert x[1] == 0.0
    # with x2 = 0 the best x1 minimises (x1 - 1)^2 + x1^2 -> 0.5
    assert x[0] == pytest.approx(0.5)
    # KKT: the gradient is zero on the free variable and points outwards on the clamped one
    grad = a.T @ (a @ x - b)
    assert grad[0] == pytest.approx(0.0, abs=1e-12) and grad[1] >= -1e-12


def test_nnls_all_zero_when_every_direction_hurts_and_rejects_bad_input():
    assert nnls(np.eye(2), np.array([-1.0, -2.0])) == pytest.approx([0.0, 0.0])
    assert nnls(np.zeros((0, 2)), np.zeros(0)).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="a is"):
        nnls(np.ones((3, 2)), np.ones(2))
    with pytest.raises(ValueError, match="finite"):
        nnls(np.array([[np.nan]]), np.array([1.0]))


# --- usage model ----------------------------------------------------------------------------------


def test_usage_model_fits_one_factor_per_class_on_hand_made_nodes():
    # web pods use 0.5 of their request, batch 0.9: four nodes of 8 cores
    nodes = [({"web": 2000, "batch": 4000}, 8000), ({"web": 4000}, 8000), ({"batch": 2000}, 8000),
             ({"web": 1000, "batch": 1000}, 8000)]
    samples = [Sample(i, req, cap, (0.5 * req.get("web", 0) + 0.9 * req.get("batch", 0)) / cap)
               for i, (req, cap) in enumerate(nodes)]
    m = UsageModel()
    factors = m.fit(samples)
    assert factors == pytest.approx({"web": 0.5, "batch": 0.9}, abs=1e-9)
    assert m.predict({"web": 4000, "batch": 4000}, 8000) == pytest.approx(0.7)
    assert m.predict({"new": 800}, 8000) == pytest.approx(0.1)  # an unknown class: default factor 1
    assert m.predict({"web": 1000}, 0) == 0.0


def test_usage_model_single_class_is_least_squares_through_the_origin():
    m = UsageModel()
    assert m.fit([(1000, 4000, 0.5), (2000, 4000, 1.0)]) == {"default": pytest.approx(2.0)}
    assert m.factor == pytest.approx(2.0)
    assert m.predict(1000, 4000) == pytest.approx(0.5)


def test_usage_model_keeps_classes_it_cannot_tell_apart_near_their_previous_factors():
    # "a" and "b" always run in the same proportion: the data fix only 1*a + 1*b = 1.2.
    m = UsageModel(factors={"a": 0.6, "b": 0.6})
    samples = [Sample(i, {"a": 1000.0 * k, "b": 1000.0 * k}, 8000, 1.2 * 1000 * k / 8000) for i, k in enumerate((1, 2, 3))]
    f = m.fit(samples)
    assert f["a"] + f["b"] == pytest.approx(1.2, abs=1e-6)
    assert f["a"] == pytest.approx(0.6, abs=1e-6)  # the pull picks the split closest to before


def test_usage_model_capped_measurements_are_left_out_of_the_fit():
    m = UsageModel(saturated=0.98, max_util=1.0)
    samples = [Sample(0, {"c": 4000}, 8000, 0.6), Sample(1, {"c": 16000}, 8000, 1.0)]  # the second is capped
    assert m.fit(samples)["c"] == pytest.approx(1.2)
    assert m.predict({"c": 16000}, 8000) == 1.0


def test_latency_offset_is_the_mean_excess_over_the_network_latency():
    m = UsageModel()
    m.fit_latency([("web", 2.0, 7.0), ("web", 2.0, 9.0), ("api", 10.0, 12.0)])
    assert m.predict_latency("web", 3.0) == pytest.approx(9.0)
    assert m.predict_latency("api", 10.0) == pytest.approx(12.0)
    assert m.predict_latency("web", None) is None


# --- moving error, calm band, threshold, re-arming --------------------------------------------------


def test_drift_detector_ewma_calm_band_threshold_and_min_samples():
    det = DriftDetector(threshold=0.1, alpha=0.5, calm=0.5, min_samples=3, cooldown=100)
    assert det.update(0.0, 0) is False and det.value == 0.0
    assert det.update(0.2, 1) is False and det.value == pytest.approx(0.1)  # left the calm band (> 0.05)
    assert det.drift_start == 1
    assert det.update(0.2, 2) is False and det.value == pytest.approx(0.15)  # above 0.1, 2 samples only
    assert det.update(0.2, 3) is True and det.value == pytest.approx(0.175)  # 3 samples since leaving calm
    det.disarm()
    assert det.update(0.4, 4) is False  # disarmed: no storm
    for i in range(5, 12):
        det.update(0.0, i)
    assert det.value <= 0.05 and det.armed and det.drift_start is None  # calm again: re-armed


def test_drift_detector_rearms_after_the_cooldown_and_judges_only_what_came_after():
    det = DriftDetector(threshold=0.1, alpha=1.0, calm=0.5, min_samples=2, cooldown=5)
    det.update(0.3, 0)
    assert det.update(0.3, 1) is True
    det.disarm()
    fired = [det.update(0.3, i) for i in range(2, 10)]
    # re-armed at index 6 (5 after the fine-tune), then needs 2 samples: fires at 7, once
    assert fired == [False, False, False, False, False, True, True, True]
    assert det.drift_start == 6


def _feed(loop: FeedbackLoop, rng: np.random.Generator, web: float, batch: float, n: int) -> list[float]:
    errors = []
    for i in range(n):
        node = f"n{i % 6}"
        req = {"web": float(rng.choice([1000, 2000, 3000])), "batch": float(rng.choice([0, 2000, 4000]))}
        loop.record_decision(f"p{i}", node, req, 8000.0, klass="web")
        observed = (web * req["web"] + batch * req["batch"]) / 8000.0 + float(rng.normal(0, 0.005))
        errors.append(loop.observe(node, observed, requests=req, capacity=8000.0))
    return errors


def test_loop_calibrates_then_one_shift_gives_one_fine_tune_and_the_error_comes_back():
    rng = np.random.default_rng(3)
    fired = []
    loop = FeedbackLoop(FeedbackConfig(threshold=0.05, alpha=0.2, min_samples=5, calibration=20, cooldown=40,
                                       refit_every=25, settle_every=5), on_drift=fired.append)
    _feed(loop, rng, web=0.5, batch=0.9, n=120)
    assert len(loop.calibrations) == 1 and loop.signals == []
    assert loop.model.factors == pytest.approx({"web": 0.5, "batch": 0.9}, abs=0.02)
    assert loop.moving_error < 0.02
    _feed(loop, rng, web=0.5, batch=1.6, n=120)  # batch now uses 1.6 x its request
    assert len(loop.signals) == 1 and fired == loop.signals
    t = loop.signals[0]
    assert t.kind == "fine-tune" and t.moving_error > t.threshold == 0.05
    assert t.factors_before["batch"] == pytest.approx(0.9, abs=0.02)
    assert t.factors_after["batch"] > t.factors_before["batch"] + 0.2 and t.error_after < t.moving_error / 2
    assert 5 <= t.samples < 40  # only the recent experience, not the window
    assert t.settled_error is not None and t.settled_error < t.threshold
    assert loop.model.factors["batch"] == pytest.approx(1.6, abs=0.03)
    assert loop.model.factors["web"] == pytest.approx(0.5, abs=0.03)
    assert loop.moving_error < 0.02
    # every decision has its observed outcome and its error
    d = loop.decisions[-1]
    assert d.observed_util is not None and d.errors["utilization"] == pytest.approx(d.observed_util - d.predicted_util)


def test_a_model_that_cannot_fit_retries_once_per_cooldown_not_every_observation():
    rng = np.random.default_rng(0)
    loop = FeedbackLoop(threshold=0.05, alpha=0.5, min_samples=3, calibration=0, cooldown=20, settle_every=0)
    for i in range(100):  # pure noise: no factor explains it
        loop.record_decision(f"p{i}", "n", {"web": 4000.0}, 8000.0)
        loop.observe("n", float(rng.uniform(0, 1)))
    assert 2 <= len(loop.signals) <= 100 // 20 + 1


def test_a_new_class_is_calibrated_not_judged():
    rng = np.random.default_rng(5)
    loop = FeedbackLoop(threshold=0.05, alpha=0.3, min_samples=5, calibration=10)
    for i in range(40):
        req = {"web": float(rng.choice([2000, 4000]))}
        loop.record_decision(f"w{i}", "n0", req, 8000.0)
        loop.observe("n0", 0.5 * req["web"] / 8000, requests=req, capacity=8000.0)
    for i in range(10):  # a new kind of pod that uses 3 x its request: not a drift of the model
        req = {"web": 2000.0, "gpu-train": 1000.0}
        loop.record_decision(f"g{i}", "n1", req, 8000.0, klass="gpu-train")
        loop.observe("n1", (0.5 * 2000 + 3.0 * 1000) / 8000, requests=req, capacity=8000.0)
    assert loop.signals == [] and len(loop.calibrations) == 2
    assert loop.model.factors["gpu-train"] == pytest.approx(3.0, abs=0.05)


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="alpha"):
        FeedbackLoop(alpha=0)
    with pytest.raises(ValueError, match="threshold"):
        FeedbackLoop(threshold=0)
    with pytest.raises(ValueError, match="calm"):
        FeedbackConfig(calm=1.0)
    with pytest.raises(ValueError, match="min_sampels: unknown feedback setting"):
        FeedbackLoop(min_sampels=3)
    with pytest.raises(ValueError, match="cooldown"):
        FeedbackConfig(cooldown=-1)


def test_observation_of_an_unknown_node_is_ignored_and_a_bad_value_is_refused():
    assert FeedbackLoop().observe("nowhere", 0.5) is None
    assert FeedbackLoop().observe_latency("nobody", 5.0) is None
    loop = FeedbackLoop()
    loop.record_decision("p", "n", 1000.0, 4000.0)
    with pytest.raises(ValueError, match="observed_util: expected a finite number >= 0 for node 'n', got nan"):
        loop.observe("n", float("nan"))
    with pytest.raises(ValueError, match="latency_ms"):
        loop.observe_latency("p", -1.0)
    assert loop.observations == 0 and loop.by_key["p"].observed_util is None  # nothing half-recorded


def test_latency_is_predicted_observed_and_tracked():
    loop = FeedbackLoop(threshold=0.1, calibration=2, min_samples=2)
    for i in range(6):
        loop.record_decision(f"p{i}", "n", {"web": 2000.0}, 8000.0, klass="web", network_latency_ms=2.0)
        loop.observe("n", 0.125, requests={"web": 2000.0}, capacity=8000.0)
        loop.observe_latency(f"p{i}", 7.0)
    assert loop.model.latency_offset_ms["web"] == pytest.approx(5.0)
    last = loop.by_key["p5"]
    assert last.expected_latency_ms == pytest.approx(7.0) and last.errors["latency_ms"] == pytest.approx(0.0)
    assert loop.moving_latency_error == pytest.approx(0.0, abs=1e-9)
    assert loop.summary()["decision_mae_latency_ms"] is not None


# --- objective terms ---------------------------------------------------------------------------------


def test_placement_terms_come_from_the_objective(small_doc):
    from iro_fed.objective import evaluate
    from iro_fed.problem_io import problem_from_dict

    problem = problem_from_dict(small_doc)
    assignment = np.array([0, 1, 2])
    delta, terms = placement_terms(problem, assignment, 0)
    without = assignment.copy()
    without[0] = -1
    assert delta == pytest.approx(evaluate(problem, assignment).score - evaluate(problem, without).score)
    assert sum(terms.values()) == pytest.approx(delta)
    assert terms["unplaced"] > 0  # placing the pod relieves its penalty
    assert network_latency(problem, 0, 0) == pytest.approx(3.0)  # users-eu -> edge-1
    assert network_latency(problem, 1, 1) is None  # the GPU pod has no user region
    loop = FeedbackLoop()
    from iro_fed.model import ClusterState

    state = ClusterState(problem)
    state.place(0, 0)
    d = loop.record_placement(problem.workloads[0].name, problem.nodes[0].name, problem, state)
    assert d.delta_r is not None and d.terms and d.network_latency_ms == pytest.approx(3.0)


# --- actions ---------------------------------------------------------------------------------------------


def _trigger_once(loop: FeedbackLoop) -> None:
    for i in range(4):
        loop.record_decision(f"p{i}", "n", 4000.0, 8000.0)
        loop.observe("n", 0.5)
    for _ in range(8):
        loop.observe("n", 0.9)


def test_two_writers_of_one_site_in_the_same_second_keep_both_requests(tmp_path):
    """A restarted process (its counter starts again at 1) or a second process of the same site
    writing within the same second: before, both named the file <second>-<site>-0001.json and the
    second replaced the first, unprocessed, request."""
    first = FederatedRoundRequest(tmp_path / "registry", site="edge-madrid")
    again = FederatedRoundRequest(tmp_path / "registry", site="edge-madrid")
    for req in (first, again):
        _trigger_once(FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, actions=[req]))
    files = sorted((tmp_path / "registry" / "requests").iterdir())
    assert len(files) == 2 and {f.name for f in files} == {first.written[0].name, again.written[0].name}


def test_federated_round_request_is_written_atomically(tmp_path):
    req = FederatedRoundRequest(tmp_path / "registry", site="edge-madrid")
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, actions=[req])
    _trigger_once(loop)
    assert len(loop.signals) == 1
    files = sorted((tmp_path / "registry" / "requests").iterdir())
    assert [f.name for f in files] == [req.written[0].name]  # no temporary file left behind
    doc = json.loads(files[0].read_text())
    assert doc["format"] == "iro-fed/round-request/1" and doc["site"] == "edge-madrid"
    assert doc["moving_error"] == pytest.approx(loop.signals[0].moving_error) and doc["threshold"] == 0.1
    assert loop.signals[0].results["federated-round-request"] == str(files[0])
    from iro_fed.federated.registry import PolicyRegistry

    assert PolicyRegistry(tmp_path / "registry").versions() == []  # the registry ignores the requests folder


def test_a_failing_action_is_recorded_and_the_loop_goes_on():
    def broken(loop, trigger):
        raise RuntimeError("registry offline")

    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, actions=[broken])
    _trigger_once(loop)
    assert loop.signals[0].results["broken"].startswith("failed: RuntimeError: registry offline")
    assert loop.observe("n", 0.9) is not None


def test_background_actions_leave_observe_free_and_run_one_trigger_at_a_time():
    release, started = threading.Event(), threading.Event()
    runs = []

    def slow_fine_tune(loop, trigger):  # a DQN fine-tune of minutes, here until the test releases it
        started.set()
        assert release.wait(30), "observe() waited for the action: it should run on the worker"
        runs.append(trigger.moving_error)
        return "trained"

    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, actions=[slow_fine_tune],
                        background_actions=True)
    _trigger_once(loop)  # returns although the action blocks until released
    assert len(loop.signals) == 1 and started.wait(30)
    assert loop.signals[0].results["slow_fine_tune"] == "queued" and runs == []
    assert loop.observe("n", 0.9) is not None  # observations go on meanwhile
    assert not loop.wait_actions(timeout=0.01)
    release.set()
    assert loop.wait_actions(timeout=30)
    assert runs == [loop.signals[0].moving_error] and loop.signals[0].results["slow_fine_tune"] == "trained"
    loop.close(timeout=30)
    assert all(t.name != "feedback-actions" for t in threading.enumerate())


def test_prometheus_metrics_are_exported():
    prom = pytest.importorskip("prometheus_client")
    registry = prom.CollectorRegistry()
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, registry=registry)
    _trigger_once(loop)
    assert registry.get_sample_value("iro_feedback_drift_total") == 1
    assert registry.get_sample_value("iro_feedback_calibrations_total") == 1
    assert registry.get_sample_value("iro_feedback_observations_total") == 12
    assert registry.get_sample_value("iro_feedback_threshold", {"quantity": "utilization"}) == 0.1
    assert registry.get_sample_value("iro_feedback_error", {"quantity": "utilization"}) == pytest.approx(loop.moving_error)
    assert registry.get_sample_value("iro_feedback_usage_factor", {"workload_class": "default"}) == pytest.approx(
        loop.model.factors["default"])


def test_a_perception_snapshot_is_observed():
    from iro_fed.feedback import observe_snapshot
    from iro_fed.metrics import ClusterSnapshot, NodeUsage, ServiceStats

    loop = FeedbackLoop(threshold=0.1, calibration=0)
    loop.record_decision("ns/web-1", "n0", {"web": 4000.0}, 8000.0, klass="web", network_latency_ms=2.0)
    loop.record_decision("ns/job-1", "n1", {"batch": 2000.0}, 8000.0, klass="batch")
    snap = ClusterSnapshot(taken_at=0.0, source="test",
                           nodes={"n0": NodeUsage(cpu_millicores=3000.0, cpu_capacity_millicores=8000.0),
                                  "n1": NodeUsage(memory_mib=100.0),  # no CPU reading: skipped
                                  "n9": NodeUsage(cpu_millicores=1.0)},  # no decision there: skipped
                           services={"web": ServiceStats(p99_latency_ms=12.0)})
    assert observe_snapshot(loop, snap) == 1
    web = loop.by_key["ns/web-1"]
    assert web.observed_util == pytest.approx(0.375) and web.errors["utilization"] == pytest.approx(0.375 - 0.5)
    assert web.observed_latency_ms == 12.0 and web.errors["latency_ms"] == pytest.approx(10.0)
    assert loop.by_key["ns/job-1"].observed_util is None


def test_a_latency_threshold_triggers_a_fine_tune_of_the_latency_offset():
    loop = FeedbackLoop(threshold=0.5, latency_threshold_ms=3.0, alpha=0.5, min_samples=3, calibration=3, cooldown=50)
    for i in range(40):
        loop.record_decision(f"p{i}", "n", {"web": 2000.0}, 8000.0, klass="web", network_latency_ms=2.0)
        loop.observe("n", 0.125, requests={"web": 2000.0}, capacity=8000.0)
        loop.observe_latency(f"p{i}", 7.0 if i < 15 else 17.0)  # the service got 10 ms slower
    assert [t.quantity for t in loop.signals] == ["latency_ms"]
    assert loop.signals[0].moving_error > 3.0
    assert loop.model.latency_offset_ms["web"] == pytest.approx(15.0)
    assert loop.moving_latency_error < 0.1


# --- review: debouncing, persistent offsets, units --------------------------------------------------


def test_one_calm_dip_of_a_noisy_error_does_not_re_arm_the_detector():
    det = DriftDetector(threshold=0.1, alpha=1.0, calm=0.5, min_samples=3, cooldown=100)
    det.update(0.3, 0)
    det.update(0.3, 1)
    assert det.update(0.3, 2) is True
    det.disarm()
    # one error in the calm band among large ones: not calm, so no second fine-tune
    fired = [det.update(e, i) for i, e in enumerate([0.2, 0.0, 0.2, 0.2, 0.2, 0.2], start=3)]
    assert fired == [False] * 6 and not det.armed
    for i in range(9, 12):  # calm for min_samples in a row: re-armed
        det.update(0.0, i)
    assert det.armed


def test_a_fine_tune_that_helped_leaves_the_cooldown_as_it_was():
    det = DriftDetector(threshold=0.1, alpha=1.0, calm=0.5, min_samples=2, cooldown=10)
    for shift in range(3):  # three separate shifts, each fixed: each fires once, cooldown unchanged
        assert [det.update(0.3, 100 * shift + i) for i in range(2)] == [False, True]
        det.disarm()
        assert det.cooldown_now == 10
        for i in range(2, 14):
            det.update(0.0, 100 * shift + i)
        assert det.armed and det.unsettled == 0


def test_a_persistent_offset_the_model_cannot_fit_does_not_fine_tune_forever():
    """Node usage = requests + a base load of 25 % of the node (system daemons, which
    metrics-server counts and requests do not). No factor fits it; each refit leaves the moving
    error near the threshold, with calm dips. Fine-tunes must come ever more rarely: this loop
    fired 46 times in 2,000 observations, one every 16-60, for ever."""
    rng = np.random.default_rng(0)
    loop = FeedbackLoop(threshold=0.1, alpha=0.3, min_samples=5, cooldown=50)
    for i in range(2000):
        req = float(rng.uniform(500, 7000))
        loop.observe(f"n{i % 20}", req / 8000.0 + 0.25, requests={"default": req}, capacity=8000.0)
    at = [t.observation for t in loop.signals]
    assert 1 <= len(at) <= 7, at
    gaps = np.diff(at)
    assert (gaps[1:] >= 2 * 50).all(), at  # after one that did not help: 2x, 4x, ... the cooldown


def test_a_snapshot_is_observed_as_a_share_of_the_cpu_the_decision_predicted_for():
    """The scheduler predicts shares of a node's allocatable CPU (7,600m of an 8-core node);
    a perception snapshot reports the machine's 8,000m. 3,800m used is a 0.5 share of what was
    predicted for, not 0.475: dividing by the snapshot's capacity mixed the two."""
    from iro_fed.feedback import observe_snapshot
    from iro_fed.metrics import ClusterSnapshot, NodeUsage

    loop = FeedbackLoop(threshold=0.1, calibration=0)
    loop.record_decision("ns/web-1", "n0", {"default": 3800.0}, 7600.0)
    snap = ClusterSnapshot(taken_at=0.0, source="test",
                           nodes={"n0": NodeUsage(cpu_millicores=3800.0, cpu_capacity_millicores=8000.0)})
    assert observe_snapshot(loop, snap) == 1
    d = loop.by_key["ns/web-1"]
    assert d.predicted_util == pytest.approx(0.5)
    assert d.observed_util == pytest.approx(0.5) and d.errors["utilization"] == pytest.approx(0.0)


def test_a_node_with_nothing_requested_is_judged_without_dividing_by_the_prediction():
    # predicted share 0 (no requests): the error is absolute, never observed / predicted
    loop = FeedbackLoop(threshold=0.1, calibration=0)
    loop.record_decision("ns/p", "n0", {}, 8000.0)
    assert loop.observe("n0", 0.05) == pytest.approx(0.05)
    assert loop.by_key["ns/p"].errors["utilization"] == pytest.approx(0.05)
    assert loop.observe("n0", 0.0, requests={}, capacity=0.0) == 0.0  # no capacity: share 0, no error


# --- review: bad values, bounded memory, rescheduled pods, measurement times ----------------------------


def _calibrated_loop(**kw) -> FeedbackLoop:
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, **kw)
    loop.record_decision("p", "n", 4000.0, 8000.0)
    loop.observe("n", 0.5)
    loop.observe("n", 0.5)
    assert loop.calibrated and loop.model.factors == {"default": pytest.approx(1.0)}
    return loop


def test_a_nan_capacity_is_refused_and_cannot_silence_the_drift_detector():
    """One observation with capacity NaN made the moving error NaN for good: NaN is never above
    the threshold, so no fine-tune ever fired again, whatever the error."""
    loop = _calibrated_loop()
    with pytest.raises(ValueError, match="capacity: expected a finite number >= 0, got nan"):
        loop.observe("n", 0.5, requests=4000.0, capacity=float("nan"))
    assert loop.observations == 2  # nothing recorded
    for _ in range(10):
        loop.observe("n", 0.95)  # the pods now use almost twice their requests
    assert np.isfinite(loop.moving_error) and len(loop.signals) == 1


def test_bad_requests_capacity_or_latency_of_a_decision_are_refused_and_nothing_is_recorded():
    """A NaN request was recorded; every refit of the window then raised inside observe()
    ("nnls: a and b must be finite"), after the observation had been counted."""
    loop = FeedbackLoop(threshold=0.1, calibration=2)
    for kwargs, field_name in (({"requests": {"web": float("nan")}}, r"requests\['web'\]"),
                               ({"requests": {"web": -500.0}}, r"requests\['web'\]"),
                               ({"requests": float("inf")}, "requests"),
                               ({"capacity": float("nan")}, "capacity"),
                               ({"capacity": -8000.0}, "capacity"),
                               ({"network_latency_ms": float("nan")}, "network_latency_ms")):
        args = {"requests": {"web": 1000.0}, "capacity": 8000.0, **kwargs}
        latency = args.pop("network_latency_ms", None)
        with pytest.raises(ValueError, match=field_name):
            loop.record_decision("p", "n", args["requests"], args["capacity"], network_latency_ms=latency)
    assert not loop.decisions and not loop.latest and not loop.pending and not loop.by_key
    with pytest.raises(ValueError, match=r"requests\['web'\]"):
        loop.observe("n", 0.5, requests={"web": float("nan")}, capacity=8000.0)
    assert loop.observations == 0 and not loop.experience


def test_settings_must_be_finite_numbers_and_keep_positive():
    for kwargs, name in (({"threshold": float("inf")}, "threshold"),  # would never fire
                         ({"latency_threshold_ms": float("inf")}, "latency_threshold_ms"),
                         ({"threshold": "0.1"}, "threshold"), ({"alpha": "x"}, "alpha"),
                         ({"calibration": True}, "calibration")):
        with pytest.raises(ValueError, match=name):
            FeedbackConfig(**kwargs)
    for keep in (0, -1):  # keep=0 raised IndexError in every record_decision
        with pytest.raises(ValueError, match="keep: must be an integer >= 1"):
            FeedbackLoop(keep=keep)


def test_feedback_sim_refuses_an_infinite_threshold_naming_the_setting(tmp_path, capsys):
    from iro_fed.cli import main

    out = tmp_path / "report.json"
    rc = main(["feedback-sim", "--scenario", "edge-iot", "--hours", "0.1", "--feedback-set", "threshold=inf",
               "--out", str(out)])
    assert rc == 2 and "--feedback-set threshold" in capsys.readouterr().err and not out.exists()


def test_decisions_waiting_for_a_node_never_measured_are_bounded_by_keep():
    """metrics-server down, or a node it does not report: each node kept up to 1,000 decisions
    waiting, long after ``decisions`` (``keep``) had let them go."""
    loop = FeedbackLoop(keep=10)
    for i in range(50):
        loop.record_decision(f"ns/p{i}", f"ghost-{i % 2}", 1000.0, 8000.0)
    waiting = [d for ds in loop.pending.values() for d in ds]
    assert len(waiting) == 10 and {id(d) for d in waiting} == {id(d) for d in loop.decisions}
    loop.observe("ghost-0", 0.2)  # what is left still completes
    assert all(d.observed_util == 0.2 for d in loop.decisions if d.node == "ghost-0")


def test_a_class_seen_only_on_saturated_nodes_is_not_recalibrated_on_every_observation():
    """Measurements capped at 100 % are left out of fits, so a class seen only on saturated nodes
    can never be fitted; it was "calibrated" (a refit and a record) on every observation."""
    loop = FeedbackLoop(threshold=0.1, calibration=5, min_samples=5, model=UsageModel(saturated=0.98, max_util=1.0))
    for _ in range(20):
        loop.observe("n0", 0.25, requests={"web": 4000.0}, capacity=8000.0)
    for _ in range(200):
        loop.observe("n1", 1.0, requests={"web": 2000.0, "hog": 8000.0}, capacity=8000.0)
    assert len(loop.calibrations) == 1 and "hog" not in loop.model.factors
    for _ in range(5):  # usable observations of it: calibrated once there are min_samples
        loop.observe("n2", (0.5 * 2000 + 0.6 * 1000) / 8000, requests={"web": 2000.0, "hog": 1000.0}, capacity=8000.0)
    assert len(loop.calibrations) == 2 and loop.model.factors["hog"] == pytest.approx(0.6, abs=1e-6)


def test_a_pod_rescheduled_under_the_same_name_is_judged_once_per_snapshot():
    """A StatefulSet pod recreated on another node has two decisions under one name. A snapshot
    observed the new one once per waiting decision (twice here, and again on every later snapshot,
    as the old one never completed)."""
    from iro_fed.feedback import observe_snapshot
    from iro_fed.metrics import ClusterSnapshot, ServiceStats

    loop = FeedbackLoop(threshold=0.1, calibration=0)
    old = loop.record_decision("ns/web-0", "n0", {"web": 1000.0}, 8000.0, klass="web", network_latency_ms=2.0)
    new = loop.record_decision("ns/web-0", "n1", {"web": 1000.0}, 8000.0, klass="web", network_latency_ms=10.0)
    snap = ClusterSnapshot(taken_at=0.0, source="test", services={"web": ServiceStats(p99_latency_ms=12.0)})
    for _ in range(3):
        observe_snapshot(loop, snap)
    assert new.observed_latency_ms == 12.0 and new.errors["latency_ms"] == pytest.approx(2.0)
    assert old.observed_latency_ms is None  # its pod is gone: not judged by the new one's latency
    assert [(k, net) for _, k, net, _ in loop.latency_experience] == [("web", 10.0)]


def test_a_measurement_older_than_a_decision_does_not_complete_it():
    loop = FeedbackLoop(threshold=0.1, calibration=0)
    d1 = loop.record_decision("ns/a", "n", {"default": 2000.0}, 8000.0, at=100.0)
    assert loop.observe("n", 0.25, at=150.0) == pytest.approx(0.0)
    d2 = loop.record_decision("ns/b", "n", {"default": 6000.0}, 8000.0, at=200.0)
    # measured at 180, before d2: compared with the 2000m the node held then, d2 keeps waiting
    assert loop.observe("n", 0.25, at=180.0) == pytest.approx(0.0)
    assert d1.observed_util == 0.25 and d2.observed_util is None
    assert loop.observe("n", 0.75, at=210.0) == pytest.approx(0.0)
    assert d2.observed_util == 0.75 and d2.errors["utilization"] == pytest.approx(0.0) and d2.observed_at == 210.0
    fresh = FeedbackLoop(threshold=0.1, calibration=0)
    fresh.record_decision("ns/c", "m", 1000.0, 8000.0, at=300.0)
    assert fresh.observe("m", 0.5, at=250.0) is None and fresh.observations == 0  # nothing known of m then
