"""Resuming a checkpoint that records no feature names (audit h4, item 3).

Such a checkpoint (written before ``feature_names`` was recorded) was checked by its feature counts
only: one trained on other features of the same counts resumed silently, and the new checkpoint
recorded this version's names over weights learned on other columns. It is now refused unless the
caller passes ``assume_feature_names=True`` (a note says so).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("torch")

from iro_fed.cli import main  # noqa: E402
from iro_fed.features import feature_layout  # noqa: E402
from solvers.dqn.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402
from solvers.dqn.train import train  # noqa: E402
from tests.solvers.test_j4_dqn_audit import SMALL, SMALL_SET, TRAIN_CFG, FeatureEnv, _policy  # noqa: E402


def test_resume_of_a_checkpoint_without_feature_names_is_refused(tmp_path) -> None:
    old = _policy(tmp_path / "old.pt", None, DQNConfig(**SMALL))
    out = tmp_path / "resumed.pt"
    built = []

    def env() -> FeatureEnv:
        built.append(1)
        return FeatureEnv()

    cfg = DQNConfig(**TRAIN_CFG)
    # Before: resumed (the counts match), and out recorded this version's names.
    with pytest.raises(CheckpointError, match=r"no 'feature_names'.*assume_feature_names=True") as info:
        train([env], cfg, steps=40, out=out, resume=old, progress=False, track_emissions=False,
              metadata={"feature_names": feature_layout()})
    assert repr(old) in str(info.value)
    assert not out.exists() and not built  # refused before any env was built


def test_assume_feature_names_resumes_it_with_a_note(tmp_path, caplog) -> None:
    old = _policy(tmp_path / "old.pt", None, DQNConfig(**SMALL))
    out = tmp_path / "resumed.pt"
    cfg = DQNConfig(**TRAIN_CFG)
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        train([FeatureEnv], cfg, steps=40, out=out, resume=old, progress=False, track_emissions=False,
              metadata={"feature_names": feature_layout()}, assume_feature_names=True)
    assert "no 'feature_names'" in caplog.text and old in caplog.text and "assume_feature_names" in caplog.text
    assert load_checkpoint(out)[1]["feature_names"] == feature_layout()
    # A run that states no names (other envs) has nothing to compare, as before.
    train([FeatureEnv], cfg, steps=40, resume=old, progress=False, track_emissions=False)


def _resume_of_a_nameless_checkpoint(tmp_path: Path) -> tuple[str, Path, list[str]]:
    """A checkpoint without feature names, where a resume writes, and the `iro train` arguments."""
    from iro_fed.sim.signals import data_dir

    if not (data_dir() / "carbon").is_dir():
        pytest.skip("needs ../shared/data")
    old = _policy(tmp_path / "old.pt", None)
    out = tmp_path / "new" / "p.pt"
    return old, out, ["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.5", "--eval-episodes",
                      "0", "--no-emissions", *SMALL_SET, "--resume", old, "--out", str(out)]


def test_iro_train_resume_of_a_checkpoint_without_feature_names_exits_2(tmp_path, capsys) -> None:
    old, out, argv = _resume_of_a_nameless_checkpoint(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--resume: policy" in err and "no 'feature_names'" in err and old in err
    assert not out.parent.exists()
    assert json.loads((tmp_path / "old.json").read_text()).get("feature_names") is None


def test_iro_train_assume_feature_names_resumes_it(tmp_path, capsys) -> None:
    _, out, argv = _resume_of_a_nameless_checkpoint(tmp_path)
    assert main([*argv, "--assume-feature-names"]) == 0
    assert "no 'feature_names'" in capsys.readouterr().err
    assert json.loads(out.with_suffix(".json").read_text())["feature_names"] == feature_layout()


def test_iro_train_assume_feature_names_without_resume_exits_2(tmp_path, capsys) -> None:
    argv = ["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.5", "--eval-episodes", "0",
            "--no-emissions", "--assume-feature-names", "--out", str(tmp_path / "p.pt")]
    assert main(argv) == 2
    assert "--assume-feature-names: only with --resume" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
