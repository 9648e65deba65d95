"""Finite settings that overflowed further on are refused up front, naming the setting (exit 2).

* ``iro simulate --set w_latency=1.7e308`` printed an overflow warning, a table with score inf and
  a traceback (``score is inf, which JSON cannot hold``, exit 1): the scenario weights are capped
  at a problem file's :data:`~iro_fed.problem_io.MAX_NUMBER` (1e10);
* the engine's ``queue_cap=1e308`` (an inf latency, then "'list' argument must have no negative
  elements"), ``usage_shift_at_h=1e308`` ("cannot convert float infinity to integer") and
  ``usage_shift_factor=1e308`` (an overflow warning, a meaningless run) have upper bounds;
  ``hpa_delay_steps`` / ``hpa_stabilization_steps`` of 10**30 ("Maximum allowed dimension
  exceeded") act as the whole run;
* ``iro train --set v_max=1e300`` (torch.linspace), ``noisy_sigma0=1e300`` (tensor.fill_) and
  ``learning_rate=1e38`` (Adam's addcdiv_, after seconds of training) ended in "value cannot be
  converted to type float without overflow": every positive float DQN setting has an upper bound
  and v_min / v_max a bound on their magnitude.

Every refusal comes before any simulation or training: the runner is replaced by one that fails.
"""

from __future__ import annotations

import math
import re

import pytest

from iro_fed.cli import main
from iro_fed.problem_io import MAX_NUMBER
from iro_fed.sim import SimConfig, SimConfigError
from iro_fed.sim.engine import MAX_QUEUE_CAP, MAX_USAGE_SHIFT_FACTOR
from iro_fed.sim.scenarios import SCENARIOS
from solvers.dqn.config import MAX_RETURN, UPPER_BOUNDS, ConfigError, DQNConfig

from .sim.helpers import needs_data


@pytest.fixture
def no_run(monkeypatch):
    """Simulating or training fails the test: the refusal must come first."""
    import iro_fed.learning
    from iro_fed.sim.engine import Simulator

    def refuse(*args, **kwargs):
        raise AssertionError("the run started before the bad setting was refused")

    monkeypatch.setattr(Simulator, "run", refuse)
    monkeypatch.setattr(iro_fed.learning, "env_factories", refuse)


