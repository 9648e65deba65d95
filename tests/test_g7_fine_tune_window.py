"""DQNFineTune trains on the window that led to its trigger, each fine-tune on episodes of its own.

Every fine-tune built ``PlacementEnv(scenario, hours=hours, seed=seed)``: a drift found at hour 9 of
``iro feedback-sim`` (after the usage shift) trained on hours 0-1 of the scenario, and the second
fine-tune replayed the first one's episodes (same seed).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from iro_fed.feedback import DQNFineTune, Trigger, fine_tune_seed
from tests.sim.helpers import needs_data

pytestmark = needs_data

STEP_S = 60.0  # the scenarios' step: run_feedback_sim's Trigger.at counts these


def _trigger(at: float) -> Trigger:
    return Trigger("fine-tune", at, 120, "utilization", 0.09, 0.08, 12, {"default": 1.0}, {"default": 1.3}, 0.02)


@pytest.fixture
def fits(monkeypatch):
    """What each fine-tune's ``fit`` saw: the solver seed and its env after the first reset (as
    ``train`` does: ``envs.reset(seed=seed)``). The fit itself trains nothing."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    import solvers

    real = solvers.make
    seen: list[dict] = []

    def make(name, **kwargs):
        solver = real(name, **kwargs)

        def fit(env_fns, steps, **_):
            env = env_fns[0]()
            _, info = env.reset(seed=solver.seed)
            seen.append({"seed": solver.seed, "env": env, "first_step": info["step"]})
            solver.agent = solver.loaded.agent  # the weights it started from, unchanged
            return SimpleNamespace(steps=steps, updates=1, last_loss=0.0, wall_s=0.0)

        solver.fit = fit
        return solver

    monkeypatch.setattr(solvers, "make", make)
    return seen


def test_a_fine_tune_trains_on_the_hours_before_its_trigger(tmp_path, fits):
    action = DQNFineTune(out=tmp_path / "tuned.pt", scenario="edge-iot", hours=1.0, steps=66, step_s=STEP_S)
    action(None, _trigger(9 * 3600 / STEP_S))  # drift found at hour 9
    env = fits[0]["env"]
    assert env.start_h == pytest.approx(8.0) and env.hours == 1.0
    # the agent's first decision is in hour 8 (not hour 0), and the run ends at the trigger
    assert 8 * 60 <= fits[0]["first_step"] < 9 * 60
    assert env.sim.sc.steps == 9 * 60
    assert action.results[0]["start_h"] == pytest.approx(8.0)


def test_a_trigger_in_the_first_hours_trains_from_hour_0(tmp_path, fits):
    action = DQNFineTune(out=tmp_path / "tuned.pt", scenario="edge-iot", hours=1.0, steps=66, step_s=STEP_S)
    action(None, _trigger(0.5 * 3600 / STEP_S))
    assert fits[0]["env"].start_h == 0.0 and fits[0]["first_step"] < 60


def test_without_a_scenario_clock_every_fine_tune_trains_from_hour_0(tmp_path, fits):
    """``iro scheduler``: Trigger.at is wall-clock time, not a scenario time (step_s None)."""
    action = DQNFineTune(out=tmp_path / "tuned.pt", scenario="edge-iot", hours=0.5, steps=66)
    action(None, _trigger(1.7e9))
    assert action.window_start_h(_trigger(1.7e9)) == 0.0
    assert fits[0]["env"].start_h == 0.0 and fits[0]["first_step"] < 30


def test_two_fine_tunes_train_on_different_episodes(tmp_path, fits):
    action = DQNFineTune(out=tmp_path / "tuned.pt", scenario="edge-iot", hours=0.5, steps=66, seed=3)
    action(None, _trigger(100.0))
    action(None, _trigger(200.0))
    seeds = [f["seed"] for f in fits]
    assert seeds[0] != seeds[1]
    assert [f["env"].base_seed for f in fits] == seeds  # the env's later episodes follow the same stream
    assert seeds == [fine_tune_seed(3, 0), fine_tune_seed(3, 1)]
    assert [r["seed"] for r in action.results] == seeds


@pytest.mark.parametrize("bad", [0, -60.0, math.nan, math.inf, "60", True])
def test_step_s_must_be_a_positive_number(tmp_path, bad):
    with pytest.raises(ValueError, match="step_s"):
        DQNFineTune(out=tmp_path / "tuned.pt", step_s=bad)


def test_placement_env_start_h_runs_the_window_after_it():
    pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    from iro_fed.sim.env import PlacementEnv

    env = PlacementEnv("edge-iot", hours=0.5, k=4, seed=1, start_h=8.0)
    check_env(env, skip_render_check=True)
    _, info = env.reset()
    steps = [info["step"]]
    truncated = False
    while not truncated:
        _, _, _, truncated, info = env.step(0)
        steps.append(info.get("step", env.sim.sc.steps))
    assert env.sim.sc.steps == 510 and len(steps) > 5 and min(steps) >= 480  # hours 8 to 8.5 only
    assert "totals" in info


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "2", True, None])
def test_placement_env_start_h_is_checked(bad):
    pytest.importorskip("gymnasium")
    from iro_fed.sim.env import PlacementEnv

    with pytest.raises(ValueError, match="start_h"):
        PlacementEnv("edge-iot", hours=0.5, start_h=bad)
