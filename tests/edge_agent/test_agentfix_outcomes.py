"""An outcome answered 202 ``pending`` (the store's file fails) is never dropped for
``store.max_pending``: while that many records wait for the file, a new outcome is refused with
503 and Retry-After (not taken, to be sent again), and the decisions the accepted outcomes need
are kept too. Real agent on 127.0.0.1, real sqlite file made to fail by a real write lock held by
another connection."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from edge_agent.store import ExperienceStore, Outcome, Transition
from tests.edge_agent.test_robust_outcome import decide, outcome_rows
from tests.edge_agent.test_store_retry import committed, wait_until, write_lock


def post(url: str, body: Any) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON) of one POST; HTTP errors are returned, not raised."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_accepted_outcomes_are_kept_and_new_ones_refused_with_503_while_the_store_is_full(
        start_agent, http, tmp_path) -> None:
    agent, url = start_agent(store={"max_pending": 2, "busy_timeout_s": 0.0})
    path = tmp_path / "exp.db"
    d1, d2, d3 = (decide(http, url) for _ in range(3))
    assert agent.store.flush(timeout=60)
    with write_lock(path):
        for did in (d1, d2):
            status, _, reply = post(f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {"ok": did}})
            assert status == 202 and reply["status"] == "pending", reply
        assert agent.store.pending == 2
        # A decision made meanwhile waits too; over max_pending it is what goes, not an accepted outcome.
        d4 = decide(http, url)
        wait_until(lambda: agent.store.failed == 1, "the newest decision dropped for max_pending")
        assert agent.store.pending == 2
        status, headers, reply = post(f"{url}/outcome", {"decision_id": d3, "node": "e2", "observed": {"ok": d3}})
        assert status == 503 and reply["field"] is None, reply
        assert "store.max_pending (2)" in reply["error"] and "send it again" in reply["error"]
        assert int(headers["Retry-After"]) >= 1
        assert agent.store.pending == 2  # the refused outcome was not queued
    assert agent.store.flush(timeout=60)
    # Both accepted outcomes were written; the refused one was not (its sender knows).
    assert [r[0] for r in outcome_rows(path)] == [d1, d2]
    assert committed(path)[0] == [d1, d2, d3]  # d4 was dropped (counted in failed), nothing else
    assert d4 not in committed(path)[0]
    # The caller learns each fate by sending the outcome again: stored (200), or taken now (202).
    status, _, reply = post(f"{url}/outcome", {"decision_id": d1, "node": "e2", "observed": {"ok": d1}})
    assert status == 200 and reply["status"] == "duplicate", reply
    status, _, reply = post(f"{url}/outcome", {"decision_id": d3, "node": "e2", "observed": {"ok": d3}})
    assert status == 202 and reply["status"] == "recorded", reply
    metrics = http("GET", f"{url}/metrics")[1]
    assert 'iro_agent_requests_total{code="503",handler="outcome"} 1.0' in metrics


def transition(i: int) -> Transition:
    return Transition(workload=f"w{i}", source="solver", state=np.arange(4, dtype=np.float32), action=0,
                      candidates=["a"], reward=float(i), decision_id=f"d{i}")


def test_the_decision_an_accepted_outcome_needs_is_not_dropped(tmp_path) -> None:
    """The decision and its outcome both wait for the file: newer records push the bound, the
    decision stays (without it the outcome would be refused as unknown once written)."""
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=0.0, max_pending=3)
    with write_lock(path):
        store.record(transition(1))
        assert store.record_outcome(Outcome("d1", {"v": 1}), timeout=60).status == "pending"
        for i in range(2, 6):
            store.record(transition(i))
        wait_until(lambda: store.failed == 3, "3 decisions dropped for max_pending")
        assert store.pending == 3
    assert store.flush(timeout=60)
    assert committed(path) == (["d1", "d5"], ["d1"])  # d1 and its outcome kept, the newest kept
    store.close()


def test_outcomes_still_pending_at_close_are_counted_and_logged(start_agent, http, tmp_path) -> None:
    agent, url = start_agent(store={"busy_timeout_s": 0.0})
    did = decide(http, url)
    assert agent.store.flush(timeout=60)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    agent.log.addHandler(handler)
    try:
        with write_lock(tmp_path / "exp.db"):
            status, _, reply = post(f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {}})
            assert status == 202 and reply["status"] == "pending"
            agent.stop()  # the file still fails: the outcome cannot be written
    finally:
        agent.log.removeHandler(handler)
    assert agent.store.lost_outcomes == 1
    assert "1 of them outcomes answered 'pending'" in agent.store.last_error
    lost = [r for r in records if "were not written" in r.getMessage()]
    assert len(lost) == 1 and lost[0].fields["lost_outcomes"] == 1
