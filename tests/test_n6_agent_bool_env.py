"""IRO_AGENT_* booleans (task n6, item 3): 1/0, true/false, yes/no, on/off in any case; anything else is
an error naming the variable (exit 2) that now lists the accepted forms (it said only "true or false",
though 1, yes and on were taken)."""

from __future__ import annotations

import pytest
import yaml

from edge_agent.config import ConfigError, load_config


@pytest.fixture
def config(tmp_path):
    (tmp_path / "site.yaml").write_text(yaml.safe_dump({
        "resources": ["cpu"], "domains": [{"name": "edge-1", "kind": "edge"}],
        "nodes": [{"name": "e1", "domain": "edge-1", "capacity": {"cpu": 1000}}]}))
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"problem": "site.yaml", "store": {"path": None}}))
    return path


@pytest.mark.parametrize(("text", "value"), [("1", True), ("YES", True), ("on", True), (" True ", True),
                                             ("0", False), ("no", False), ("Off", False), ("false", False)])
def test_accepted_forms(config, text, value) -> None:
    assert load_config(config, env={"IRO_AGENT_FEDERATED_INSECURE": text}).federated.insecure is value


def test_an_invalid_value_names_the_variable_and_the_forms(config, capsys, monkeypatch) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config, env={"IRO_AGENT_FEDERATED_ENABLED": "maybe"})
    assert info.value.errors == [("federated.enabled (from IRO_AGENT_FEDERATED_ENABLED)",
                                  "expected true or false (also 1/0, yes/no, on/off), got 'maybe'")]
    from edge_agent.cli import main

    monkeypatch.setenv("IRO_AGENT_DISCOVER_NODES", "2")
    assert main(["check", "--config", str(config)]) == 2
    assert "prometheus.discover_nodes (from IRO_AGENT_DISCOVER_NODES): expected true or false" in capsys.readouterr().err
