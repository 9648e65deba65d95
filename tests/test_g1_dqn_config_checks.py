"""DQN settings checked where they matter (g1): a checkpoint's training-only settings do not stop
it placing pods (a policy written with buffer_size=100 before the buffer rule existed was refused
for inference, and the scheduler fell back to best-fit every batch); training from it still
refuses them. Fine-tune steps are checked against the policy the fine-tune starts from, not the
defaults (batch_size 128 with --dqn-steps 100 was accepted and every trigger failed)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from iro_fed.cli import UsageError, main
from solvers.dqn.config import ConfigError, DQNConfig

from .sim.helpers import needs_data


def _policy(path: Path, **changes: Any) -> Path:
    """A copy of the shipped default policy whose metadata config has ``changes`` (as an older
    version, or another training run, wrote it); the JSON beside it says the same."""
    pytest.importorskip("torch")
    from solvers.dqn.checkpoint import load_checkpoint, save_checkpoint
    from solvers.dqn.solver import DEFAULT_POLICY

    state, meta = load_checkpoint(DEFAULT_POLICY)
    meta["config"] = {**meta["config"], **changes}
    save_checkpoint(path, state, meta)
    return path


def _publish(reg: Path, policy: Path) -> None:
    """``policy`` (and its JSON) as version 1 of a registry, ``latest`` naming it."""
    (reg / "v0001").mkdir(parents=True)
    shutil.copy(policy, reg / "v0001" / "policy.pt")
    shutil.copy(policy.with_suffix(".json"), reg / "v0001" / "policy.json")
    (reg / "latest").write_text("v0001/policy.pt\n")


# --- 1. training-only rules do not stop a checkpoint placing pods ------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"buffer_size": 100},  # learning_starts 500: the rule added today refused it (ConfigError)
        {"learning_rate": math.inf},  # the finite rule: a training-only setting, no Q-value depends on it
        {"learning_rate": math.nan, "gamma": 1.5, "batch_size": 0},
    ],
)
def test_a_checkpoint_with_training_only_settings_a_newer_version_refuses_still_places_pods(tmp_path, changes):
    import solvers
    from iro_fed.problem_io import load_problem

    path = _policy(tmp_path / "old.pt", **changes)
    solver = solvers.make("dqn", policy=str(path))
    solver.preload()
    loaded = solver.loaded.config.to_dict()
    assert all(loaded[k] == v or (math.isnan(v) and math.isnan(loaded[k])) for k, v in changes.items())
    problem = load_problem(Path(__file__).parent.parent / "examples" / "problems" / "bank-three-zone.json")
    assert (solver.solve(problem).assignment >= 0).any()


def test_iro_solve_with_a_small_buffer_policy_exits_0(tmp_path, capsys):
    path = _policy(tmp_path / "small.pt", buffer_size=100)
    problem = Path(__file__).parent.parent / "examples" / "problems" / "bank-three-zone.json"
    out = tmp_path / "out.json"
    assert main(["solve", str(problem), "--solver", "dqn", "--set", f"policy={path}", "--out", str(out)]) == 0
    assert out.is_file()


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"attention_heads": 3}, "attention_heads: 3 does not divide embed_dim 128"),  # a network setting
        ({"v_max": math.inf}, "v_max: expected a finite number, got inf"),  # the C51 support
        ({"no_such_setting": 1}, "unknown DQN setting(s) no_such_setting"),
    ],
)
def test_a_checkpoint_whose_network_settings_are_invalid_is_a_checkpoint_error_naming_the_file(
    tmp_path, capsys, changes, fragment
):
    """Was a ConfigError out of preload (not its InvalidSettingError): a traceback, exit 1."""
    import solvers
    from solvers.base import InvalidSettingError

    path = _policy(tmp_path / "bad.pt", **changes)
    with pytest.raises(InvalidSettingError, match="policy") as err:
        solvers.make("dqn", policy=str(path)).preload()
    assert str(path) in str(err.value) and fragment in str(err.value)
    problem = Path(__file__).parent.parent / "examples" / "problems" / "bank-three-zone.json"
    out = tmp_path / "out.json"
    assert main(["solve", str(problem), "--solver", "dqn", "--set", f"policy={path}", "--out", str(out)]) == 2
    assert fragment in capsys.readouterr().err and not out.exists()


def test_a_config_for_training_keeps_every_rule_and_one_read_for_inference_checks_them_on_demand():
    small = {"buffer_size": 100}
    with pytest.raises(ConfigError, match=r"^buffer_size: 100 holds fewer "):
        DQNConfig.from_dict(small)
    read = DQNConfig.from_dict(small, training=False)
    with pytest.raises(ConfigError, match=r"^buffer_size: 100 holds fewer "):
        read.check_training()
    with pytest.raises(ConfigError, match=r"^learning_rate: expected a finite number, got inf$"):
        DQNConfig.from_dict({"learning_rate": math.inf}, training=False).check_training()
    with pytest.raises(ConfigError, match=r"^buffer_size: 100 holds fewer "):
        read.replace(top_k=8)  # a changed copy is a config to train with
    assert "training" not in read.to_dict() and read.to_dict()["buffer_size"] == 100
    with pytest.raises(ConfigError, match="unknown DQN setting"):
        DQNConfig.from_dict({"training": False})  # not a setting


def test_resuming_from_a_small_buffer_checkpoint_compares_only_the_network():
    """--resume compared architectures through a strict read of the saved config: a ConfigError
    for a checkpoint whose network is the same."""
    saved = {**DQNConfig().to_dict(), "buffer_size": 100}
    assert DQNConfig().architecture_differences(saved) == []


def test_training_refuses_a_config_read_for_inference_before_building_anything():
    pytest.importorskip("torch")
    from solvers.dqn.train import train

    def never() -> Any:
        raise AssertionError("no env is built")

    with pytest.raises(ConfigError, match=r"^buffer_size: 100 holds fewer "):
        train(
            [never],
            DQNConfig.from_dict({"buffer_size": 100}, training=False),
            steps=10,
            progress=False,
            track_emissions=False,
        )


def test_a_fine_tune_from_a_small_buffer_policy_that_would_never_learn_is_refused_naming_buffer_size(tmp_path):
    """Loading is for inference; fine-tuning is training: 2000 steps start learning at 500 transitions."""
    pytest.importorskip("gymnasium")
    from iro_fed.feedback import DQNFineTune

    path = _policy(tmp_path / "small.pt", buffer_size=100)
    action = DQNFineTune(out=tmp_path / "tuned.pt", policy=str(path), steps=2000, env_fns=[lambda: None])
    with pytest.raises(Exception, match=r"buffer_size: 100 holds fewer transitions than the 500 \(learning_starts\)"):
        action(None, None)
    assert not (tmp_path / "tuned.pt").exists()


# --- 2. fine-tune steps against the policy the fine-tune starts from ---------------------------


def test_the_steps_check_reads_the_start_policy_without_torch(tmp_path, monkeypatch):
    from iro_fed.sim.cli import check_fine_tune_steps

    path = _policy(tmp_path / "big.pt", batch_size=128)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(
        UsageError, match=r"^--dqn-steps: must be at least 130 \(.*batch_size 128, n_step 3\), got 100$"
    ):
        check_fine_tune_steps("--dqn-steps", 100, ("--dqn-policy", str(path)))
    assert check_fine_tune_steps("--dqn-steps", 130, ("--dqn-policy", str(path))) == 130
    assert check_fine_tune_steps("--dqn-steps", 66) == 66  # the shipped default


def test_the_steps_check_reads_the_checkpoint_when_its_json_is_missing(tmp_path):
    from iro_fed.sim.cli import check_fine_tune_steps

    path = _policy(tmp_path / "big.pt", batch_size=128)
    path.with_suffix(".json").unlink()
    with pytest.raises(UsageError, match=r"^--dqn-steps: must be at least 130 "):
        check_fine_tune_steps("--dqn-steps", 129, ("--dqn-policy", str(path)))


def test_an_unreadable_start_policy_is_refused_naming_its_flag(tmp_path):
    pytest.importorskip("torch")
    from iro_fed.sim.cli import check_fine_tune_steps

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError, match=r"^--dqn-policy: policy .*bad\.pt'.*not a readable torch checkpoint"):
        check_fine_tune_steps("--dqn-steps", 256, ("--dqn-policy", str(bad)))


@needs_data
def test_feedback_sim_refuses_too_few_steps_for_its_dqn_policy(tmp_path, monkeypatch, capsys):
    """--dqn-steps 100 was accepted (66 for the defaults); every fine-tune then failed hours later."""
    path = _policy(tmp_path / "big.pt", batch_size=128)
    monkeypatch.chdir(tmp_path)
    argv = ["feedback-sim", "--hours", "1", "--dqn-registry", "reg", "--dqn-policy", str(path), "--dqn-steps", "100"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--dqn-steps: must be at least 130" in err and f"(--dqn-policy {str(path)!r})" in err
    assert not (tmp_path / "reg").exists()


@needs_data
def test_feedback_sim_checks_the_registry_latest_first(tmp_path, monkeypatch, capsys):
    """A registry's latest version is what the first fine-tune starts from, not --dqn-policy."""
    big = _policy(tmp_path / "big.pt", batch_size=128)
    _publish(tmp_path / "reg", big)
    monkeypatch.chdir(tmp_path)
    argv = [
        "feedback-sim",
        "--hours",
        "1",
        "--dqn-registry",
        "reg",
        "--dqn-policy",
        str(_policy(tmp_path / "d.pt")),
        "--dqn-steps",
        "100",
    ]
    assert main(argv) == 2
    assert "--dqn-steps: must be at least 130" in capsys.readouterr().err


