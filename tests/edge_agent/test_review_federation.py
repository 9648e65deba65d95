"""The agent's SuperNode when the SuperLink goes away and comes back (review finding): a real
flower-superlink and a real flower-supernode under the agent's supervisor. The SuperNode keeps
running and retrying on its own; the agent used to go on reporting it ``connected`` (and
``iro_agent_supernode_connected 1``, no /readyz degradation) for as long as the SuperLink was gone."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from edge_agent.config import FederatedConfig  # noqa: E402
from edge_agent.federation import SuperNodeSupervisor  # noqa: E402
from edge_agent.metrics import AgentMetrics  # noqa: E402
from tests.edge_agent import test_federation_process as real  # noqa: E402


def _connected_gauge(metrics: AgentMetrics) -> float:
    return metrics.supernode_connected._value.get()


def test_a_lost_superlink_is_reported_until_the_node_reaches_one_again(tmp_path: Path, monkeypatch) -> None:
    link = real.Superlink(tmp_path / "first")
    fed = FederatedConfig(enabled=True, superlink=f"127.0.0.1:{link.port}", insecure=True, clientappio_port=0,
                          flwr_home=tmp_path / "node-home", executor="flower", check_interval_s=0.2,
                          restart_initial_s=0.2, restart_max_s=1.0)
    metrics = AgentMetrics("n", "s")
    metrics.add_federated()
    sup = SuperNodeSupervisor(fed, metrics)
    again = None
    try:
        sup.start()
        first = real.wait_for("the supernode to register", lambda: (lambda d: d if d["connected"] else None)(sup.status()))
        assert first.get("superlink_lost_at") is None and _connected_gauge(metrics) == 1.0
        link.stop()
        lost = real.wait_for("the agent to see the superlink gone",
                             lambda: (lambda d: d if not d["connected"] else None)(sup.status()))
        assert lost["state"] == "running" and lost["superlink_lost_at"] is not None and lost["node_id"] is not None
        assert sup.degradation() == f"supernode lost the superlink 127.0.0.1:{link.port} (it keeps retrying)"
        assert _connected_gauge(metrics) == 0.0
        # a SuperLink on the same address again: the node reaches it (reconnects or registers anew)
        (tmp_path / "second").mkdir()
        monkeypatch.setattr(real, "free_port", lambda: link.port)
        again = real.Superlink(tmp_path / "second")
        back = real.wait_for("the supernode to be connected again",
                             lambda: (lambda d: d if d["connected"] else None)(sup.status()))
        assert back["superlink_lost_at"] is None and sup.degradation() is None and _connected_gauge(metrics) == 1.0
    finally:
        sup.stop(timeout=5.0)
        for one in (link, again):
            if one is not None:
                one.stop()
