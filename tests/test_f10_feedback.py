"""Feedback loop defects (f10): the refit's pull sized over the window, a latency trigger's
settled error in ms, fine-tunes that made no gradient update, the node's newest decision by time."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.feedback import DQNFineTune, FeedbackLoop, Sample, UsageModel
from tests.sim.helpers import needs_data

# --- 1. the pull towards the previous factors is worth 2 typical observations of the window -----


def _rows(rng: np.random.Generator, n: int, b_share: float, start: int = 0) -> list[Sample]:
    """Nodes of 1000 m: class ``a`` at 20-60 %, ``b`` at ``b_share``; both use what they request."""
    out = []
    for i in range(n):
        a = float(rng.uniform(200, 600))
        b = 1000.0 * b_share
        out.append(Sample(start + i, {"a": a, "b": b}, 1000.0, (a + b) / 1000.0 + float(rng.normal(0, 0.02))))
    return out


def test_a_class_barely_present_in_the_refit_keeps_the_pull_of_its_typical_share():
    """``b`` runs at 40 % on the window's nodes, at 0.5 % on the few recent ones: the pull sized
    from the recent rows alone was worth almost nothing, so noise of 0.02 swung b's factor by
    several units (the edge-iot example: ingest-edge-oslo 0.50 -> 0.13)."""
    rng = np.random.default_rng(7)
    window = _rows(rng, 100, 0.4)
    recent = _rows(rng, 6, 0.005, start=100)
    sized_by_window = UsageModel(factors={"a": 1.0, "b": 1.0}).fit(recent, typical=window + recent)
    assert sized_by_window["b"] == pytest.approx(1.0, abs=0.1)
    assert sized_by_window["a"] == pytest.approx(1.0, abs=0.1)
    # the old sizing (the refit's own rows; still the default without ``typical``) lets b swing
    assert abs(UsageModel(factors={"a": 1.0, "b": 1.0}).fit(recent)["b"] - 1.0) > 0.3


def test_the_loop_sizes_the_pull_over_its_whole_window():
    """FeedbackLoop's refits pass the window: the same fit as UsageModel.fit(recent, typical=window)."""
    rng = np.random.default_rng(7)
    loop = FeedbackLoop(threshold=0.5, calibration=0)
    loop.model.factors.update({"a": 1.0, "b": 1.0})
    for s in _rows(rng, 100, 0.4) + _rows(rng, 6, 0.005, start=100):
        loop.record_decision(f"p{s.index}", "n", s.requests, s.capacity, at=float(s.index))
        loop.observe("n", s.observed, requests=s.requests, capacity=s.capacity, at=float(s.index))
    recent = [s for s in loop.experience if s.index >= 100]
    expected = UsageModel(factors={"a": 1.0, "b": 1.0}).fit(recent, typical=list(loop.experience))
    assert loop._refit(recent, 0)[0] == pytest.approx(expected)
    assert loop.model.factors["b"] == pytest.approx(1.0, abs=0.1)


@needs_data
def test_edge_iot_ingest_shift_keeps_the_small_site_factor_and_predicts_the_next_observations():
    """The documented edge-iot run (seed 2, ingest x 1.6 at hour 6): the fine-tune's refit put
    ingest-edge-oslo at 0.13 (from 0.50, its use having risen 1.6 x) and predicted the next 20
    observations no better than the old model (0.155 vs 0.160). Since edge-iot draws each
    service's noise from its own stream (2026-12-06) the run's factor is 0.39 before the trigger
    (0.37 after); the check is that the refit keeps it (the defect took it to a quarter)."""
    from iro_fed.sim.feedback import run_feedback_sim

    settings = {
        "start": "2020-03-02 06:00:00",
        "usage_noise": "0.1",
        "usage_shift_at_h": "6",
        "usage_shift_class": "ingest-*",
        "usage_shift_factor": "1.6",
    }
    run = run_feedback_sim("edge-iot", seed=2, hours=12, settings=settings, terms=False)
    trigger = run.loop.signals[0]
    assert trigger.factors_before["ingest-edge-oslo"] == pytest.approx(0.39, abs=0.05)
    assert trigger.factors_after["ingest-edge-oslo"] > 0.8 * trigger.factors_before["ingest-edge-oslo"]
    after = UsageModel(factors=dict(trigger.factors_after), saturated=0.98, max_util=1.0)
    following = [s for s in run.loop.experience if trigger.observation <= s.index < trigger.observation + 20]
    assert len(following) == 20
    assert np.mean([abs(s.observed - after.predict(s.requests, s.capacity)) for s in following]) < 0.12


# --- 2. a latency trigger settles in ms ------------------------------------------------------------


