"""What the edge agent stores and prints from outside input: an outcome's ``observed`` is capped
(it filled the store with 1 MiB a row), so is the workload name a decision records; the
Prometheus password in ``prometheus.url`` is never printed (``check`` and the start log line)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from edge_agent.agent import MAX_OBSERVED_BYTES, MAX_WORKLOAD_NAME, Agent
from edge_agent.cli import main
from edge_agent.config import load_config

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}
PROM_URL = "http://admin:s3cr3tpw@127.0.0.1:9/"


def _decide(http, url: str, body: dict | None = None) -> str:
    status, reply = http("POST", f"{url}/recommend", body or WEB)
    assert status == 200, reply
    return reply["decision_id"]


def test_an_observed_over_the_limit_is_400_and_nothing_is_stored(start_agent, http) -> None:
    """Old code: 202, and the whole object (up to the 1 MiB body limit) stored in the outcome row."""
    agent, url = start_agent()
    did = _decide(http, url)
    big = {"junk": "A" * (MAX_OBSERVED_BYTES + 1)}
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": big})
    assert status == 400 and reply["field"] == "observed", reply
    assert str(MAX_OBSERVED_BYTES) in reply["error"], reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 0
    # The decision can still get its real outcome.
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {"latency_ms": 12}})
    assert status == 202 and reply["status"] == "recorded", reply


def test_an_observed_at_the_limit_is_stored(start_agent, http) -> None:
    agent, url = start_agent()
    did = _decide(http, url)
    observed = {"note": ""}
    observed["note"] = "x" * (MAX_OBSERVED_BYTES - len(json.dumps(observed)))
    assert len(json.dumps(observed)) == MAX_OBSERVED_BYTES
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": observed})
    assert status == 202, reply
    assert agent.store.flush()
    assert agent.store.counts()["outcomes"] == 1


def test_non_ascii_observed_is_measured_as_stored(start_agent, http) -> None:
    """The store writes JSON escaped to ASCII: a character past U+FFFF takes 12 bytes there."""
    agent, url = start_agent()
    did = _decide(http, url)
    observed = {"note": "\U0001f600" * (MAX_OBSERVED_BYTES // 12 + 1)}
    status, reply = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": observed})
    assert status == 400 and reply["field"] == "observed", reply


def test_a_long_workload_name_is_400_and_no_decision_is_stored(start_agent, http) -> None:
    """Old code: 200, and the name (up to the body limit) stored with the decision's transition."""
    agent, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", {**WEB, "name": "a" * (MAX_WORKLOAD_NAME + 1)})
    assert status == 400 and reply["field"] == "workload.name", reply
    assert str(MAX_WORKLOAD_NAME) in reply["error"], reply
    assert agent.store.flush()
    assert agent.store.counts()["transitions"] == 0
    _decide(http, url, {**WEB, "name": "a" * MAX_WORKLOAD_NAME})  # the longest a Pod's namespace/name can be
    assert agent.store.flush()
    assert agent.store.counts()["transitions"] == 1


def test_a_pod_with_the_longest_names_is_ranked(start_agent, http) -> None:
    _, url = start_agent()
    pod = {"metadata": {"name": "p" * 253, "namespace": "n" * 63},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}
    status, reply = http("POST", f"{url}/recommend", pod)
    assert status == 200 and len(reply["workload"]) == MAX_WORKLOAD_NAME, reply


def test_check_does_not_print_the_prometheus_password(write_config, capsys) -> None:
    """Old code: ``"prometheus": "http://admin:s3cr3tpw@127.0.0.1:9/"`` in the check's JSON."""
    rc = main(["check", "--config", str(write_config(prometheus={"url": PROM_URL}))])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "s3cr3tpw" not in out + err
    assert json.loads(out)["prometheus"] == "http://admin:***@127.0.0.1:9/"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_start_log_line_does_not_show_the_prometheus_password(write_config, tmp_path: Path) -> None:
    """Old code: ``prometheus=http://admin:s3cr3tpw@...`` in the ``edge agent started`` line."""
    logger = logging.getLogger("test_s2_agent_limits")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = _Records()
    logger.addHandler(handler)
    agent = Agent(load_config(write_config(prometheus={"url": PROM_URL}), env={}), logger)
    try:
        agent.start()
    finally:
        agent.stop()
        logger.removeHandler(handler)
    started = [r for r in handler.records if r.getMessage() == "edge agent started"]
    assert len(started) == 1
    assert started[0].fields["prometheus"] == "http://admin:***@127.0.0.1:9/"
    shown = " ".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in handler.records)
    assert "s3cr3tpw" not in shown
