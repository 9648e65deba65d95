"""POST /outcome retries: ``observed`` is required (a body without it was stored as {} and the real
outcome sent after got 409), and an exact retry is recognised by the JSON value of ``observed``, not
its text (``12`` re-serialised as ``12.0`` got 409), while ``true`` is still not ``1``."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.store import ExperienceStore, Outcome, Transition

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}


def _decide(http, url: str) -> str:
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200, reply
    return reply["decision_id"]


def _raw(http, url: str, text: str) -> tuple[int, dict]:
    """POST the body text as given (the client's own serialisation, e.g. ``12.0``)."""
    return http("POST", f"{url}/outcome", raw=text.encode())


def test_a_missing_observed_is_400_and_the_real_outcome_is_then_stored(start_agent, http) -> None:
    """Old code: 202 storing observed={}, then the real outcome got 409 (another outcome)."""
    agent, url = start_agent()
    did = _decide(http, url)
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2"})
    assert status == 400 and reply["field"] == "observed", reply
    assert "required" in reply["error"], reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 0
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {"latency_ms": 12}})
    assert status == 202 and reply["status"] == "recorded", reply


@pytest.mark.parametrize(("observed", "kind"), [("null", "null"), ("[]", "list"), ('"ok"', "string"), ("1", "integer")])
def test_observed_must_be_an_object(start_agent, http, observed, kind) -> None:
    agent, url = start_agent()
    did = _decide(http, url)
    status, reply = _raw(http, url, f'{{"decision_id": "{did}", "node": "e2", "observed": {observed}}}')
    assert status == 400 and reply["field"] == "observed", reply
    assert f"expected an object, got {kind}" in reply["error"], reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 0


def test_an_explicit_empty_observed_is_taken(start_agent, http) -> None:
    """{} is a deliberate outcome (where the pod went, nothing measured): stored, its retry a duplicate."""
    _, url = start_agent()
    did = _decide(http, url)
    body = {"decision_id": did, "node": "e2", "observed": {}}
    status, first = http("POST", f"{url}/outcome", body)
    assert status == 202 and first["status"] == "recorded", first
    status, again = http("POST", f"{url}/outcome", body)
    assert status == 200 and again["status"] == "duplicate" and again["outcome_id"] == first["outcome_id"], again


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        ('{"latency_ms": 12}', '{"latency_ms": 12.0}'),
        ('{"latency_ms": 12.0}', '{"latency_ms": 12}'),
        ('{"latency_ms": 1.5e1, "ok": true}', '{"ok": true, "latency_ms": 15}'),  # key order and spelling
        ('{"v": [1, {"n": 2}], "s": null}', '{"s": null, "v": [1.0, {"n": 2.0e0}]}'),
        ('{"big": 4503599627370496}', '{"big": 4.503599627370496e15}'),  # exact int vs float equality
    ],
)
def test_a_retry_with_numerically_equal_json_is_a_duplicate(start_agent, http, first, retry) -> None:
    """Old code: 409 (the canonical JSON text "12" differs from "12.0")."""
    agent, url = start_agent()
    did = _decide(http, url)
    status, one = _raw(http, url, f'{{"decision_id": "{did}", "node": "e2", "observed": {first}}}')
    assert status == 202 and one["status"] == "recorded", one
    status, two = _raw(http, url, f'{{"decision_id": "{did}", "node": "e2", "observed": {retry}}}')
    assert status == 200 and two["status"] == "duplicate" and two["outcome_id"] == one["outcome_id"], two
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 1


@pytest.mark.parametrize(
    ("first", "other"),
    [
        ('{"ok": true}', '{"ok": 1}'),  # Python has True == 1: JSON does not
        ('{"ok": 1}', '{"ok": true}'),
        ('{"ok": false}', '{"ok": 0.0}'),
        ('{"v": [1, true]}', '{"v": [1, 1]}'),
        ('{"latency_ms": 12}', '{"latency_ms": 12.5}'),
        ('{"latency_ms": 12}', '{"latency_ms": "12"}'),
        ('{"latency_ms": 12}', '{"latency_ms": 12, "ok": true}'),
        ('{"v": [1, 2]}', '{"v": [2, 1]}'),
        ('{"s": null}', '{"s": 0}'),
    ],
)
def test_a_different_outcome_is_still_409(start_agent, http, first, other) -> None:
    agent, url = start_agent()
    did = _decide(http, url)
    status, one = _raw(http, url, f'{{"decision_id": "{did}", "node": "e2", "observed": {first}}}')
    assert status == 202, one
    status, two = _raw(http, url, f'{{"decision_id": "{did}", "node": "e2", "observed": {other}}}')
    assert status == 409 and two["field"] == "decision_id", two
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 1


def test_store_compares_observed_as_json_values(tmp_path) -> None:
    """The store's own rule (also for outcomes given by Python callers): 12 == 12.0, True != 1."""
    store = ExperienceStore(tmp_path / "exp.db")
    try:
        for i in range(2):
            store.record(
                Transition(
                    workload="w",
                    source="solver",
                    state=np.zeros(3, dtype=np.float32),
                    action=0,
                    candidates=["a"],
                    reward=0.0,
                    decision_id=f"d{i}",
                )
            )
        assert store.record_outcome(Outcome("d0", {"latency_ms": 12, "ok": True}, node="a")).status == "recorded"
        assert store.record_outcome(Outcome("d0", {"ok": True, "latency_ms": 12.0}, node="a")).status == "duplicate"
        assert store.record_outcome(Outcome("d0", {"ok": 1, "latency_ms": 12}, node="a")).status == "conflict"
        assert store.record_outcome(Outcome("d1", {"x": 1}, node="a")).status == "recorded"
        assert store.record_outcome(Outcome("d1", {"x": True}, node="a")).status == "conflict"
        assert store.record_outcome(Outcome("d1", {"x": 1.0}, node="b")).status == "conflict"  # another node
        assert store.flush()
        assert store.counts()["outcomes"] == 2
    finally:
        store.close()
