"""A resumed run's sites run other episodes than the runs before it (audit j10, item 4), and a resume
from an empty registry says so (item 5).

A resumed run counts its rounds from 1 again and ``site_seed(seed, site, round)`` ignored the version it
resumed from: every ``iro fed rounds`` fine-tune reran the first run's simulated episodes. The ServerApp
now sends ``resumed-from`` in the train config and the sites fold it into their seeds (fresh runs: unchanged).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import ArrayRecord, ConfigRecord  # noqa: E402

import solvers  # noqa: E402
from iro_fed.federated import client_app, wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.server_app import initial_weights, run_federation  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import (  # noqa: E402
    FedConfig,
    build_agent,
    feature_sizes,
    full_state_dict,
    get_weights,
    local_train,
    site_seed,
)
from iro_fed.learning import stream_seed  # noqa: E402

TINY = dict(local_steps=40, hours=1.0, learning_starts=32, batch_size=16, track_emissions=False, min_nodes=1,
            embed_dim=16, hidden_dim=32, buffer_size=500)


def test_fresh_seeds_are_unchanged_and_resumed_ones_differ() -> None:
    for seed, site, rnd in ((0, 0, 1), (3, 2, 5), (4_000_000, 7, 1)):
        assert site_seed(seed, site, rnd) == site_seed(seed, site, rnd, 0) == stream_seed(seed, site, rnd)
    # the episodes of each (run, site, round) in a chain of fine-tunes (resumed from v3, v6, ...) are their own
    seeds = [site_seed(0, site, rnd, v) for v in (0, 3, 6, 9) for site in range(5) for rnd in range(1, 4)]
    assert len(set(seeds)) == len(seeds)


class _Captured(Exception):
    pass


def test_local_train_seeds_its_round_with_the_version_resumed_from(monkeypatch) -> None:
    seen: list[int] = []

    def fake_train(*_args: Any, seed: int, **_kwargs: Any):
        seen.append(seed)
        raise _Captured

    monkeypatch.setattr(solvers, "train_dqn", fake_train, raising=False)
    cfg = FedConfig(**TINY)
    weights = get_weights(build_agent(cfg).online)
    for resumed_from in (0, 3):
        with pytest.raises(_Captured):
            local_train(weights, cfg, site=1, server_round=2, resumed_from=resumed_from)
    assert seen == [stream_seed(cfg.seed, 1, 2), stream_seed(cfg.seed, 1, 2, 3)]


def test_the_site_reads_resumed_from_off_the_train_config(monkeypatch) -> None:
    seen: list[int] = []

    def fake_local_train(*_args: Any, resumed_from: int = 0, **_kwargs: Any):
        seen.append(resumed_from)
        raise _Captured

    monkeypatch.setattr(client_app, "local_train", fake_local_train)
    cfg = FedConfig(**TINY)
    grid = InProcessGrid([{"site": 0}], cfg.to_run_config())
    strategy = make_strategy("fedavg", cfg)
    arrays, layout = wire.encode(get_weights(build_agent(cfg).online))
    for extra in ({}, {"resumed-from": 3}):
        messages = strategy.configure_train(1, arrays, wire.layout_config(layout, **extra), grid)
        replies = list(grid.send_and_receive(messages))
        assert len(replies) == 1 and replies[0].has_error()  # fake_local_train raised
    assert seen == [0, 3]
    assert client_app.resumed_from_of(None) == 0
    with pytest.raises(ValueError, match="resumed-from"):
        client_app.resumed_from_of(ConfigRecord({"resumed-from": -1}))


class _Result:
    arrays = ArrayRecord()


class _StubStrategy:
    """Records the train config the ServerApp starts the strategy with; runs no round."""

    def __init__(self) -> None:
        self.train_config: ConfigRecord | None = None
        self.rounds: dict[int, Any] = {}

    def start(self, *, train_config: ConfigRecord, **_kwargs: Any) -> _Result:
        self.train_config = train_config
        return _Result()


def test_the_server_sends_resumed_from_only_in_a_resumed_run(tmp_path) -> None:
    fresh = FedConfig(registry=str(tmp_path / "reg"), **TINY)
    stub = _StubStrategy()
    run_federation(InProcessGrid([{"site": 0}], fresh.to_run_config()), fresh, strategy=stub)
    assert "resumed-from" not in stub.train_config  # a fresh run's sites seed as before
    registry = PolicyRegistry(tmp_path / "reg")
    weights = get_weights(build_agent(fresh).online)
    cand_f, ctx_f = feature_sizes()
    meta = {"config": fresh.dqn_config().to_dict(), "candidate_features": cand_f, "context_features": ctx_f}
    registry.publish(full_state_dict(fresh, weights), meta)
    registry.publish(full_state_dict(fresh, weights), meta)
    resumed = fresh.replace(resume=True)
    stub = _StubStrategy()
    summary = run_federation(InProcessGrid([{"site": 0}], resumed.to_run_config()), resumed, strategy=stub)
    assert summary["resumed_from"] == 2 and stub.train_config["resumed-from"] == 2


def test_resume_from_an_empty_registry_logs_a_warning_naming_it(tmp_path, caplog) -> None:
    cfg = FedConfig(registry=str(tmp_path / "typo"), resume=True, **TINY)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        _, version = initial_weights(cfg, PolicyRegistry(cfg.registry))
    assert version is None
    assert f"resume: registry '{tmp_path / 'typo'}' has no version; starting a fresh policy" in caplog.text
