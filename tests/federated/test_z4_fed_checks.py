"""``iro fed local`` / ``iro fed server`` refuse what could never work before anything starts.

Was: ``iro fed local --nodes 2 --set min-nodes=3`` waited for its ``--timeout`` (no round can
start below min-nodes) and exited 1; ``--strategy krum --nodes 3`` named ``min-nodes``, which the
user never set; ``iro fed server --host`` an address not of this machine (or ``--port`` in use)
started flower-superlink, which failed inside its log (exit 1); ``--database`` in a missing
folder made that folder even with ``--dry-run`` or when another argument was bad.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated.procs import free_port  # noqa: E402

#: RFC 5737 TEST-NET-1: never an address of a machine on a real network.
FOREIGN_HOST = "192.0.2.1"


def _iro(tmp_path: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(tmp_path / "flwr-home")}
    return subprocess.run([sys.executable, "-m", "iro_fed.cli", *argv], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def foreign_host() -> str:
    try:
        with socket.socket() as sock:
            sock.bind((FOREIGN_HOST, 0))
    except OSError:
        return FOREIGN_HOST
    pytest.skip(f"{FOREIGN_HOST} is an address of this machine")


def test_fed_local_min_nodes_above_nodes_exits_2_before_starting_flower(tmp_path) -> None:
    # The command of the report: before, it started 2 SuperNodes and waited the whole --timeout.
    done = _iro(tmp_path, "fed", "local", "--nodes", "2", "--set", "min-nodes=3", "--timeout", "45",
                "--registry", str(tmp_path / "reg"), "--workdir", str(tmp_path / "work"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert ("iro fed local: error: --set min-nodes: 3 sites must join before a round starts, but --nodes starts 2"
            in done.stderr)
    assert not (tmp_path / "reg").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "3", "--set", "min-nodes=4"], "--set min-nodes: 4 sites must join before a round starts, but "
                                               "--nodes starts 3"),
    (["--nodes", "3", "--strategy", "krum", "--set", "min-nodes=5"], "--set min-nodes: 5 sites must join"),
    # min-nodes follows --nodes here: the remedy is more --nodes, not a setting never given
    (["--nodes", "3", "--strategy", "krum"], "--nodes: krum with num-malicious 1 needs at least 5 sites per round "
                                             "(2 x num-malicious + 3), got 3; add sites"),
    (["--nodes", "6", "--strategy", "bulyan"], "--nodes: bulyan with num-malicious 1 needs at least 7 sites"),
    (["--nodes", "6", "--strategy", "krum", "--set", "num-malicious=2"], "--nodes: krum with num-malicious 2 needs "
                                                                        "at least 7 sites"),
    (["--nodes", "4", "--strategy", "krum", "--set", "min-nodes=4"], "--set min-nodes: krum with num-malicious 1 "
                                                                     "needs at least 5 sites"),
])
def test_fed_local_settings_no_round_could_run_with_exit_2(tmp_path, capsys, argv, message) -> None:
    reg = tmp_path / "reg"
    assert main(["fed", "local", *argv, "--registry", str(reg), "--timeout", "30"]) == 2
    assert f"iro fed local: error: {message}" in capsys.readouterr().err
    assert not reg.exists()


def test_fed_server_host_not_of_this_machine_exits_2(tmp_path, foreign_host) -> None:
    db = tmp_path / "state" / "db.sqlite"
    for extra in ([], ["--dry-run"]):
        done = _iro(tmp_path, "fed", "server", "--host", foreign_host, "--port", str(free_port()), "--insecure",
                    "--database", str(db), *extra)
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr.startswith(f"iro fed server: error: --host: cannot listen on '{foreign_host}'"), done.stderr
        assert not db.parent.exists()  # nothing made when an argument is bad
        assert done.stdout == ""


def test_fed_server_port_in_use_exits_2_and_a_dry_run_still_prints(tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _iro(tmp_path, "fed", "server", "--host", "127.0.0.1", "--port", str(port), "--insecure")
        assert done.returncode == 2, done.stderr[-3000:]
        assert f"iro fed server: error: --port: cannot listen on 127.0.0.1:{port}: " in done.stderr
        # a dry run prints a command for later, when the SuperLink holding the port may be gone
        done = _iro(tmp_path, "fed", "server", "--host", "127.0.0.1", "--port", str(port), "--insecure", "--dry-run")
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"--host 127.0.0.1 --port {port} " in done.stdout


def test_fed_server_dry_run_makes_no_database_folder(tmp_path, capsys) -> None:
    db = tmp_path / "nonexist10" / "sub" / "db.sqlite"
    assert main(["fed", "server", "--database", str(db), "--insecure", "--dry-run"]) == 0
    assert f"--database {db}" in capsys.readouterr().out
    assert not (tmp_path / "nonexist10").exists()
    # what a real start would fail on is still refused
    (tmp_path / "file").write_text("x")
    assert main(["fed", "server", "--database", str(tmp_path / "file" / "db.sqlite"), "--insecure", "--dry-run"]) == 2
    assert (f"--database: cannot make folder '{tmp_path / 'file'}': '{tmp_path / 'file'}' is a file"
            in capsys.readouterr().err)
    assert main(["fed", "server", "--database", str(tmp_path), "--insecure", "--dry-run"]) == 2
    assert f"--database: {str(tmp_path)!r} is a folder; give a file name" in capsys.readouterr().err


def test_fed_server_real_start_makes_the_database_folder(tmp_path) -> None:
    psutil = pytest.importorskip("psutil")
    port = free_port()
    db = tmp_path / "state" / "db.sqlite"
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(tmp_path / "flwr-home")}
    log = tmp_path / "iro.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "fed", "server", "--host", "127.0.0.1", "--port",
                                 str(port), "--insecure", "--database", str(db)], env=env, cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline, listens = time.monotonic() + 180, False
        while not listens and proc.poll() is None and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    listens = True
            except OSError:
                time.sleep(0.1)
        assert listens and proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert db.parent.is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
