"""The edge agent refuses a body that would parse to far more objects than a pod's before parsing it.

The shared handler's 512 MiB parse limit let a 1 MiB ``[{},{},...]`` (350,000 empty objects) be
parsed to ~28 MiB of objects per request; 16 at once peaked the agent at 226 MiB against the
Deployment's 256 Mi limit. The agent's limit is 32 times ``listen.max_body_bytes``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_agent.agent import MAX_PARSE_TOTAL, Agent
from edge_agent.config import load_config

SITE = {
    "resources": ["cpu", "memory"],
    "domains": [{"name": "edge-1", "kind": "edge"}],
    "nodes": [{"name": "e1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}},
              {"name": "e2", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}}],
    "workloads": [],
}


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    (tmp_path / "site.json").write_text(json.dumps(SITE))
    cfg = {"problem": str(tmp_path / "site.json"), "site": "edge-1", "node_name": "e1", "listen": {"port": 0},
           "recommend": {"k": 2}, "log_level": "error"}
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(cfg))
    a = Agent(load_config(tmp_path / "agent.yaml", env={}))
    a.start()
    yield a
    a.stop()


def _post(agent: Agent, raw: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{agent.port}/recommend", data=raw, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _pod(containers: int) -> dict[str, Any]:
    """A Pod as the API server sends it (managedFields' empty objects make it dense in JSON values)."""
    fields = {"f:spec": {"f:containers": {f'k:{{"name":"app{i}"}}': {".": {}, "f:image": {}, "f:name": {},
                                                                      "f:resources": {".": {}, "f:requests": {}}}
                                          for i in range(containers)}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "prod",
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": fields}]},
            "spec": {"containers": [{"name": f"app{i}", "image": "registry.example.com/app:1.2.3",
                                     "env": [{"name": f"V{j}", "value": "x"} for j in range(20)],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
                                    for i in range(containers)]}}


def test_a_body_of_empty_objects_is_refused_before_it_is_parsed(agent: Agent) -> None:
    body = b"[" + b",".join([b"{}"] * ((1 << 20) // 3 - 1)) + b"]"
    assert len(body) < agent.cfg.listen.max_body_bytes
    status, reply = _post(agent, body)
    # Before: parsed whole (~28 MiB of objects), then 400 "expected a JSON object".
    assert status == 413, reply
    assert reply["field"] == "body" and "once decoded and parsed" in reply["error"]
    assert "(listen.max_body_bytes)" in reply["error"]
    # The same inside a workload object: refused as a whole body, not after reading its fields.
    wrapped = b'{"workload": {"name": "w", "tolerations": [' + body[1:-1] + b"]}}"
    wrapped = wrapped[: agent.cfg.listen.max_body_bytes - 4].rsplit(b",", 1)[0] + b"]}}"
    status, reply = _post(agent, wrapped)
    assert status == 413 and reply["field"] == "body", reply
    assert agent.server is not None and agent.server.max_parse_total == MAX_PARSE_TOTAL


def test_a_large_real_pod_is_still_ranked(agent: Agent) -> None:
    raw = json.dumps(_pod(600)).encode()
    assert 256 << 10 < len(raw) < agent.cfg.listen.max_body_bytes
    status, reply = _post(agent, raw)
    assert status == 200, reply
    assert reply["workload"] == "prod/web-1" and reply["nodes"]


def test_the_parse_limit_never_passes_the_shared_handlers_ceiling(tmp_path: Path) -> None:
    # listen.max_body_bytes may be up to 1 GiB: 32 x 64 MiB allowed a 2 GiB parse, where the shared
    # handler's 512 MiB had refused it before the agent had a limit of its own.
    from iro_fed.k8s.httpjson import MAX_PARSE_MEMORY

    (tmp_path / "site.json").write_text(json.dumps(SITE))
    cfg = {"problem": str(tmp_path / "site.json"), "site": "edge-1", "node_name": "e1",
           "listen": {"port": 0, "max_body_bytes": 64 << 20}, "recommend": {"k": 2}, "log_level": "error"}
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(cfg))
    a = Agent(load_config(tmp_path / "agent.yaml", env={}))
    a.start()
    try:
        assert a.server is not None and a.server.max_parse_memory == MAX_PARSE_MEMORY
    finally:
        a.stop()
