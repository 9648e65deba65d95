"""`iro fed local` settings checked before any process starts (audit j10, items 2, 3 and 5).

* ``--set registry=X`` trained into X while the command read --registry's folder, then exited 2 after a
  good run; ``--set`` of rounds/strategy/local-steps silently beat the options: refused now, naming the option.
* ``--set resume=true`` with a registry whose policy has another network was found by the ServerApp
  after every process had started (traceback, "flwr run failed (status 0)", exit 1): exit 2 before.
* ``resume`` with an empty registry (a mistyped path) started a fresh policy without a word.

``LocalFederation`` is replaced by a stand-in that raises: nothing here starts a Flower process.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated import local as local_module  # noqa: E402
from iro_fed.federated.local import FederationError, flwr_run  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.task import FedConfig, feature_sizes  # noqa: E402
from solvers.dqn.agent import DQNAgent  # noqa: E402


class Started(Exception):
    """What the stand-in LocalFederation raises: the command got as far as starting Flower."""


@pytest.fixture(autouse=True)
def no_federation(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))

    def refuse(*_args, **_kwargs):
        raise Started

    monkeypatch.setattr(local_module, "LocalFederation", refuse)


def test_local_refuses_set_registry_which_it_does_not_read(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["fed", "local", "--set", "registry=elsewhere"]) == 2
    assert "--set registry: this command reads registry from --registry; use --registry" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # neither registry made


@pytest.mark.parametrize("argv, option", [
    (["--rounds", "2", "--set", "num-server-rounds=4"], "--rounds"),
    (["--strategy", "fedavg", "--set", "strategy=fedmedian"], "--strategy"),
    (["--local-steps", "20", "--set", "local-steps=10"], "--local-steps"),
    (["--carbon-aware", "--set", "carbon-aware=false"], "--carbon-aware"),
])
def test_local_refuses_a_set_that_would_beat_the_option_given(tmp_path, capsys, monkeypatch, argv: list[str],
                                                             option: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["fed", "local", "--registry", str(tmp_path / "reg"), *argv]) == 2
    key = argv[-1].split("=")[0]
    assert f"--set {key}: {option} sets it too; give one of them" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("setting", ["num-server-rounds=2", "strategy=fedmedian", "local-steps=10",
                                     "carbon-aware=true"])
def test_local_takes_such_a_set_without_its_option(tmp_path, setting: str) -> None:
    with pytest.raises(Started):
        main(["fed", "local", "--registry", str(tmp_path / "reg"), "--set", setting])


@pytest.mark.parametrize("argv, option", [
    (["--registry", "a", "--set", "registry=b"], "--registry"), (["--rounds", "2", "--set", "num-server-rounds=4"],
                                                                 "--rounds"),
    (["--fresh", "--set", "resume=true"], "--fresh"),
])
def test_rounds_refuses_a_set_that_would_beat_the_option_given(tmp_path, capsys, argv: list[str], option: str) -> None:
    requests = tmp_path / "requests"
    assert main(["fed", "rounds", "--requests", str(requests), "--federation", "p", *argv]) == 2
    assert f"{option} sets it too" in capsys.readouterr().err
    assert not requests.exists()


def test_a_bad_value_of_such_a_setting_still_says_what_is_wrong(capsys) -> None:
    assert main(["fed", "local", "--set", "strategy=nope"]) == 2
    assert "--set strategy: unknown 'nope'" in capsys.readouterr().err


def _publish(root: Path, cfg: FedConfig) -> None:
    cand_f, ctx_f = feature_sizes()
    net = DQNAgent(cfg.dqn_config(), cand_f, ctx_f, seed=3).online
    PolicyRegistry(root).publish({k: v.detach().clone() for k, v in net.state_dict().items()},
                                 {"config": cfg.dqn_config().to_dict(), "candidate_features": cand_f,
                                  "context_features": ctx_f})


def test_resume_of_another_network_is_refused_before_anything_starts(tmp_path, capsys) -> None:
    reg = tmp_path / "reg"
    _publish(reg, FedConfig(embed_dim=32))
    assert main(["fed", "local", "--registry", str(reg), "--set", "resume=true", "--set", "embed-dim=16"]) == 2
    err = capsys.readouterr().err
    assert "--set resume: registry version 1 of" in err and "embed_dim 32 there, 16 here" in err, err
    assert PolicyRegistry(reg).versions() == [1]  # nothing published


def test_resume_of_the_same_network_goes_on_to_start_the_run(tmp_path, capsys) -> None:
    reg = tmp_path / "reg"
    _publish(reg, FedConfig(embed_dim=16))
    with pytest.raises(Started):
        main(["fed", "local", "--registry", str(reg), "--set", "resume=true", "--set", "embed-dim=16"])
    assert "has no version" not in capsys.readouterr().err


def test_resume_from_an_empty_registry_warns_naming_it(tmp_path, capsys) -> None:
    reg = tmp_path / "typo"
    with pytest.raises(Started):
        main(["fed", "local", "--registry", str(reg), "--set", "resume=true"])
    err = " ".join(capsys.readouterr().err.split())  # rich may wrap a long path
    assert f"resume: registry '{reg}' has no version; starting a fresh policy" in err, err


def test_a_serverapp_crash_is_not_reported_as_flwr_run_status_0(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "flwr"
    fake.write_text("#!/bin/sh\necho 'ERROR :     An unhandled exception occurred in the ServerApp'\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(local_module, "flower_bin", lambda name: str(fake))
    with pytest.raises(FederationError) as info:
        flwr_run(tmp_path, "local", {}, dict(os.environ), tmp_path, timeout=60)
    assert str(info.value).startswith("the ServerApp failed (flwr run exited 0):")
    assert "status 0" not in str(info.value)