def test_scheduler_refuses_too_few_fine_tune_steps_for_its_registry_latest(tmp_path, monkeypatch, capsys):
    big = _policy(tmp_path / "big.pt", batch_size=128)
    _publish(tmp_path / "reg", big)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.chdir(tmp_path)
    argv = [
        "scheduler",
        "--kubeconfig",
        __file__,
        "--feedback-threshold",
        "0.1",
        "--fine-tune-registry",
        "reg",
        "--fine-tune-steps",
        "100",
    ]
    assert main(argv) == 2
    assert "--fine-tune-steps: must be at least 130" in capsys.readouterr().err


def test_the_fine_tune_names_the_flag_and_the_minimum_when_its_start_policy_needs_more(tmp_path):
    """The registry's latest can change after the start (a federated round publishes another
    batch_size): the trigger's failure names the flag to raise and by how much."""
    from iro_fed.feedback import DQNFineTune

    big = _policy(tmp_path / "big.pt", batch_size=128)
    _publish(tmp_path / "reg", big)
    action = DQNFineTune(registry=tmp_path / "reg", steps=100, steps_flag="--fine-tune-steps", env_fns=[lambda: None])
    with pytest.raises(
        ValueError,
        match=r"^--fine-tune-steps: 100 decisions make no gradient update .*batch_size 128"
        r".*need at least 130$",
    ):
        action(None, None)
    assert not (tmp_path / "reg" / "v0002").exists()


def test_without_torch_or_json_the_start_policy_is_refused_naming_what_is_missing(tmp_path, monkeypatch):
    from iro_fed.sim.cli import check_fine_tune_steps

    path = _policy(tmp_path / "big.pt", batch_size=128)
    path.with_suffix(".json").unlink()
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UsageError, match=r"^--dqn-policy: policy .*JSON metadata .* needs torch"):
        check_fine_tune_steps("--dqn-steps", 256, ("--dqn-policy", str(path)))
