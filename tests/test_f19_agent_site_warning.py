"""The edge agent warns when its own node sits under another domain than ``site`` in its problem
file (f19): a file shared by the nodes of several domains with ``site`` copied from another
node's settings made the agent rank and label that other site, silently."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from edge_agent.agent import Agent
from edge_agent.config import load_config


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _agent(tmp_path: Path, node: str, env: dict[str, str] | None = None) -> tuple[Agent, list[logging.LogRecord]]:
    doc = {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "edge-1", "kind": "edge"}, {"name": "edge-2", "kind": "edge"}],
        "nodes": [
            {"name": "a1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}},
            {"name": "b1", "domain": "edge-2", "capacity": {"cpu": 8000, "memory": 16384}},
        ],
        "workloads": [],
    }
    problem = tmp_path / "sites.json"
    problem.write_text(json.dumps(doc))
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "problem": str(problem),
                "site": "edge-1",
                "node_name": node,
                "listen": {"port": 0},
                "log_level": "warning",
            }
        )
    )
    logger = logging.getLogger(f"iro-test-f19-{tmp_path.name}")
    logger.propagate = False
    handler = _Records()
    logger.addHandler(handler)
    return Agent(load_config(config, env=env or {}), logger), handler.records


def _site_warnings(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.levelno == logging.WARNING and "another domain" in r.getMessage()]


def test_a_node_of_another_domain_of_the_file_is_warned_about_once(tmp_path: Path) -> None:
    agent, records = _agent(tmp_path, "b1")
    warned = _site_warnings(records)
    assert len(warned) == 1, [r.getMessage() for r in records]
    fields = warned[0].fields  # type: ignore[attr-defined]
    assert fields["node"] == "b1" and fields["site"] == "edge-1"
    assert fields["problem"] == str(tmp_path / "sites.json")
    assert list(agent.view.site.node_index) == ["a1"]  # still a warning, not a change: it ranks its configured site


def test_the_warning_names_the_variable_that_set_the_site(tmp_path: Path) -> None:
    _, records = _agent(tmp_path, "b1", env={"IRO_AGENT_SITE": "edge-1"})
    (warned,) = _site_warnings(records)
    assert "IRO_AGENT_SITE" in warned.fields["site_from"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("node", ["a1", "host-not-in-the-file"])
def test_no_warning_for_a_node_of_the_site_or_one_outside_the_file(tmp_path: Path, node: str) -> None:
    _, records = _agent(tmp_path, node)
    assert _site_warnings(records) == []
