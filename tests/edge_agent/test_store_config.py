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
