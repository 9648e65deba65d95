"""`iro fed rounds` checks --federation at start and again before each run: a connection that
the operator's FLWR_HOME config.toml no longer names (edited or removed while the daemon ran)
is bad input, exit 2 naming --federation and the file, the claimed requests put back to wait.

Before: `flwr run` failed on it, the requests were filed under rounds/failed with Flower's boxed
error text, and the daemon went on doing the same to every later request (with no config.toml
left, `flwr run` wrote a default one into FLWR_HOME)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

ROOT = Path(__file__).resolve().parents[2]
REQUEST = {
    "format": "iro-fed/round-request/1", "requested_at": "2026-12-03T15:23:57Z", "site": "edge-madrid",
    "reason": "utilization moving error 0.0823 > threshold 0.0800", "quantity": "utilization",
    "moving_error": 0.0823, "threshold": 0.08, "samples": 13, "factors_before": {"web": 0.5},
    "factors_after": {"web": 0.8}, "error_after": 0.036,
}
NAME = "20261203T152357Z-edge-madrid-1-0001-abcd.json"
PRODUCTION = '[superlink]\ndefault = "production"\n\n[superlink.production]\naddress = "127.0.0.1:9"\ninsecure = true\n'
LAB_ONLY = '[superlink]\ndefault = "lab"\n\n[superlink.lab]\naddress = "127.0.0.1:9"\ninsecure = true\n'


def _edit_then_request(tmp_path: Path, edit) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Start the daemon on a config.toml naming `production`, wait until it passed its start-up
    checks (it holds the folder's consumer lock), ``edit(config)``, then write a request."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    config = home / "config.toml"
    config.write_text(PRODUCTION)
    requests = tmp_path / "req"
    (requests / "requests").mkdir(parents=True)
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "NO_COLOR": "1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "fed", "rounds", "--requests", str(requests),
                             "--federation", "production", "--poll-s", "0.1", "--timeout", "60"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = requests / "rounds" / "consumer.lock"
        deadline = time.monotonic() + 120
        while not lock.exists():  # taken once --federation was found good
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        edit(config)
        tmp = requests / "requests" / f".{NAME}.tmp"
        tmp.write_text(json.dumps(REQUEST))
        tmp.rename(requests / "requests" / NAME)  # as the writers do: whole or not at all
        # The timeout only turns a regression (a daemon that goes on) into a failure, not a hang.
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), requests, config


def test_a_connection_removed_while_it_runs_stops_it_with_the_request_kept(tmp_path: Path) -> None:
    proc, requests, config = _edit_then_request(tmp_path, lambda c: c.write_text(LAB_ONLY))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(
        "iro fed rounds: error: --federation: the Flower configuration changed since this consumer started: "
        f"no SuperLink connection 'production' in {str(config)!r} (its [superlink.NAME] connections: lab); "
        f"1 request(s) put back to wait in {str(requests / 'requests')!r}"), proc.stderr
    assert json.loads((requests / "requests" / NAME).read_text()) == REQUEST  # kept as it was
    for state in ("running", "failed", "done"):
        assert list((requests / "rounds" / state).iterdir()) == [], state  # nothing filed, nothing left claimed
    assert config.read_text() == LAB_ONLY


def test_a_config_file_removed_while_it_runs_is_named_and_not_recreated(tmp_path: Path) -> None:
    proc, requests, config = _edit_then_request(tmp_path, lambda c: c.unlink())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"--federation: the Flower configuration changed since this consumer started: no SuperLink connection "
            f"'production': {str(config)!r} does not exist" in proc.stderr), proc.stderr
    assert (requests / "requests" / NAME).is_file()
    assert list((requests / "rounds" / "failed").iterdir()) == []
    assert not config.exists()  # was: written by `flwr run` with Flower's defaults
