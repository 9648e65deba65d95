"""The feedback loop in the real simulator (edge-iot, 12 h from 06:00, fixed seed).

Without a shift the loop calibrates once and never fine-tunes; when the ingest services start
using 1.6 x the CPU they used (hour 6), the moving error passes the threshold, one fine-tune
fires, and the error drops back below the threshold and stays there. The DQN fine-tune action
really trains and publishes a policy version atomically.
"""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.feedback import DQNFineTune, FeedbackLoop
from iro_fed.sim.engine import SimConfig, SimConfigError
from iro_fed.sim.feedback import SIM_FEEDBACK, run_feedback_sim
from tests.sim.helpers import needs_data

pytestmark = needs_data

BASE = {"usage_noise": 0.1, "start": "2020-03-02 06:00:00"}
SHIFT = {"usage_shift_at_h": 6.0, "usage_shift_factor": 1.6, "usage_shift_class": "ingest-*"}
SEED = 2


@pytest.fixture(scope="module")
def calm_run():
    return run_feedback_sim("edge-iot", seed=SEED, hours=12, settings=BASE)


@pytest.fixture(scope="module")
def shifted_run():
    return run_feedback_sim("edge-iot", seed=SEED, hours=12, settings={**BASE, **SHIFT})


def _ingest_mean(factors: dict[str, float]) -> float:
    return float(np.mean([f for c, f in factors.items() if c.startswith("ingest-")]))


def test_without_a_shift_the_loop_calibrates_once_and_never_fine_tunes(calm_run):
    rep = calm_run.report()
    threshold = SIM_FEEDBACK.threshold
    assert rep["fine_tunes"] == 0 and calm_run.loop.signals == []
    assert rep["calibrations"] >= 1 and calm_run.loop.calibrations[0].observation == SIM_FEEDBACK.calibration
    assert rep["observations"] > 200
    assert rep["moving_error_before_shift_max"] < threshold  # the whole run: no shift
    assert rep["moving_error_end"] < SIM_FEEDBACK.calm * threshold
    # every class is fitted to a plausible share of its request (replicas run near the HPA's 60 % target)
    assert set(rep["factors"]) >= {"batch", "ingest-edge-madrid", "control-edge-oslo"}
    assert all(0.3 < f < 1.1 for f in rep["factors"].values())


def test_decisions_carry_objective_terms_and_their_observed_outcome(calm_run):
    decisions = list(calm_run.loop.decisions)
    assert len(decisions) == calm_run.report()["decisions"] > 200
    observed = [d for d in decisions if d.observed_util is not None]
    assert len(observed) >= 0.95 * len(decisions)
    for d in observed[:50]:
        assert d.delta_r is not None and sum(d.terms.values()) == pytest.approx(d.delta_r, abs=1e-9)
        assert set(d.terms) == {"utilization", "latency", "cost", "carbon", "unplaced"}
        assert d.errors["utilization"] == pytest.approx(d.observed_util - d.predicted_util)
    replicas = [d for d in observed if d.klass.startswith("ingest-") and "latency_ms" in d.errors]
    assert replicas and all(d.network_latency_ms == pytest.approx(2.0) for d in replicas)  # site-bound
    assert all(d.observed_latency_ms > d.network_latency_ms for d in replicas)  # plus queueing and service
    rep = calm_run.report()
    assert rep["decision_mae_utilization"] < 0.06 and rep["decision_mae_latency_ms"] < 5.0


