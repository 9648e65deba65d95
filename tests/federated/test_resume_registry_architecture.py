"""``resume`` from a registry version of another network whose weights have this run's shapes:
``load_state_dict`` took them silently; the version's stored config is compared now."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flwr")

from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.server_app import initial_weights  # noqa: E402
from iro_fed.federated.task import FedConfig, feature_sizes, get_weights  # noqa: E402
from solvers.dqn.agent import DQNAgent  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402


def _publish(registry: PolicyRegistry, dqn: DQNConfig, config: Any = None) -> dict[str, Any]:
    """A version holding a network built from ``dqn``, its metadata saying ``config`` (default: ``dqn``'s)."""
    cand_f, ctx_f = feature_sizes()
    net = DQNAgent(dqn, cand_f, ctx_f, seed=3).online
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    registry.publish(state, {"config": dqn.to_dict() if config is None else config,
                             "candidate_features": cand_f, "context_features": ctx_f})
    return state


def _run(tmp_path, **settings: Any) -> FedConfig:
    return FedConfig(registry=str(tmp_path / "reg"), embed_dim=8, hidden_dim=16, resume=True, **settings)


def test_other_attention_heads_are_refused_naming_the_setting(tmp_path) -> None:
    registry = PolicyRegistry(tmp_path / "reg")
    cfg = _run(tmp_path, attention_heads=4)
    # 2 heads: the same weight shapes as 4, split into heads differently
    _publish(registry, _run(tmp_path, attention_heads=2).dqn_config())
    with pytest.raises(ValueError, match=r"registry version 1 of .* does not fit this run's network "
                                         r"\(attention_heads 2 there, 4 here\)"):
        initial_weights(cfg, registry)


def test_another_c51_support_is_refused_naming_both_ends(tmp_path) -> None:
    registry = PolicyRegistry(tmp_path / "reg")
    cfg = _run(tmp_path)
    # e.g. a local fine-tune published with its own config: the same 21 atoms on [-5, 5]
    _publish(registry, cfg.dqn_config().replace(v_min=-5.0, v_max=5.0))
    with pytest.raises(ValueError, match="does not fit") as info:
        initial_weights(cfg, registry)
    assert "v_max 5.0 there, 10.0 here" in str(info.value) and "v_min -5.0 there, -10.0 here" in str(info.value)


def test_an_unreadable_stored_config_is_refused_naming_the_setting(tmp_path) -> None:
    registry = PolicyRegistry(tmp_path / "reg")
    cfg = _run(tmp_path)
    _publish(registry, cfg.dqn_config(), config={**cfg.dqn_config().to_dict(), "atomz": 21})
    with pytest.raises(ValueError, match=r"registry version 1 .*: its config is not readable .*atomz"):
        initial_weights(cfg, registry)


def test_learning_settings_may_differ_and_the_weights_are_taken(tmp_path) -> None:
    registry = PolicyRegistry(tmp_path / "reg")
    cfg = _run(tmp_path, learning_rate=0.01, gamma=0.5, batch_size=8)
    state = _publish(registry, _run(tmp_path).dqn_config())  # another rate, discount and batch: same network
    weights, version = initial_weights(cfg, registry)
    assert version == 1
    expected = {k: v.numpy() for k, v in state.items()}
    assert set(weights) == set(get_weights(DQNAgent(cfg.dqn_config(), *feature_sizes()).online))
    assert all((weights[k] == expected[k]).all() for k in weights)
