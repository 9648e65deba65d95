"""Settings that would exhaust memory are refused by name, before anything is allocated."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.limits import MAX_TOP_K
from solvers.dqn.config import ConfigError, DQNConfig
from solvers.dqn.replay import PrioritizedReplayBuffer, ReplayBuffer, Transition, _physical_memory


def test_top_k_above_the_project_limit_is_refused_naming_it() -> None:
    # Was: accepted; `iro train --set top_k=100000` died allocating a 373 GiB replay buffer.
    assert DQNConfig(top_k=MAX_TOP_K).top_k == MAX_TOP_K
    with pytest.raises(ConfigError, match=rf"^top_k: expected at most {MAX_TOP_K}, got {MAX_TOP_K + 1}$"):
        DQNConfig(top_k=MAX_TOP_K + 1)


@pytest.mark.parametrize("kind", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_buffer_larger_than_memory_is_refused_naming_buffer_size(kind: type) -> None:
    have = _physical_memory()
    if not have:
        pytest.skip("the platform does not report its memory")
    obs = {"candidates": np.zeros((1000, 20), np.float32), "mask": np.ones(1001, bool)}
    per = 2 * (1000 * 20 * 4 + 1001) + 16
    capacity = have // per + 1
    buf = kind(capacity) if kind is ReplayBuffer else kind(capacity, 0.5, 1e-6)
    with pytest.raises(ValueError, match=r"^buffer_size: .* GiB, more than this machine's .*lower buffer_size or top_k$"):
        buf.add(Transition(obs, 0, 0.0, obs, 1.0))
    assert len(buf) == 0 and not buf.storage
    small = kind(4) if kind is ReplayBuffer else kind(4, 0.5, 1e-6)
    small.add(Transition(obs, 0, 0.0, obs, 1.0))  # the same observation in a buffer that fits
    assert len(small) == 1


def test_iro_train_with_a_top_k_over_the_limit_exits_2(tmp_path, capsys) -> None:
    argv = ["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.2", "--eval-episodes", "0",
            "--no-emissions", "--out", str(tmp_path / "p.pt"), "--set", "top_k=100000"]
    assert main(argv) == 2
    assert f"top_k: expected at most {MAX_TOP_K}, got 100000" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
