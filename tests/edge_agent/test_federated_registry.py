"""The agent reads the real policy registry of the federated server (iro_fed.federated.registry):
a published DQN global policy becomes the ranking of /recommend."""

from __future__ import annotations

import time

import pytest

WEB = {"name": "shop/web", "requests": {"cpu": 1500, "memory": 2048}, "user_region": "users-eu"}


def test_agent_serves_a_published_dqn_policy(start_agent, http, tmp_path):
    pytest.importorskip("torch", reason="the DQN policy needs torch (the dqn extra)")
    registry_mod = pytest.importorskip("iro_fed.federated.registry")
    task = pytest.importorskip("iro_fed.federated.task")

    cfg = task.FedConfig()
    cand_f, ctx_f = task.feature_sizes()
    net = task.build_agent(cfg).online
    registry = registry_mod.PolicyRegistry(tmp_path / "policies")
    agent, url = start_agent(recommend={"solver": "best-fit"},
                             policy={"registry": str(tmp_path / "policies"), "poll_interval_s": 0.1})
    before = http("POST", f"{url}/recommend", WEB)[1]
    assert before["source"] == "solver" and "no global policy loaded" in before["fallback_reason"]

    version, _ = registry.publish({k: v.detach().clone() for k, v in net.state_dict().items()},
                                  {"config": cfg.dqn_config().to_dict(), "candidate_features": cand_f,
                                   "context_features": ctx_f, "round": 1})
    deadline = time.monotonic() + 60
    while agent.policy.current is None and time.monotonic() < deadline:
        time.sleep(0.1)
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200, reply
    assert (reply["source"], reply["solver"], reply["policy_version"]) == ("policy", "dqn", f"v{version:04d}")
    assert reply["nodes"] and {e["node"] for e in reply["nodes"]} <= {"e1", "e2", "e3"}
    assert "fallback_reason" not in reply
