"""Review of /recommend with a registry policy whose weights went NaN (a diverged federated round)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from solvers.dqn.solver import DEFAULT_POLICY  # noqa: E402


def _nan_policy_registry(root: Path) -> Path:
    """A registry whose v0001 is the shipped dqn policy with every weight NaN (it loads: the format is fine)."""
    reg = root / "registry"
    (reg / "v0001").mkdir(parents=True)
    payload = torch.load(DEFAULT_POLICY, map_location="cpu", weights_only=True)
    for tensor in payload["state_dict"].values():
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))
    torch.save(payload, reg / "v0001" / "policy.pt")
    (reg / "v0001" / "metadata.json").write_text(json.dumps(
        {"version": "v0001", "solver": "dqn", "params": {"policy": "{version_dir}/policy.pt"}}))
    (reg / "latest").write_text("v0001")
    return reg


def _strict(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_policy_scoring_nan_falls_back_and_the_reply_is_json(start_agent, wait_for, tmp_path):
    agent, url = start_agent(policy={"registry": str(_nan_policy_registry(tmp_path))},
                             recommend={"solver": "", "k": 3})
    wait_for(lambda: agent.current_ranker()[0].source == "policy", timeout=30)
    body = json.dumps({"workload": {"name": "web", "requests": {"cpu": 500, "memory": 512}}}).encode()
    req = urllib.request.Request(f"{url}/recommend", data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        status, text = resp.status, resp.read().decode()
    # Before: 200 with "score": NaN (no JSON parser but Python's reads it) in an arbitrary order, as a policy decision.
    reply = _strict(text)
    assert status == 200 and reply["source"] == "heuristic", reply
    assert "not a finite number" in reply["fallback_reason"]
    assert [n["node"] for n in reply["nodes"]] and all(isinstance(n["score"], float) for n in reply["nodes"])
