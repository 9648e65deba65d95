"""A site's training emissions are measured with its own country's grid mix (task n6, item 1).

Before, every site's codecarbon tracker used Germany's (``DEU``, the default of
:func:`solvers.dqn.train.train`): nothing in the edge agent's settings, the node config or the ClientApp
let a site say where it is. Now the agent's ``federated.emissions_country`` (``IRO_AGENT_FEDERATED_
EMISSIONS_COUNTRY``) becomes node-config ``emissions-country``, which the ClientApp passes to training;
a code codecarbon has no grid mix for is refused naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_agent.config import ConfigError, load_config
from iro_fed.federated.emissions import check_country

SITE = {"resources": ["cpu", "memory"],
        "domains": [{"name": "edge-1", "kind": "edge", "carbon_intensity": 300.0}],
        "nodes": [{"name": "e1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}}]}
TINY = dict(local_steps=20, hours=1.0, learning_starts=8, batch_size=8, min_nodes=1, embed_dim=16, hidden_dim=32)


def _config(tmp_path: Path, **federated: Any) -> Path:
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(SITE))
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"problem": "site.yaml", "store": {"path": None}, "federated": federated}))
    return path


class _Tracker:
    """Stands in for codecarbon's OfflineEmissionsTracker: records the country it was made with."""

    made: list[str] = []

    def __init__(self, country_iso_code: str, **kwargs: Any) -> None:
        self.made.append(country_iso_code)

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return 2e-6  # kg


@pytest.fixture
def tracker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    codecarbon = pytest.importorskip("codecarbon")
    made: list[str] = []
    monkeypatch.setattr(_Tracker, "made", made)
    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", _Tracker)
    return made


def _train_reply(node_config: dict[str, Any], track_emissions: bool = True):
    pytest.importorskip("torch")
    pytest.importorskip("flwr")
    from flwr.app import RecordDict

    from iro_fed.federated import wire
    from iro_fed.federated.inprocess import InProcessGrid
    from iro_fed.federated.task import FedConfig, build_agent, get_weights

    cfg = FedConfig(**TINY, track_emissions=track_emissions)
    grid = InProcessGrid([node_config], cfg.to_run_config())
    flat, layout = wire.encode(get_weights(build_agent(cfg).online))
    msg = grid.create_message(RecordDict({"arrays": flat, "config": wire.layout_config(layout, **{"server-round": 1})}),
                              "train", 1, "1")
    (reply,) = grid.send_and_receive([msg])
    return reply


def _node_config(fed) -> dict[str, Any]:
    """What flower-supernode reads from the agent's ``--node-config`` text."""
    pytest.importorskip("flwr")
    from flwr.common.config import parse_config_args

    from edge_agent.federation import node_config_arg

    return parse_config_args([node_config_arg(fed, None)])


def test_a_site_configured_fra_is_measured_with_fra(tmp_path, tracker) -> None:
    cfg = load_config(_config(tmp_path, emissions_country="fra"), env={})
    assert cfg.federated.emissions_country == "FRA"
    node = _node_config(cfg.federated)
    assert node == {"site": 0, "emissions-country": "FRA"}
    reply = _train_reply(node)
    assert not reply.has_error(), reply.error
    assert tracker == ["FRA"]  # was DEU whatever the site
    metrics = reply.content.metric_records["metrics"]
    assert metrics["emissions-measured"] == 1 and metrics["emissions-g"] == pytest.approx(2e-3)


def test_the_variable_sets_it_and_the_default_is_unchanged(tmp_path, tracker) -> None:
    path = _config(tmp_path)
    cfg = load_config(path, env={"IRO_AGENT_FEDERATED_EMISSIONS_COUNTRY": "GBR"})
    assert cfg.federated.emissions_country == "GBR"
    cfg = load_config(path, env={})
    assert cfg.federated.emissions_country == ""
    node = _node_config(cfg.federated)
    assert node == {"site": 0}  # nothing passed: the node config is as before
    assert not _train_reply(node).has_error()
    assert tracker == ["DEU"]


def test_the_real_tracker_takes_the_country(tmp_path, monkeypatch) -> None:
    """codecarbon's own tracker, not a stand-in: it resolves FRA to France's grid mix."""
    codecarbon = pytest.importorskip("codecarbon")
    trackers: list[Any] = []
    real = codecarbon.OfflineEmissionsTracker

    def spy(*args: Any, **kwargs: Any) -> Any:
        trackers.append(real(*args, **kwargs))
        return trackers[-1]

    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", spy)
    reply = _train_reply({"site": 1, "emissions-country": "FRA"})
    assert not reply.has_error(), reply.error
    (t,) = trackers
    assert t._country_iso_code == "FRA" and t._country_name == "France"
    assert reply.content.metric_records["metrics"]["emissions-measured"] == 1


@pytest.mark.parametrize("value", ["XYZ", "FR", "France", "12A"])
def test_an_unknown_country_is_refused_naming_the_key(tmp_path, value) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, emissions_country=value), env={})
    assert info.value.errors[0][0] == "federated.emissions_country", info.value.errors
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path), env={"IRO_AGENT_FEDERATED_EMISSIONS_COUNTRY": value})
    assert info.value.errors[0][0] == "federated.emissions_country (from IRO_AGENT_FEDERATED_EMISSIONS_COUNTRY)"


def test_unknown_is_codecarbons_table(monkeypatch) -> None:
    pytest.importorskip("codecarbon")
    with pytest.raises(ValueError, match="codecarbon has no grid mix for country 'XYZ'"):
        check_country("XYZ")
    from iro_fed.federated import emissions

    monkeypatch.setattr(emissions, "codecarbon_countries", lambda: None)  # not installed: the form only
    assert check_country("xyz") == "XYZ"
    with pytest.raises(ValueError, match="alpha-3"):
        check_country("FR")


def test_edge_agent_check_exits_2(tmp_path, capsys) -> None:
    from edge_agent.cli import main

    assert main(["check", "--config", str(_config(tmp_path, emissions_country="XYZ"))]) == 2
    assert "federated.emissions_country: codecarbon has no grid mix for country 'XYZ'" in capsys.readouterr().err


def test_node_config_entry_is_the_agents(tmp_path) -> None:
    with pytest.raises(ConfigError, match="federated.node_config.emissions-country: set it with "
                                          "federated.emissions_country"):
        load_config(_config(tmp_path, node_config={"emissions-country": "FRA"}), env={})


def test_the_clientapp_refuses_an_unknown_country_before_training(tracker) -> None:
    reply = _train_reply({"site": 0, "emissions-country": "XYZ"})
    assert reply.has_error() and "node-config emissions-country: codecarbon has no grid mix" in reply.error.reason
    assert tracker == []  # refused before any training


def test_iro_fed_node_refuses_an_unknown_country(capsys) -> None:
    pytest.importorskip("flwr")
    from iro_fed.cli import main

    argv = ["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "0", "--insecure", "--dry-run", "--node-config"]
    assert main([*argv, 'emissions-country="XYZ"']) == 2
    assert "--node-config: emissions-country: codecarbon has no grid mix" in capsys.readouterr().err
    assert main([*argv, 'emissions-country="FRA"']) == 0