def _refused(capsys, argv: list[str], setting: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--set {setting}:" in err or f"--scenario-set {setting}:" in err, err
    assert "Traceback" not in err
    return err


# --- the simulator ------------------------------------------------------------------------------

SIM_CASES = [
    # (scenario, settings, the setting named)
    *[(scenario, {weight: value}, weight) for scenario in SCENARIOS for weight in ("w_latency", "w_carbon")
      for value in ("1.7e308", "1e300", "1e38", "10000000001")],
    ("bank", {"w_latency": "-1"}, "w_latency"),
    *[("bank", {"queue_cap": value}, "queue_cap") for value in ("1e308", "1e300", "1e38", "1000001")],
    *[("bank", {"usage_shift_at_h": value, "usage_shift_factor": "1.6"}, "usage_shift_at_h")
      for value in ("1e308", "1e300", "1e38", "8785")],
    *[("bank", {"usage_shift_at_h": "0", "usage_shift_factor": value, "usage_shift_class": "*"}, "usage_shift_factor")
      for value in ("1.7e308", "1e300", "1e38", "1001")],
    # already bounded: stay refused
    ("bank", {"promo_factor": "1e308"}, "promo_factor"),
    ("bank", {"peak_rps": "1e308"}, "peak_rps"),
    ("edge-iot", {"sensor_rps": "1e308"}, "sensor_rps"),
    ("promo-surge", {"load": "1e308"}, "load"),
    ("openb", {"time_scale": "1e308"}, "time_scale"),
    ("openb", {"duration_scale": "1e308"}, "duration_scale"),
]


@needs_data
@pytest.mark.parametrize(("scenario", "settings", "setting"), SIM_CASES)
def test_iro_simulate_refuses_a_value_past_its_bound_naming_it(tmp_path, capsys, no_run, scenario, settings, setting):
    out = tmp_path / "new" / "s.json"
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    _refused(capsys, ["simulate", "--scenario", scenario, "--solver", "greedy-objective", "--hours", "1", *sets,
                      "--out", str(out)], setting)
    assert not out.parent.exists()


@needs_data
def test_the_weight_cap_is_the_problem_files_and_the_message_says_it(tmp_path, capsys, no_run):
    err = _refused(capsys, ["simulate", "--scenario", "bank", "--solver", "greedy-objective", "--hours", "1",
                            "--set", "w_latency=1.7e308", "--out", str(tmp_path / "s.json")], "w_latency")
    assert f"--set w_latency: must be at most {MAX_NUMBER:g} (as in a problem file), got 1.7e+308" in err
    assert "RuntimeWarning" not in err


@needs_data
@pytest.mark.parametrize("setting", ["w_latency=1.7e308", "queue_cap=1e308"])
def test_iro_train_refuses_the_same_scenario_settings(tmp_path, capsys, no_run, setting):
    name = setting.split("=")[0]
    _refused(capsys, ["train", "--no-emissions", "--out", str(tmp_path / "p.pt"), "--scenario", "bank", "--steps",
                      "1", "--eval-episodes", "0", "--hours", "0.05", "--scenario-set", setting], name)


@needs_data
def test_values_at_the_bounds_are_accepted():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("bank", hours=1, w_latency=MAX_NUMBER, w_carbon=MAX_NUMBER)
    assert (sc.weights.latency, sc.weights.carbon) == (MAX_NUMBER, MAX_NUMBER)
    cfg = SimConfig().with_settings({"queue_cap": str(MAX_QUEUE_CAP), "usage_shift_factor": str(MAX_USAGE_SHIFT_FACTOR),
                                     "usage_shift_at_h": "8784"})
    assert (cfg.queue_cap, cfg.usage_shift_factor, cfg.usage_shift_at_h) == (1e6, 1e3, 8784.0)
    assert SimConfig(usage_shift_at_h=-1e308).usage_shift_on is False  # negative: no shift, however far


@pytest.mark.parametrize(("name", "value"), [("queue_cap", 1e308), ("usage_shift_factor", 1e308),
                                             ("usage_shift_at_h", 1e308), ("queue_cap", 0.5)])
def test_simconfig_names_the_setting(name, value):
    with pytest.raises(SimConfigError, match=rf"^setting '{name}': must be "):
        SimConfig(**{name: value})


@needs_data
@pytest.mark.parametrize("name", ["hpa_delay_steps", "hpa_stabilization_steps"])
def test_a_huge_autoscaler_step_count_acts_as_the_whole_run(name):
    from iro_fed.sim import build_simulator

    runs = [build_simulator("bank", "greedy-objective", 0, 0.5, {name: value}, {}).run().totals
            for value in (30, 10**30)]
    assert runs[0] == runs[1]


# --- DQN training -------------------------------------------------------------------------------

POSITIVE = sorted(UPPER_BOUNDS)
DQN_CASES = [
    *[(name, value) for name in POSITIVE for value in ("1e300", "1e38", "1.7e308")],
    *[(name, value) for name in ("v_min", "v_max") for value in ("1e300", "-1e300", "1e38", "-1e38", "1000001")],
]


@pytest.mark.parametrize(("name", "value"), DQN_CASES)
def test_iro_train_refuses_a_float_setting_past_its_bound_naming_it(tmp_path, capsys, no_run, name, value):
    out = tmp_path / "new" / "p.pt"
    err = _refused(capsys, ["train", "--no-emissions", "--out", str(out), "--scenario", "bank", "--steps", "1",
                            "--eval-episodes", "0", "--hours", "0.05", "--set", f"{name}={value}"], name)
    assert f"--set {name}: expected a " in err
    assert not out.parent.exists()


def test_the_learning_rate_run_that_trained_first_is_refused_up_front(tmp_path, capsys, no_run):
    # Was: ~3 s of training, then Adam's addcdiv_ overflowed float32 (a traceback, exit 1).
    _refused(capsys, ["train", "--no-emissions", "--out", str(tmp_path / "p.pt"), "--scenario", "bank", "--steps",
                      "300", "--envs", "1", "--eval-episodes", "0", "--hours", "0.05", "--set", "learning_rate=1e300",
                      "--set", "learning_starts=10", "--set", "batch_size=8"], "learning_rate")


@pytest.mark.parametrize("name", POSITIVE)
def test_each_positive_float_setting_is_accepted_at_its_bound_and_refused_past_it(name):
    bound = UPPER_BOUNDS[name]
    assert getattr(DQNConfig(**{name: bound}), name) == bound
    with pytest.raises(ConfigError, match="^" + re.escape(f"{name}: expected a positive number at most {bound:g}, got ")):
        DQNConfig(**{name: bound * 10})


def test_the_c51_support_is_bounded_in_magnitude():
    cfg = DQNConfig(v_min=-MAX_RETURN, v_max=MAX_RETURN)
    assert (cfg.v_min, cfg.v_max) == (-MAX_RETURN, MAX_RETURN)
    for name, value in (("v_min", -2 * MAX_RETURN), ("v_max", 2 * MAX_RETURN), ("v_min", 1e300)):
        with pytest.raises(ConfigError, match=rf"^{name}: expected a number between -1e\+06 and 1e\+06 "):
            DQNConfig(**{name: value})
    with pytest.raises(ConfigError, match=r"^v_max: "):  # also without C51 (as the finite rule)
        DQNConfig(distributional=False, v_max=1e300)


def test_every_float_setting_has_a_bound():
    # a new float setting is a decision: bounded here, or in [0, 1]
    unit = {"gamma", "priority_alpha", "priority_beta0", "epsilon_start", "epsilon_end", "epsilon_fraction"}
    from dataclasses import fields

    floats = {f.name for f in fields(DQNConfig) if f.type == "float"}
    assert floats == set(UPPER_BOUNDS) | {"v_min", "v_max"} | unit
    for name in unit:
        with pytest.raises(ConfigError, match=rf"^{name}: expected a number in \[0, 1\]"):
            DQNConfig(**{name: 1e300})


def test_a_checkpoint_read_for_inference_skips_the_training_only_bounds():
    # as the other training-only rules (g1): a policy's learning_rate does not stop it placing pods
    cfg = DQNConfig.from_dict({"learning_rate": 1e300, "adam_eps": 5.0, "grad_clip": 1e300, "priority_eps": 2.0},
                              training=False)
    assert cfg.learning_rate == 1e300
    with pytest.raises(ConfigError, match=r"^adam_eps: |^grad_clip: |^learning_rate: |^priority_eps: "):
        cfg.check_training()
    # the network's own settings are checked for inference too (they build the network)
    for name, value in (("noisy_sigma0", 1e300), ("v_max", 1e300)):
        with pytest.raises(ConfigError, match=rf"^{name}: "):
            DQNConfig.from_dict({name: value}, training=False)


def test_inf_and_nan_are_still_named_as_not_finite():
    for name in [*POSITIVE, "v_min", "v_max"]:
        with pytest.raises(ConfigError, match=rf"^{name}: expected a finite number, got inf$"):
            DQNConfig(**{name: math.inf})
