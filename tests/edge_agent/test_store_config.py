"""The store's retry settings travel from the agent config to the store and show in /readyz."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import ConfigError, load_config

PROBLEM = Path(__file__).resolve().parents[2] / "examples" / "problems" / "edge-cloud-gpu.yaml"


def test_store_retry_settings_are_read_and_bounded(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(f"problem: {PROBLEM}\nstore:\n  path: {tmp_path / 'x.db'}\n  max_pending: 50\n  busy_timeout_s: 0.5\n")
    cfg = load_config(path, env={})
    assert cfg.store.max_pending == 50 and cfg.store.busy_timeout_s == 0.5
    for bad, key in (("max_pending: 0", "store.max_pending"), ("busy_timeout_s: -1", "store.busy_timeout_s"),
                     ("max_pending: 100000000", "store.max_pending")):
        path.write_text(f"problem: {PROBLEM}\nstore:\n  {bad}\n")
        with pytest.raises(ConfigError) as info:
            load_config(path, env={})
        assert key in str(info.value)


def test_store_busy_timeout_has_an_environment_variable(tmp_path):
    """Like its neighbours (IRO_AGENT_STORE_MAX_PENDING, ...): the variable wins over the file, and
    a bad value is refused naming the key and the variable (the variable was ignored before)."""
    path = tmp_path / "agent.yaml"
    path.write_text(f"problem: {PROBLEM}\nstore:\n  busy_timeout_s: 0.5\n")
    assert load_config(path, env={"IRO_AGENT_STORE_BUSY_TIMEOUT_S": "2.5"}).store.busy_timeout_s == 2.5
    for bad, fragment in (("-1", "must be >= 0.0, got -1.0"), ("nan", "must be finite"), ("601", "must be <= 600"),
                          ("soon", "expected a number, got 'soon'")):
        with pytest.raises(ConfigError) as info:
            load_config(path, env={"IRO_AGENT_STORE_BUSY_TIMEOUT_S": bad})
        assert "store.busy_timeout_s (from IRO_AGENT_STORE_BUSY_TIMEOUT_S)" in str(info.value), info.value
        assert fragment in str(info.value), info.value
