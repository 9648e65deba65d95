"""``edge-agent run`` stopped by a real signal: by the project's stop convention (iro_fed.cli) it
stops cleanly either way (the experience store flushed) and exits 0 after SIGTERM, 130 after
Ctrl-C (was 0 for both)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_agent.store import integrity_check

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130), (signal.SIGHUP, 0)],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])  # SIGHUP: no reload, so it stops like SIGTERM
def test_edge_agent_stopped_by_a_signal_exits_by_the_convention(tmp_path, sig, status):
    db = tmp_path / "exp.db"
    proc = subprocess.Popen([sys.executable, "-m", "edge_agent", "run", "--config", str(REPO / "examples" / "agent.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "IRO_AGENT_PORT": "0", "IRO_AGENT_STORE_PATH": str(db)})
    try:
        deadline = time.monotonic() + 120
        said = []
        while not any('"edge agent started"' in line for line in said):
            line = proc.stderr.readline()  # one JSON log line each; the handlers are in place before this one
            assert line and time.monotonic() < deadline, "".join(said)[-3000:]
            said.append(line)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, err[-3000:]
    messages = [json.loads(line)["msg"] for line in err.splitlines() if line.startswith("{")]
    assert messages[-2:] == ["edge agent stopping", "edge agent stopped"], err[-3000:]
    assert integrity_check(db) == "ok"
