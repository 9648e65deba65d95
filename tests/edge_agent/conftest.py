"""Fixtures of the edge-agent tests: a site problem file, settings, an agent served on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_agent.agent import Agent
from edge_agent.config import AgentConfig, load_config
from iro_fed.testing import wait_for as wait_for_value


def _site_doc() -> dict[str, Any]:
    """Two domains: edge-1 (the agent's site, 4 nodes of different load, one tainted, one with a
    T4) and az-1 (2 nodes that the agent must never return)."""
    return {
        "resources": ["cpu", "memory"],
        "domains": [
            {"name": "edge-1", "kind": "edge", "carbon_intensity": 300.0,
             "price_per_hour": {"cpu": 0.05, "memory": 0.006, "gpu": 0.35}, "pue": 1.5},
            {"name": "az-1", "kind": "zone", "carbon_intensity": 100.0,
             "price_per_hour": {"cpu": 0.03, "memory": 0.004}},
        ],
        "latency_ms": {"users-eu": {"edge-1": 3.0, "az-1": 20.0}},
        "nodes": [
            {"name": "e1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384},
             "allocated": {"cpu": 6000, "memory": 8192}, "labels": {"disk": "ssd"}},
            {"name": "e2", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384},
             "allocated": {"cpu": 1000, "memory": 2048}},
            {"name": "e3", "domain": "edge-1", "capacity": {"cpu": 16000, "memory": 32768},
             "allocated": {"cpu": 4000, "memory": 4096}, "gpus": 1, "gpu_model": "T4"},
            {"name": "e4", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384},
             "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
            {"name": "z1", "domain": "az-1", "capacity": {"cpu": 32000, "memory": 65536}},
            {"name": "z2", "domain": "az-1", "capacity": {"cpu": 32000, "memory": 65536}},
        ],
        "workloads": [],
    }


def _http(method: str, url: str, body: Any = None, raw: bytes | None = None, headers: dict | None = None,
         timeout: float = 10.0) -> tuple[int, Any]:
    """(status, JSON or text) of one request; HTTP errors are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """:func:`iro_fed.testing.wait_for`: the predicate's first truthy value, polled; fails after ``timeout`` s."""
    return wait_for_value


@pytest.fixture
def site_doc() -> Callable[[], dict[str, Any]]:
    """The builder of the site problem document (a fresh dict per call)."""
    return _site_doc


@pytest.fixture
def http() -> Callable[..., tuple[int, Any]]:
    """``http(method, url, body=None, raw=None, headers=None)`` -> (status, JSON or text)."""
    return _http


@pytest.fixture
def site_file(tmp_path: Path) -> Path:
    path = tmp_path / "site.json"
    path.write_text(json.dumps(_site_doc()))
    return path


@pytest.fixture
def write_config(tmp_path: Path, site_file: Path) -> Callable[..., Path]:
    """Write an agent.yaml in tmp_path from overrides of a base config (port 0, fast loops)."""

    def write(**overrides: Any) -> Path:
        doc: dict[str, Any] = {
            "problem": str(site_file),
            "site": "edge-1",
            "node_name": "e2",
            "listen": {"port": 0},
            "recommend": {"k": 3, "solver": "kube-default", "solver_params": {"seed": 0}},
            "collect": {"interval_s": 0.2},
            "store": {"path": str(tmp_path / "exp.db"), "max_rows": 1000},
            "backoff": {"initial_s": 0.05, "max_s": 0.2},
            "log_level": "warning",
        }
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(doc.get(key), dict):
                doc[key] = {**doc[key], **value}
            else:
                doc[key] = value
        path = tmp_path / "agent.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    return write


@pytest.fixture
def start_agent(write_config: Callable[..., Path]) -> Iterator[Callable[..., tuple[Agent, str]]]:
    """Start an agent in this process (real HTTP server on 127.0.0.1); stopped after the test."""
    agents: list[Agent] = []

    def start(**overrides: Any) -> tuple[Agent, str]:
        cfg: AgentConfig = load_config(write_config(**overrides), env={})
        agent = Agent(cfg)
        agent.start()
        agents.append(agent)
        return agent, f"http://127.0.0.1:{agent.port}"

    yield start
    for a in agents:
        a.stop()