def test_a_usage_shift_triggers_one_fine_tune_and_the_error_comes_back_down(shifted_run, calm_run):
    rep = shifted_run.report()
    threshold = SIM_FEEDBACK.threshold
    assert rep["fine_tunes"] == 1
    t = shifted_run.loop.signals[0]
    at_h = t.at / 60.0
    assert 6.0 <= at_h < 8.0  # after the shift, within two hours
    assert t.moving_error > threshold == t.threshold
    assert SIM_FEEDBACK.min_samples <= t.samples < 60  # fitted on the recent experience only
    # before the shift the two runs are the same run: the shift changes only what pods use
    assert shifted_run.moving_error_between(0, 6) == calm_run.moving_error_between(0, 6)
    assert max(shifted_run.moving_error_between(0, 6)) < threshold
    # after the fine-tune: below the threshold within the hour, and it stays there
    assert max(shifted_run.moving_error_between(at_h + 1.0, 12)) < threshold
    assert t.settled_error is not None and t.settled_error < threshold
    assert rep["moving_error_end"] < SIM_FEEDBACK.calm * threshold
    # the refitted model learned the shift: ingest factors rose about 1.6 x, the rest did not move much
    ratio = _ingest_mean(shifted_run.loop.model.factors) / _ingest_mean(t.factors_before)
    assert 1.35 < ratio < 1.85
    control = [shifted_run.loop.model.factors[c] / t.factors_before[c] for c in t.factors_before if c.startswith("control-")]
    assert 0.7 < float(np.mean(control)) < 1.3
    # the placements themselves are the same: the objective sees requests, not usage
    assert shifted_run.result.totals["decisions"] == calm_run.result.totals["decisions"]


def test_usage_settings_are_checked_and_off_by_default():
    cfg = SimConfig()
    assert not cfg.usage_shift_on and cfg.usage_noise == 0.0
    assert SimConfig().with_settings({"usage_shift_at_h": "6", "usage_shift_factor": "1.6"}).usage_shift_on
    with pytest.raises(SimConfigError, match="usage_shift_factor"):
        SimConfig().with_settings({"usage_shift_factor": 0})
    with pytest.raises(SimConfigError, match="usage_noise"):
        SimConfig().with_settings({"usage_noise": -0.1})
    with pytest.raises(SimConfigError, match="usage_shift_class"):
        SimConfig().with_settings({"usage_shift_class": " "})


TINY = {"embed_dim": 16, "hidden_dim": 16, "attention_heads": 2, "atoms": 11, "learning_starts": 8, "batch_size": 8,
        "buffer_size": 500}


def train_start_policy(out, steps: int) -> None:
    """A small starting policy (:data:`TINY`) of ``steps`` on edge-iot, written to ``out``."""
    import solvers
    from iro_fed.sim.env import PlacementEnv

    solvers.make("dqn", seed=0).fit([lambda: PlacementEnv("edge-iot", hours=0.5, k=16, seed=1)], steps, out=out,
                                    config=TINY, progress=False, track_emissions=False)


def test_dqn_fine_tune_trains_from_the_policy_and_publishes_versions_atomically(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    import solvers
    from iro_fed.federated.registry import PolicyRegistry

    # a small starting policy, trained here (the shipped default works too, it is just bigger)
    start = tmp_path / "start.pt"
    train_start_policy(start, 32)
    reg = tmp_path / "registry"
    action = DQNFineTune(registry=reg, policy=str(start), scenario="edge-iot", hours=0.5, steps=48, seed=0,
                         settings={**SHIFT, "usage_shift_at_h": 0.0})
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=2, cooldown=3, actions=[action])
    for i in range(3):
        loop.record_decision(f"p{i}", "n", 4000.0, 8000.0)
        loop.observe("n", 0.5)
    for _ in range(4):
        loop.observe("n", 0.9)  # drift: one fine-tune
    assert len(loop.signals) == 1
    assert loop.signals[0].results["dqn-fine-tune"].startswith("trained 48 steps")
    registry = PolicyRegistry(reg)
    assert registry.versions() == [1] and registry.latest_version() == 1
    assert not [p.name for p in (reg / "v0001").iterdir() if p.name.startswith(".")]  # no temporary files
    state, meta = registry.load()
    assert meta["strategy"] == "local-fine-tune" and meta["config"]["embed_dim"] == 16
    assert meta["fine_tune"]["trigger"]["moving_error"] == pytest.approx(loop.signals[0].moving_error)
    # the learned parameters changed from the starting policy (noise buffers do not count)
    learned = dict(solvers.make("dqn", policy=str(start)).loaded.agent.online.named_parameters())
    diff = sum(float((state[k].float() - p.detach().float()).abs().sum()) for k, p in learned.items())
    assert diff > 0 and action.results[0]["updates"] > 0
    assert action.results[0]["weight_change_l1"] == pytest.approx(diff, rel=1e-4)
    # the dqn solver loads the new version from the registry folder
    solver = solvers.make("dqn", policy=str(reg))
    assert solver.loaded.metadata["version"] == 1
    # a second drift fine-tunes from that version and publishes the next one
    for _ in range(8):
        loop.observe("n", 0.2)
    assert len(loop.signals) == 2 and registry.versions() == [1, 2]
    assert registry.metadata(2)["fine_tune"]["from"] == "1"


