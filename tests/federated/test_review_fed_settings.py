"""Federated settings and node settings that were accepted and then failed or misled mid-run
(review findings): each is now refused up front with an error naming the setting."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

from iro_fed.federated.client_app import node_site  # noqa: E402
from iro_fed.federated.task import FedConfig, FedConfigError, build_agent, get_weights, local_train  # noqa: E402

LARGEST_SEED = 4_000_000  # seed * 1000 + site * 97 + round stays below numpy's 2**32

TINY = {"local_steps": 4, "learning_starts": 2, "batch_size": 2, "buffer_size": 64, "hours": 0.25,
        "embed_dim": 8, "hidden_dim": 16, "track_emissions": False}


def test_a_negative_seed_is_refused_naming_it() -> None:
    # was: accepted; every site's local_train then raised numpy's "expected non-negative integer"
    # (seed * 1000 + site * 97 + round < 0), so each round got only error replies and republished
    # the unchanged policy
    with pytest.raises(FedConfigError, match=r"^seed: expected 0\.\.4,000,000, got -1$"):
        FedConfig.from_run_config({"seed": -1})
    with pytest.raises(FedConfigError, match="^seed: "):
        FedConfig(seed=LARGEST_SEED + 1)


def test_the_largest_seed_trains_a_site() -> None:
    cfg = FedConfig(seed=LARGEST_SEED, **TINY)
    result = local_train(get_weights(build_agent(cfg).online), cfg, site=3, server_round=2)
    assert result.num_examples == 4


def test_an_unknown_scenario_is_refused_with_the_settings() -> None:
    # was: accepted; the ServerApp failed at its first evaluation, after every Flower process had started
    with pytest.raises(FedConfigError, match=r"^scenario: federated sites are defined for 'edge-iot', got 'bank'$"):
        FedConfig.from_run_config({"scenario": "bank"})


@pytest.mark.parametrize("registry", ["", "  "])
def test_an_empty_registry_path_is_refused(registry: str) -> None:
    # was: Path("") is the working folder: a deployed ServerApp wrote its versions into Flower's
    # temporary app folder, removed after the run
    with pytest.raises(FedConfigError, match="^registry: expected a folder path"):
        FedConfig.from_run_config({"registry": registry})


def _context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})


@pytest.mark.parametrize(("node_config", "key", "value"), [
    ({"site": 1.5}, "site", "1.5"),          # was: int(1.5) trained and reported site 1
    ({"site": True}, "site", "True"),        # was: site 1
    ({"partition-id": 2.7}, "partition-id", "2.7"),
    ({"site": -1}, "site", "-1"),            # was: refused only once training had started, as 'site'
])
def test_a_site_that_is_not_a_whole_number_is_refused_naming_the_key(node_config: dict, key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"^node-config {key}: expected an integer >= 0, got {value}$"):
        node_site(_context(node_config))


@pytest.mark.parametrize(("node_config", "site"), [
    ({}, 0), ({"site": 3}, 3), ({"partition-id": 2}, 2), ({"site": "4"}, 4), ({"site": 1, "partition-id": 0}, 1),
])
def test_whole_number_sites_are_read(node_config: dict, site: int) -> None:
    assert node_site(_context(node_config)) == site
