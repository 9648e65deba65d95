"""`iro fed` errors name the subcommand (`iro fed node: error:`, was `iro fed:`) and the flag once
(`--site: site: expected ...` and `strategy:` for --strategy were what they said)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")


@pytest.mark.parametrize("argv, prefix, flag", [
    (["node", "--superlink", "h:1", "--site", "-1", "--insecure"],
     "iro fed node: error: --site: expected an index >= 0, got -1", "site"),
    (["local", "--strategy", "nope"], "iro fed local: error: --strategy: unknown 'nope' (known: fedavg,", "strategy"),
    (["local", "--set", "strategy=nope"], "iro fed local: error: --set strategy: unknown 'nope'", "strategy"),
    (["local", "--local-steps", "0"], "iro fed local: error: --local-steps: expected 1..100,000,000, got 0",
     "local-steps"),
    (["rounds", "--requests", "r", "--federation", "p", "--set", "hours=0"],
     "iro fed rounds: error: --set hours: expected a finite number > 0", "hours"),
    (["certs", "--out", "pki", "--days", "0"], "iro fed certs: error: --days: must be between 1 and 3650", "days"),
    (["server"], "iro fed server: error: TLS needs --ssl-ca-certfile", "server"),
])
def test_fed_errors_name_the_subcommand_and_the_flag_once(tmp_path: Path, argv: list[str], prefix: str,
                                                          flag: str) -> None:
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "FLWR_TELEMETRY_ENABLED": "0", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "iro_fed.cli", "fed", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(prefix), proc.stderr
    if flag != "server":
        assert proc.stderr.count(flag) == 1, proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written on bad input
