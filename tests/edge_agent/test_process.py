"""The agent as a real process: start, serve, SIGTERM -> exit 0 with the store flushed; bad settings exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from edge_agent.store import integrity_check, read_transitions

REPO = Path(__file__).resolve().parents[2]


def start(config: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "edge_agent", "run", "--config", str(config), *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        doc = json.loads(line)  # every log line is JSON
        if doc["msg"] == "edge agent started":
            return proc, doc["port"]
    proc.kill()
    raise AssertionError(f"agent did not start: {proc.stderr.read()}")


def test_serve_and_sigterm(write_config, http, tmp_path):
    config = write_config(log_level="info")
    proc, port = start(config, "--port", "0")
    try:
        url = f"http://127.0.0.1:{port}"
        assert http("GET", f"{url}/healthz")[0] == 200
        assert http("GET", f"{url}/healthz")[1]["status"] == "ok"
        assert http("GET", f"{url}/readyz")[1]["ready"] is True
        status, reply = http("POST", f"{url}/recommend", {"name": "w", "requests": {"cpu": 100}})
        assert status == 200 and reply["nodes"]
        assert "iro_agent_decisions_total" in http("GET", f"{url}/metrics")[1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()]
    assert [d["msg"] for d in lines if d["msg"].startswith("edge agent")][-2:] == ["edge agent stopping", "edge agent stopped"]
    db = tmp_path / "exp.db"
    assert integrity_check(db) == "ok"
    assert [r["decision_id"] for r in read_transitions(db)] == [reply["decision_id"]]
    assert not Path(str(db) + "-wal").exists() or Path(str(db) + "-wal").stat().st_size == 0  # checkpointed


def test_example_config_serves_the_four_endpoints(http, tmp_path):
    """`edge-agent run --config examples/agent.yaml` (port from the environment), then SIGINT."""
    proc, port = start(REPO / "examples" / "agent.yaml",
                       env={"IRO_AGENT_PORT": "0", "IRO_AGENT_STORE_PATH": str(tmp_path / "exp.db")})
    try:
        url = f"http://127.0.0.1:{port}"
        assert http("GET", f"{url}/healthz")[0] == 200
        status, ready = http("GET", f"{url}/readyz")
        assert status == 200 and ready["site"] == "edge-munich" and ready["nodes"] == 3
        assert ready["store"]["pending"] == 0 and ready["store"]["failed"] == 0
        status, reply = http("POST", f"{url}/recommend", {"name": "cam", "requests": {"cpu": 250, "memory": 256},
                                                         "user_region": "iot-munich", "max_latency_ms": 4})
        assert status == 200 and reply["nodes"] and all(e["domain"] == "edge-munich" for e in reply["nodes"])
        status, metrics = http("GET", f"{url}/metrics")
        assert status == 200 and 'iro_agent_decisions_total{outcome="ranked",source="solver"} 1.0' in metrics
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130  # Ctrl-C: 130 by shell convention (SIGTERM: 0)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_bad_settings_exit_2_naming_the_key(write_config):
    config = write_config(listen={"port": "http"})
    done = subprocess.run([sys.executable, "-m", "edge_agent", "run", "--config", str(config)], capture_output=True,
                          text=True, cwd=REPO, timeout=60, env={**os.environ, "IRO_AGENT_K": "many"})
    assert done.returncode == 2
    assert "listen.port: expected an integer" in done.stderr
    assert "recommend.k (from IRO_AGENT_K): expected an integer, got 'many'" in done.stderr
