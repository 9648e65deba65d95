"""`iro fed rounds --federation NAME` with a NAME that the operator's FLWR_HOME config.toml does
not define is bad input: exit 2 naming --federation, the file and its connections, before any
request is claimed and without writing a file. It used to claim the waiting requests, run
`flwr run` (which wrote a default config.toml into a FLWR_HOME without one), exit 1 and file them
under rounds/failed; with none waiting, --once exited 0 and the daemon polled forever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

REQUEST = {
    "format": "iro-fed/round-request/1", "requested_at": "2026-12-03T15:23:57Z", "site": "edge-madrid",
    "reason": "utilization moving error 0.0823 > threshold 0.0800", "quantity": "utilization",
    "moving_error": 0.0823, "threshold": 0.08, "samples": 13, "factors_before": {"web": 0.5},
    "factors_after": {"web": 0.8}, "error_after": 0.036,
}
CONFIG = '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'


def rounds(home: Path, requests: Path, federation: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "NO_COLOR": "1"}
    # The timeout only turns a regression (a daemon that polls on) into a failure instead of a hang.
    return subprocess.run([sys.executable, "-m", "iro_fed.cli", "fed", "rounds", "--requests", str(requests),
                           "--federation", federation, *extra],
                          check=False, env=env, capture_output=True, text=True, timeout=120)


def waiting_request(tmp_path: Path) -> tuple[Path, Path]:
    requests = tmp_path / "req"
    (requests / "requests").mkdir(parents=True)
    req = requests / "requests" / "20261203T152357Z-edge-madrid-1-0001-abcd.json"
    req.write_text(json.dumps(REQUEST))
    return requests, req


def flwr_home(tmp_path: Path, text: str = CONFIG) -> Path:
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(text)
    return home


def test_unknown_federation_is_refused_before_any_request_is_claimed(tmp_path: Path) -> None:
    home = flwr_home(tmp_path)
    requests, req = waiting_request(tmp_path)
    proc = rounds(home, requests, "productoin", "--once")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    config = str(home / "config.toml")
    assert proc.stderr.startswith(f"iro fed rounds: error: --federation: no SuperLink connection 'productoin' "
                                  f"in {config!r} (its [superlink.NAME] connections: local)"), proc.stderr
    assert proc.stderr.count("--federation") == 1
    assert req.exists(), "the waiting request must stay in requests/"
    assert not (requests / "rounds").exists()  # nothing claimed, filed or made
    assert (home / "config.toml").read_text() == CONFIG
    assert [p.name for p in home.iterdir()] == ["config.toml"]


@pytest.mark.parametrize("once", [["--once"], []])
def test_unknown_federation_with_no_request_waiting_exits_2(tmp_path: Path, once: list[str]) -> None:
    """Was: exit 0 with --once, and without it a daemon that polled forever, the typo unreported."""
    home = flwr_home(tmp_path)
    requests = tmp_path / "req"
    (requests / "requests").mkdir(parents=True)
    proc = rounds(home, requests, "productoin", "--poll-s", "0.1", *once)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--federation: no SuperLink connection 'productoin'" in proc.stderr
    assert [p.name for p in requests.iterdir()] == ["requests"]


def test_missing_flower_config_is_named_and_not_created(tmp_path: Path) -> None:
    """Without a config.toml flwr knows only its defaults (and writes them there on first use)."""
    home = tmp_path / "no-flwr-home"
    requests, req = waiting_request(tmp_path)
    proc = rounds(home, requests, "production", "--once")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"--federation: no SuperLink connection 'production': {str(home / 'config.toml')!r} does not exist"
            in proc.stderr), proc.stderr
    assert "defaults: local, supergrid" in proc.stderr
    assert not home.exists()  # was: FLWR_HOME/config.toml written by `flwr run`
    assert req.exists() and not (requests / "rounds").exists()


@pytest.mark.parametrize("text, message", [
    ("[superlink\n", "is not valid TOML"),
    ('[superlink.production]\naddress = 8000\n', "Invalid value for key 'address' in connection 'production'"),
])
def test_unusable_flower_config_is_refused_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    home = flwr_home(tmp_path, text)
    requests, req = waiting_request(tmp_path)
    proc = rounds(home, requests, "production", "--once")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--federation: " in proc.stderr and str(home / "config.toml") in proc.stderr and message in proc.stderr
    assert req.exists() and not (requests / "rounds").exists()
    assert (home / "config.toml").read_text() == text


def test_a_requests_folder_that_does_not_exist_is_made_and_said(tmp_path: Path) -> None:
    """The writers' spool folder may not exist yet when the consumer starts (kept: it is made), but
    a mistyped path would otherwise be watched in silence."""
    home = flwr_home(tmp_path)
    requests = tmp_path / "not-yet" / "policies"
    proc = rounds(home, requests, "local", "--once")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"note: --requests: {str(requests)!r} did not exist, made it" in proc.stderr, proc.stderr
    assert (requests / "requests").is_dir()
    again = rounds(home, requests, "local", "--once")  # an existing folder: no note
    assert again.returncode == 0 and "note:" not in again.stderr, again.stderr


def test_connection_names_as_flwr_run_resolves_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from iro_fed.federated.local import FederationError, check_superlink_connection

    home = flwr_home(tmp_path)
    monkeypatch.setenv("FLWR_HOME", str(home))
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text('[tool.flwr.federations]\ndefault = "lab"\n\n'
                                        '[tool.flwr.federations.lab]\naddress = "10.0.0.5:9093"\ninsecure = true\n')
    assert check_superlink_connection(app, "local") == home / "config.toml"
    # `flwr run` first migrates a legacy app's federations into config.toml
    assert check_superlink_connection(app, "lab") == home / "config.toml"
    # `[superlink] default = ...` is a key, not a connection (flwr fails on it)
    with pytest.raises(FederationError, match="no SuperLink connection 'default'"):
        check_superlink_connection(app, "default")
    assert (home / "config.toml").read_text() == CONFIG
