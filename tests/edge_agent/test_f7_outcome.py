"""POST /outcome refuses what it cannot store as meant: unknown fields (with the closest name), a
missing, empty or foreign node; an agent without a store answers 409 (not retried, not 400)."""

from __future__ import annotations

import pytest

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}


def _decide(http, url: str) -> str:
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200, reply
    return reply["decision_id"]


def test_a_misspelt_field_is_400_and_the_corrected_retry_is_stored(start_agent, http) -> None:
    """Old code: 202 storing observed={}, then the corrected outcome got 409 (another outcome)."""
    agent, url = start_agent()
    did = _decide(http, url)
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observd": {"ok": True}})
    assert status == 400 and reply["field"] == "observd", reply
    assert "did you mean 'observed'" in reply["error"]
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {"ok": True}})
    assert status == 202 and reply["status"] == "recorded", reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 1


@pytest.mark.parametrize(
    ("node", "says"),
    [
        (None, "required"),  # no node field at all
        ("", "required"),
        ("z1", "is not a node of site 'edge-1'"),  # a node of the problem file's other domain
        ("e22", "did you mean 'e2'"),
        (5, "expected a node name"),
    ],
)
def test_the_node_must_be_a_node_of_the_site(start_agent, http, node, says) -> None:
    agent, url = start_agent()
    did = _decide(http, url)
    body = {"decision_id": did, "observed": {"ok": True}}
    if node is not None:
        body["node"] = node
    status, reply = http("POST", f"{url}/outcome", body)
    assert status == 400 and reply["field"] == "node", reply
    assert says in reply["error"], reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 0  # nothing stored: the right outcome can still come
    assert http("POST", f"{url}/outcome", {**body, "node": "e2"})[0] == 202


def test_no_store_is_409_with_a_clear_message(start_agent, http) -> None:
    """Old code: 400 with field "" (as if the request were wrong)."""
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/outcome", {"decision_id": "d1", "node": "e2", "observed": {}})
    assert status == 409 and reply["field"] is None, reply
    assert "no experience store" in reply["error"] and "store.path" in reply["error"]