def test_a_latency_trigger_records_the_latency_moving_error_when_it_settles():
    """``settled_error`` of a latency trigger held the utilization moving error (a CPU share)."""
    loop = FeedbackLoop(threshold=5.0, latency_threshold_ms=3.0, alpha=0.5, min_samples=3, calibration=3, cooldown=50)
    seen: list[float | None] = []
    for i in range(60):
        loop.record_decision(f"p{i}", "n", {"web": 2000.0}, 8000.0, klass="web", network_latency_ms=2.0)
        loop.observe("n", 0.125 + (0.1 if i % 2 else -0.1), requests={"web": 2000.0}, capacity=8000.0)
        loop.observe_latency(f"p{i}", 7.0 if i < 15 else 17.0)  # the service got 10 ms slower
        if loop.signals and loop.signals[0].settled_error is not None and not seen:
            seen.append(loop.moving_latency_error)
    t = loop.signals[0]
    assert t.quantity == "latency_ms" and seen
    assert t.settled_error == pytest.approx(seen[0])
    assert abs(t.settled_error - loop.moving_error) > 0.01  # not the utilization error (about 0.1)


# --- 3. a fine-tune that made no gradient update is never published ---------------------------


def test_the_minimum_fine_tune_steps_follow_the_dqn_settings():
    from iro_fed.feedback import fine_tune_min_steps

    assert fine_tune_min_steps() == 64 + 3 - 1  # a default batch, each transition complete 2 decisions later
    assert fine_tune_min_steps({"batch_size": 8, "n_step": 1}) == 8
    assert fine_tune_min_steps({"batch_size": 8, "learning_starts": 20}) == 22


@needs_data
def test_a_fine_tune_too_short_to_learn_is_refused_and_publishes_nothing(tmp_path):
    """steps=10 trained 10 decisions, made 0 updates and published the starting weights as
    "fine-tuned" version 1, moving ``latest``."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    reg = tmp_path / "reg"
    action = DQNFineTune(registry=reg, scenario="edge-iot", hours=0.5, steps=10, seed=0)
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, cooldown=3, actions=[action])
    for i in range(3):
        loop.record_decision(f"p{i}", "n", 4000.0, 8000.0)
        loop.observe("n", 0.5)
    for _ in range(4):
        loop.observe("n", 0.9)  # drift: one fine-tune
    result = loop.signals[0].results["dqn-fine-tune"]
    assert result.startswith("failed: ValueError: steps: 10") and "need at least 66" in result
    assert not (reg / "latest").exists() and not list(reg.glob("v*")) and action.results == []


@needs_data
def test_a_fine_tune_that_ends_before_its_first_update_publishes_nothing(tmp_path):
    """A time limit that stops training before any update: nothing published, a clear failure."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    from iro_fed.feedback import fine_tune_min_steps
    from tests.sim.test_feedback_sim import TINY, train_start_policy

    start = tmp_path / "start.pt"
    train_start_policy(start, 16)
    reg = tmp_path / "reg"
    action = DQNFineTune(
        registry=reg, policy=str(start), scenario="edge-iot", hours=0.5, steps=40, seed=0, time_limit_s=1e-9
    )
    with pytest.raises(RuntimeError, match="made no gradient update.*nothing published"):
        action(None, None)
    assert not (reg / "latest").exists() and not list(reg.glob("v*"))
    # the least accepted number of steps makes an update, one fewer is refused before training
    least = fine_tune_min_steps(TINY)
    DQNFineTune(registry=reg, policy=str(start), scenario="edge-iot", hours=0.5, steps=least, seed=0)(None, None)
    assert (reg / "latest").is_file()
    with pytest.raises(ValueError, match=f"need at least {least}"):
        DQNFineTune(registry=reg, policy=str(start), scenario="edge-iot", hours=0.5, steps=least - 1, seed=0)(
            None, None
        )


# --- 8. the node's newest decision by its time ------------------------------------------------------


def test_an_observation_is_judged_against_the_newest_decision_by_time_not_the_last_recorded():
    loop = FeedbackLoop(threshold=0.1, calibration=0)
    loop.record_decision("p2", "n", {"a": 4000.0}, 8000.0, at=20.0)
    loop.record_decision("p1", "n", {"a": 1000.0}, 8000.0, at=10.0)  # older, recorded late (another bind worker)
    loop.observe("n", 0.5, at=25.0)
    assert loop.experience[-1].requests == {"a": 4000.0}
    loop.observe("n", 0.5, at=30.0)  # no new decision: the node still holds what p2's decision saw
    assert loop.experience[-1].requests == {"a": 4000.0}
    # of two decisions made at the same time, the one recorded last
    loop.record_decision("p3", "m", {"a": 1000.0}, 8000.0, at=5.0)
    loop.record_decision("p4", "m", {"a": 3000.0}, 8000.0, at=5.0)
    loop.observe("m", 0.2, at=6.0)
    assert loop.experience[-1].requests == {"a": 3000.0}
