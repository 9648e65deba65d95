"""The policy registry seam: `latest` pointer, reload of new versions, last good version kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge_agent.policy import PolicyLoadError, RegistryPolicySource
from iro_fed.problem_io import write_json_atomic

WEB = {"name": "shop/web", "requests": {"cpu": 1500, "memory": 2048}, "user_region": "users-eu"}


def publish(registry: Path, version: str, metadata: dict | None, symlink: bool = False, pointer: str | None = None) -> None:
    """Write a version folder and point `latest` at it (atomically, as a registry writer must)."""
    (registry / version).mkdir(parents=True, exist_ok=True)
    if metadata is not None:
        write_json_atomic(registry / version / "metadata.json", {"version": version, **metadata})
    latest = registry / "latest"
    tmp = registry / ".latest.tmp"
    if symlink:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(version)
    else:
        tmp.write_text((pointer or version) + "\n")
    os.replace(tmp, latest)


def test_registry_follows_latest_and_keeps_last_good(tmp_path):
    reg = tmp_path / "policies"
    src = RegistryPolicySource(reg)
    with pytest.raises(PolicyLoadError, match="does not exist"):
        src.poll()
    reg.mkdir()
    with pytest.raises(PolicyLoadError, match="no 'latest' pointer"):
        src.poll()
    publish(reg, "v0001", {"solver": "best-fit", "params": {"seed": 3}})
    assert src.poll() is True and src.current.version == "v0001" and src.current.solver.name == "best-fit"
    assert src.current.solver.seed == 3
    assert src.poll() is False  # unchanged
    publish(reg, "v0002", {"solver": "no-such-solver"})
    with pytest.raises(PolicyLoadError, match="unknown solver 'no-such-solver'"):
        src.poll()
    assert src.current.version == "v0001" and "no-such-solver" in src.last_error
    publish(reg, "v0003", None)  # metadata not written (yet)
    with pytest.raises(PolicyLoadError, match="metadata.json: missing"):
        src.poll()
    publish(reg, "v0004", {"solver": "cpsat"})  # a batch solver cannot rank
    with pytest.raises(PolicyLoadError, match="not an online solver"):
        src.poll()
    publish(reg, "v0005", {"solver": "worst-fit"}, symlink=True)
    assert src.poll() is True and src.current.version == "v0005" and src.last_error is None
    # The federated registry's pointer names the checkpoint inside the version folder.
    publish(reg, "v0006", {"solver": "best-fit"}, pointer="v0006/policy.pt")
    assert src.poll() is True and src.current.version == "v0006"
    publish(reg, "v0007", {"solver": "best-fit"}, pointer="/etc/passwd")
    with pytest.raises(PolicyLoadError, match="expected a version name"):
        src.poll()
    assert src.current.version == "v0006"


def test_version_dir_placeholder_and_custom_loader(tmp_path):
    reg = tmp_path / "reg"
    publish(reg, "v1", {"solver": "best-fit", "params": {"weights": "{version_dir}/model.pt"}})
    seen = {}

    def loader(version_dir, metadata):
        seen["dir"], seen["meta"] = version_dir, metadata
        raise RuntimeError("weights file is corrupt")

    src = RegistryPolicySource(reg, loader=loader)
    with pytest.raises(PolicyLoadError, match="loading failed: RuntimeError: weights file is corrupt"):
        src.poll()
    assert seen["dir"] == reg / "v1" and seen["meta"]["version"] == "v1"
    # The default loader substitutes {version_dir}; best-fit has no 'weights' setting, which it names.
    with pytest.raises(PolicyLoadError, match="unknown setting"):
        RegistryPolicySource(reg).poll()


def test_agent_serves_fallback_then_policy_then_keeps_it(start_agent, http, tmp_path, wait_for):
    reg = tmp_path / "policies"
    agent, url = start_agent(recommend={"solver": ""}, policy={"registry": str(reg), "poll_interval_s": 0.05})
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200 and reply["source"] == "heuristic" and reply["policy_version"] is None
    assert "no global policy loaded" in reply["fallback_reason"] and "does not exist" in reply["fallback_reason"]
    ready = http("GET", f"{url}/readyz")[1]
    assert ready["ready"] and ready["status"] == "degraded"

    reg.mkdir()
    publish(reg, "v0001", {"solver": "worst-fit"})
    wait_for(lambda: http("POST", f"{url}/recommend", WEB)[1]["source"] == "policy")
    reply = http("POST", f"{url}/recommend", WEB)[1]
    assert reply["policy_version"] == "v0001" and reply["solver"] == "worst-fit" and "fallback_reason" not in reply

    publish(reg, "v0002", {"solver": "broken"})
    wait_for(lambda: "broken" in (http("GET", f"{url}/readyz")[1]["policy_registry"]["last_error"] or ""))
    reply = http("POST", f"{url}/recommend", WEB)[1]
    assert reply["source"] == "policy" and reply["policy_version"] == "v0001"  # the last good one
    metrics = http("GET", f"{url}/metrics")[1]
    assert 'iro_agent_dependency_up{dependency="policy_registry"} 0.0' in metrics
    assert 'iro_agent_policy_info{source="policy",version="v0001"} 1.0' in metrics

    publish(reg, "v0003", {"solver": "best-fit"})
    wait_for(lambda: http("POST", f"{url}/recommend", WEB)[1]["policy_version"] == "v0003")
    rows = (agent.store.flush(), agent.store.transitions(limit=100))[1]
    assert {r["policy_version"] for r in rows} >= {None, "v0001", "v0003"}
    assert json.loads(json.dumps(http("GET", f"{url}/readyz")[1]))["ranking"]["version"] == "v0003"
