"""/outcome: one outcome per decision of the agent's own store. A retried POST (same body) is the
row already stored (200), a different second outcome is a 409, an unknown decision id a 400
naming ``decision_id``; nothing of a refused outcome is written. Real agent on 127.0.0.1, real
sqlite file; a real write lock held by another connection makes the file fail."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from edge_agent.store import ExperienceStore, Outcome, Transition
from tests.edge_agent.test_store_retry import write_lock

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}


def outcome_rows(path: Path) -> list[tuple[str, str | None, dict]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return [(d, n, json.loads(o)) for d, n, o in
                conn.execute("SELECT decision_id, node, observed FROM outcomes ORDER BY id")]
    finally:
        conn.close()


def decide(http, url: str) -> str:
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200, reply
    return reply["decision_id"]


def test_a_retried_outcome_is_stored_once(start_agent, http, tmp_path) -> None:
    agent, url = start_agent()
    did = decide(http, url)
    body = {"decision_id": did, "node": "e2", "observed": {"latency_ms": 4.2, "ok": True}}
    status, first = http("POST", f"{url}/outcome", body)
    assert status == 202 and first["recorded"], first
    again_status, again = http("POST", f"{url}/outcome", body)  # the client did not see the first answer
    assert agent.store.flush()
    assert outcome_rows(tmp_path / "exp.db") == [(did, "e2", {"latency_ms": 4.2, "ok": True})]  # once
    assert first["status"] == "recorded", first
    assert again_status == 200 and again["status"] == "duplicate" and again["outcome_id"] == first["outcome_id"]
    # The same outcome with its keys in another order is the same outcome.
    status, reordered = http("POST", f"{url}/outcome", {"observed": {"ok": True, "latency_ms": 4.2}, "node": "e2",
                                                         "decision_id": did})
    assert status == 200 and reordered["outcome_id"] == first["outcome_id"], reordered
    assert agent.store.flush()
    assert outcome_rows(tmp_path / "exp.db") == [(did, "e2", {"latency_ms": 4.2, "ok": True})]


def test_a_different_second_outcome_is_a_conflict_and_the_first_stays(start_agent, http, tmp_path) -> None:
    agent, url = start_agent()
    did = decide(http, url)
    assert http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {"latency_ms": 4.2}})[0] == 202
    for other in ({"decision_id": did, "node": "e2", "observed": {"latency_ms": 9.9}},
                  {"decision_id": did, "node": "e3", "observed": {"latency_ms": 4.2}}):
        status, reply = http("POST", f"{url}/outcome", other)
        assert status == 409 and reply["field"] == "decision_id", reply
        assert reply["error"].startswith("decision_id: ") and "already has another outcome" in reply["error"]
    assert agent.store.flush()
    assert outcome_rows(tmp_path / "exp.db") == [(did, "e2", {"latency_ms": 4.2})]
    assert agent.store.failed == 0


def test_an_unknown_decision_id_is_a_400_naming_it(start_agent, http, tmp_path) -> None:
    agent, url = start_agent()
    decide(http, url)
    status, reply = http("POST", f"{url}/outcome", {"decision_id": "no-such-decision", "node": "e2", "observed": {"x": 1}})
    assert status == 400 and reply["field"] == "decision_id", reply
    assert reply["error"].startswith("decision_id: unknown decision 'no-such-decision'")
    assert agent.store.flush()
    assert outcome_rows(tmp_path / "exp.db") == []
    assert agent.store.counts() == {"transitions": 1, "outcomes": 0}


def test_without_recording_decisions_no_outcome_is_taken(start_agent, http, tmp_path) -> None:
    """recommend.record false: the replies carry no decision_id, and no id is the agent's."""
    agent, url = start_agent(recommend={"record": False})
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200 and "decision_id" not in reply
    status, reply = http("POST", f"{url}/outcome", {"decision_id": "anything", "node": "e2", "observed": {}})
    assert status == 400 and reply["field"] == "decision_id"
    assert agent.store.flush() and outcome_rows(tmp_path / "exp.db") == []


# --- the store's rule, whichever way an outcome comes in -----------------------------------------


def transition(i: int) -> Transition:
    return Transition(workload=f"w{i}", source="solver", state=np.arange(4, dtype=np.float32), action=0,
                      candidates=["a"], reward=float(i), decision_id=f"d{i}")


def test_record_follows_the_same_rule_within_one_batch(tmp_path) -> None:
    # batch_s: everything below is committed in one transaction at the flush.
    store = ExperienceStore(tmp_path / "exp.db", batch_s=60)
    store.record(transition(1))
    store.record(outcome=Outcome("d1", {"v": 1}, node="a"))
    store.record(outcome=Outcome("d1", {"v": 1}, node="a"))  # an exact repeat: nothing new
    store.record(outcome=Outcome("d1", {"v": 2}, node="a"))  # another outcome: refused
    store.record(outcome=Outcome("d404", {"v": 1}))  # no such decision: refused
    assert store.flush(timeout=30)
    assert outcome_rows(tmp_path / "exp.db") == [("d1", "a", {"v": 1})]
    assert (store.rejected, store.failed, store.written) == (2, 0, 2)
    store.close()


def test_record_outcome_answers_each_case(tmp_path) -> None:
    store = ExperienceStore(tmp_path / "exp.db")
    store.record(transition(1))
    first = store.record_outcome(Outcome("d1", {"v": 1}))
    assert first.status == "recorded" and first.outcome_id is not None
    assert store.record_outcome(Outcome("d1", {"v": 1})) == type(first)("duplicate", first.outcome_id)
    assert store.record_outcome(Outcome("d1", {"v": 3})) == type(first)("conflict", first.outcome_id)
    assert store.record_outcome(Outcome("d2", {"v": 1})).status == "unknown"
    store.close()
    assert outcome_rows(tmp_path / "exp.db") == [("d1", None, {"v": 1})]


def test_outcomes_for_a_failing_file_are_pending_then_checked_when_written(tmp_path) -> None:
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=0.0)
    store.record(transition(1))
    assert store.flush()
    with write_lock(path):
        # Answered at once (not after the busy timeout or the retry): queued, decided when written.
        assert store.record_outcome(Outcome("d1", {"v": 1}), timeout=60).status == "pending"
        assert store.record_outcome(Outcome("d1", {"v": 1}), timeout=60).status == "pending"  # the retry
        assert store.record_outcome(Outcome("d404", {"v": 1}), timeout=60).status == "pending"
        assert outcome_rows(path) == []  # nothing half-written
    assert store.flush(timeout=60)
    assert outcome_rows(path) == [("d1", None, {"v": 1})]  # once, and not the unknown one
    assert store.rejected == 1 and store.failed == 0
    store.close()
