"""SRE audit of the edge agent: the listen backlog, a failing experience store is seen (log,
/readyz, dependency_up) and so are records lost at the stop, SIGHUP stops like SIGTERM, a policy
registry without ``latest`` is polled at its interval, clearer field messages, and a run whose
port is taken leaves no store file behind."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from edge_agent.agent import Agent, _Server
from edge_agent.config import load_config
from edge_agent.store import ExperienceStore
from iro_fed.k8s.extender import ExtenderServer
from iro_fed.k8s.httpjson import ConnectionLimit
from iro_fed.k8s.webhook import WebhookServer
from tests.edge_agent.test_robust_outcome import WEB
from tests.edge_agent.test_store_retry import record, wait_until, write_lock

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def captured(logger: logging.Logger, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append  # type: ignore[method-assign]
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(level, old) if old else level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def messages(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


# --- 1. listen backlog ---------------------------------------------------------------------------


@pytest.mark.parametrize("server", [_Server, ExtenderServer, WebhookServer], ids=lambda c: c.__name__)
def test_every_server_listens_with_a_backlog_for_a_burst_of_clients(server) -> None:
    assert server.request_queue_size >= 128  # socketserver's default is 5


def test_64_connections_wait_in_the_backlog_before_any_is_accepted() -> None:
    """Nothing accepts: every connection must queue in the listen backlog. With the old backlog (5)
    the 7th connect got no SYN-ACK (the kernel drops the SYN while the accept queue is full)."""

    class Server(ConnectionLimit, ThreadingHTTPServer):
        pass

    server = Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    clients: list[socket.socket] = []
    try:
        for i in range(64):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            clients.append(sock)
            sock.settimeout(5.0)  # a loopback connect into a backlog with room completes at once
            try:
                sock.connect(server.server_address)
            except OSError as exc:
                pytest.fail(f"connection {i + 1} of 64 refused by the listen backlog: {exc!r}")
    finally:
        for sock in clients:
            sock.close()
        server.server_close()


# --- 2. a failing store is seen --------------------------------------------------------------------


def test_the_store_logs_when_its_file_starts_failing_drops_records_and_recovers(tmp_path) -> None:
    path = tmp_path / "exp.db"
    log = logging.getLogger("test_j16.store")
    store = ExperienceStore(path, busy_timeout_s=0.0, max_pending=2, logger=log)
    with captured(log) as records:
        with write_lock(path):
            for i in range(5):
                record(store, i)
            wait_until(lambda: store.failed == 3, "3 records dropped for max_pending")
            warnings = messages(records, logging.WARNING)
            assert sum("file failing" in m for m in warnings) == 1, warnings  # once per outage, not per retry
            assert sum("records dropped" in m for m in warnings) == 1, warnings
        assert store.flush(timeout=60)
    store.close()
    infos = [r for r in records if r.levelno == logging.INFO and "works again" in r.getMessage()]
    assert len(infos) == 1 and infos[0].fields["dropped"] == 3


def _store_up(agent: Agent) -> float:
    return agent.metrics.dependency_up.labels("store")._value.get()


def test_a_failing_store_shows_in_readyz_and_dependency_up(start_agent, http, tmp_path) -> None:
    agent, url = start_agent(store={"busy_timeout_s": 0.0})
    pod = WEB
    assert http("POST", f"{url}/recommend", pod)[0] == 200
    assert agent.store.flush(timeout=60)
    with write_lock(tmp_path / "exp.db"):
        assert http("POST", f"{url}/recommend", pod)[0] == 200
        wait_until(lambda: agent.store.pending == 1, "the decision waits for the file")
        # the record is pending before its write has failed: readyz says so once it has
        wait_until(lambda: http("GET", f"{url}/readyz")[1]["status"] == "degraded", "readyz degraded")
        status, doc = http("GET", f"{url}/readyz")
        assert status == 200 and doc["status"] == "degraded", doc  # still answering: ready
        assert any(d.startswith("experience store failing: 1 pending (") for d in doc["degraded"]), doc
        wait_until(lambda: _store_up(agent) == 0, "dependency_up{dependency=store} 0")
    assert agent.store.flush(timeout=60)
    wait_until(lambda: _store_up(agent) == 1, "dependency_up{dependency=store} back to 1")
    assert 'iro_agent_dependency_up{dependency="store"} 1.0' in http("GET", f"{url}/metrics")[1]
    assert not any("experience store" in d for d in http("GET", f"{url}/readyz")[1]["degraded"])


# --- 3. records lost at the stop -------------------------------------------------------------------


def test_decisions_pending_at_the_stop_are_a_warning_with_their_count(start_agent, http, tmp_path) -> None:
    agent, url = start_agent(store={"busy_timeout_s": 0.0})
    pod = WEB
    with captured(agent.log, logging.WARNING) as records, write_lock(tmp_path / "exp.db"):
        for _ in range(2):
            assert http("POST", f"{url}/recommend", pod)[0] == 200
        wait_until(lambda: agent.store.pending == 2, "the decisions wait for the file")
        agent.stop()
    lost = [r for r in records if "were not written" in r.getMessage()]
    assert len(lost) == 1 and lost[0].fields["lost"] == 2 and lost[0].fields["lost_outcomes"] == 0


# --- 4. SIGHUP ---------------------------------------------------------------------------------------


# SIGHUP stops like SIGTERM: tests/test_stop_edge_agent.py (was -1, killed by it, nothing logged).


# --- 5. a registry without latest ------------------------------------------------------------------


def test_a_registry_without_latest_is_a_normal_poll_said_once(write_config, tmp_path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    cfg = load_config(write_config(policy={"registry": str(registry), "poll_interval_s": 60}), env={})
    agent = Agent(cfg)
    with captured(agent.log) as records:
        for _ in range(3):
            agent._policy_step()  # no PolicyLoadError: the loop keeps policy.poll_interval_s, no backoff
    said = [(r.levelno, r.getMessage()) for r in records]
    assert len(said) == 1 and said[0][0] == logging.INFO and "no 'latest' yet" in said[0][1], said
    ready, doc = agent.readiness()
    assert any("no 'latest' pointer yet" in d for d in doc["degraded"]), doc
    (registry / "latest").write_text("v0001")  # names a version that is not there: a real error
    with pytest.raises(Exception, match="metadata.json"):
        agent._policy_step()
    agent.store.close()


def test_a_missing_registry_folder_is_still_a_failure(write_config, tmp_path) -> None:
    cfg = load_config(write_config(policy={"registry": str(tmp_path / "nowhere")}), env={})
    agent = Agent(cfg)
    with pytest.raises(Exception, match="does not exist"):
        agent._policy_step()
    agent.store.close()


# --- 6. messages, a failed bind --------------------------------------------------------------------


@pytest.mark.parametrize(("did", "got"), [(5, "got integer"), ("", "got an empty string"), ([], "got list")])
def test_a_decision_id_of_the_wrong_type_says_what_it_got(start_agent, http, did, got) -> None:
    _, url = start_agent()
    status, doc = http("POST", f"{url}/outcome", {"decision_id": did, "node": "e2", "observed": {}})
    assert status == 400 and doc["field"] == "decision_id", doc
    assert "expected a non-empty string" in doc["error"] and doc["error"].endswith(got), doc


def test_a_missing_decision_id_is_required(start_agent, http) -> None:
    _, url = start_agent()
    status, doc = http("POST", f"{url}/outcome", {"node": "e2", "observed": {}})
    assert status == 400 and doc["field"] == "decision_id" and "required" in doc["error"], doc


@pytest.mark.parametrize(("k", "got"), [(True, "got true"), (None, "got null"), ("3", 'got "3"')])
def test_a_bad_k_is_quoted_as_json(start_agent, http, k, got) -> None:
    _, url = start_agent()
    status, doc = http("POST", f"{url}/recommend", {**WEB, "k": k})
    assert status == 400 and doc["field"] == "k" and doc["error"].endswith(got), doc


def test_run_with_the_port_taken_leaves_no_store_file_and_no_stop_lines(write_config, tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(listen={"port": port, "host": "127.0.0.1"}, log_level="info")
        done = subprocess.run([sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "listen.port: cannot listen on" in done.stderr
    assert '"edge agent stopp' not in done.stderr, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.yaml", "site.json"]  # no exp.db


def test_run_with_the_port_taken_keeps_an_existing_store_file(write_config, tmp_path) -> None:
    ExperienceStore(tmp_path / "exp.db").close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        config = write_config(listen={"port": taken.getsockname()[1], "host": "127.0.0.1"})
        done = subprocess.run([sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert (tmp_path / "exp.db").exists()
