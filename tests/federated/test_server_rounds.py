"""The ServerApp's loop on the in-process grid: what each registry version holds and how it was
evaluated, rounds that aggregate nothing, and how the registry replaces ``latest``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry, RegistryError  # noqa: E402
from iro_fed.federated.server_app import run_federation  # noqa: E402
from iro_fed.federated.strategies import FedAvg  # noqa: E402
from iro_fed.federated.task import FedConfig, build_agent, evaluate_policy, get_weights  # noqa: E402

TINY = dict(local_steps=60, hours=1.0, learning_starts=16, batch_size=8, track_emissions=False, min_nodes=2,
            embed_dim=16, hidden_dim=32)


class RecordingFedAvg(FedAvg):
    """FedAvg that keeps what each round aggregated (named arrays), to compare with the registry."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.aggregates: dict[int, dict[str, np.ndarray]] = {}

    def aggregate_train(self, server_round, replies):
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            self.aggregates[server_round] = wire.decode(arrays, self._layout)
        return arrays, metrics


def _exchanged(state: dict) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in state.items() if not k.endswith((".eps_in", ".eps_out"))}


def test_each_version_is_its_rounds_aggregate_evaluated_as_published(tmp_path) -> None:
    cfg = FedConfig(num_server_rounds=2, registry=str(tmp_path / "reg"), **TINY)
    strategy = RecordingFedAvg(fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2)
    grid = InProcessGrid([{"site": 0}, {"site": 2}], cfg.to_run_config())
    summary = run_federation(grid, cfg, strategy=strategy)
    registry = PolicyRegistry(cfg.registry)
    assert registry.versions() == [1, 2] and registry.latest_version() == 2
    initial = get_weights(build_agent(cfg).online)
    for version in (1, 2):
        state, meta = registry.load(version)
        published = _exchanged(state)
        aggregate = strategy.aggregates[version]
        assert set(published) == set(aggregate)
        for key, value in aggregate.items():
            np.testing.assert_array_equal(published[key], value, err_msg=f"v{version} {key}")
        assert any(not np.array_equal(published[k], initial[k]) for k in initial)
        # the evaluation in the metadata is this round's aggregate's, not the previous round's
        assert meta["evaluation"] == evaluate_policy(aggregate, cfg, cfg.eval_site)
        assert meta["round"] == version and meta["strategy"] == "fedavg" and meta["aggregated"] is True
        assert sorted(meta["sites"]) == [0, 2] and sorted(meta["valid_sites"]) == [0, 2]
        assert meta["nodes"] == strategy.rounds[version]["nodes"]
        solver_meta = json.loads((registry.path(version).parent / "metadata.json").read_text())
        assert solver_meta["round"] == version and solver_meta["evaluation"] == meta["evaluation"]
    assert summary["rounds"][1]["eval-reward"] == registry.load(2)[1]["evaluation"]["eval-reward"]
    for key, value in summary["weights"].items():
        np.testing.assert_array_equal(value, strategy.aggregates[2][key])


def test_rounds_that_drop_every_reply_keep_and_republish_the_initial_policy(tmp_path) -> None:
    # Before: the run crashed at its end ("arrays: expected the one flat array 'weights', got []"):
    # Flower's Result has no arrays when no round aggregated anything.
    cfg = FedConfig(num_server_rounds=2, registry=str(tmp_path / "reg"), **TINY)
    grid = InProcessGrid([{"site": 0, "attack": "nan"}, {"site": 2, "attack": "nan"}], cfg.to_run_config())
    summary = run_federation(grid, cfg)
    initial = get_weights(build_agent(cfg).online)
    for key, value in initial.items():
        np.testing.assert_array_equal(summary["weights"][key], value)
    registry = PolicyRegistry(cfg.registry)
    assert registry.versions() == [1, 2]
    for version in (1, 2):
        state, meta = registry.load(version)
        assert meta["aggregated"] is False and meta["nodes"] == [] and meta["sites"] == []
        assert len(meta["dropped"]) == 2 and all("NaN" in d["reason"] for d in meta["dropped"])
        assert meta["evaluation"] == summary["initial"]
        for key, value in initial.items():
            np.testing.assert_array_equal(state[key].numpy(), value)


def _meta(round_: int) -> dict:
    return {"config": {}, "candidate_features": 1, "context_features": 1, "round": round_}


def test_latest_is_replaced_not_rewritten_and_a_failed_publish_leaves_it(tmp_path) -> None:
    registry = PolicyRegistry(tmp_path / "reg")
    assert registry.publish({"w": np.ones(2, np.float32)}, _meta(1))[0] == 1
    old = tmp_path / "latest-before"
    os.link(registry.root / "latest", old)  # the file a reader opened before the next publish
    assert registry.publish({"w": np.full(2, 2.0, np.float32)}, _meta(2))[0] == 2
    assert old.read_text() == "v0001/policy.pt\n"  # a new file took its name: that reader sees all of v1
    assert (registry.root / "latest").read_text() == "v0002/policy.pt\n"
    # a publish that fails before it points latest (its pointer lock cannot be opened) does not move latest
    # and removes the version it wrote (a folder such as v0003 that is already there is another
    # writer's: the next writer skips it, see test_review_registry.py)
    (registry.root / ".publish.lock").unlink()
    (registry.root / ".publish.lock").mkdir()
    with pytest.raises(RegistryError, match="cannot point 'latest' at version v0003"):
        registry.publish({"w": np.full(2, 3.0, np.float32)}, _meta(3))
    assert registry.versions() == [1, 2]
    (registry.root / ".publish.lock").rmdir()
    assert registry.latest_version() == 2
    np.testing.assert_array_equal(registry.load()[0]["w"].numpy(), np.full(2, 2.0, np.float32))
    assert not [p for p in registry.root.iterdir() if p.name.startswith(".latest.")]
    # versions only go up, also from a registry opened again
    assert PolicyRegistry(tmp_path / "reg").publish({"w": np.zeros(2, np.float32)}, _meta(4))[0] == 3
    assert PolicyRegistry(tmp_path / "reg").latest_version() == 3