def test_feedback_sim_command_prints_the_table_and_writes_the_report(tmp_path, capsys):
    import json

    from iro_fed.cli import main
    from iro_fed.sim.cli import FEEDBACK_KEYS

    out = tmp_path / "fb" / "report.json"
    rc = main(["feedback-sim", "--seed", "2", "--hours", "3", "--set", "start=2020-03-02 06:00:00",
               "--set", "usage_noise=0.1", "--feedback-set", "calibration=20", "--round-request", str(tmp_path / "reg"),
               "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "calibrations / fine-tunes" in printed and "moving error at the end" in printed
    doc = json.loads(out.read_text())
    assert list(doc) == [*FEEDBACK_KEYS, "series"]
    assert doc["scenario"] == "edge-iot" and doc["seed"] == 2 and doc["calibrations"] >= 1
    assert len(doc["series"]["moving_error"]) == 180 and doc["observations"] > 20


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--feedback-set", "thresold=0.1"], "--feedback-set thresold: unknown setting"),
        (["--feedback-set", "threshold=abc"], "--feedback-set threshold: expected float"),
        (["--feedback-set", "threshold=-1"], "threshold: must be > 0"),
        (["--feedback-set", "min_samples=2.5"], "--feedback-set min_samples: expected int"),
        (["--set", "usage_shift_factor=0"], "usage_shift_factor"),
        (["--scenario", "atlantis"], "unknown scenario 'atlantis'"),
        (["--delay-steps", "-1"], "--delay-steps: must be >= 0"),
        (["--dqn-registry", "reg", "--dqn-policy", "/nonexistent/p.pt"], "--dqn-policy: no such file"),
    ],
)
def test_feedback_sim_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    from iro_fed.cli import main

    out = tmp_path / "report.json"
    assert main(["feedback-sim", "--hours", "1", *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dqn-policy", "policy.pt"], "--dqn-policy: only used with --dqn-registry"),  # was silently ignored
        (["--dqn-registry", "reg", "--dqn-policy", "."], "--dqn-policy: '.' is a folder"),
        (["--round-request", "afile/reg"], "--round-request: cannot make folder 'afile/reg': 'afile' is a file"),
        (["--dqn-registry", "afile"], "--dqn-registry: 'afile' exists and is not a folder"),  # was found at a trigger
        (["--hours", "inf"], "--hours: must be > 0 and finite"),
        (["--seed", str(2**31)], "--seed: must be between 0 and 2147483647"),
        (["--out", "afile/report.json"], "--out: cannot make folder 'afile': 'afile' is a file"),
    ],
)
def test_feedback_sim_checks_paths_and_numbers_before_the_run(tmp_path, monkeypatch, capsys, args, message):
    from iro_fed.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "policy.pt").write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["feedback-sim", "--hours", "0.5", *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_dqn_fine_tune_refuses_a_registry_that_is_a_file(tmp_path):
    (tmp_path / "reg").write_text("x")
    with pytest.raises(ValueError, match="registry: .* exists and is not a folder"):
        DQNFineTune(registry=tmp_path / "reg")
