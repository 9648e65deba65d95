"""``iro fed server`` / ``node`` / ``rounds`` stopped by a real signal, with real Flower processes.

The stop convention (iro_fed.cli): 0 after SIGTERM once everything it started is gone, 130 after
Ctrl-C, and a Flower process that dies unasked passes its status on. Was: ``iro fed server``
passed on flower-superlink's answer to the SIGTERM it relayed (143, or 3), and ``iro fed rounds``
exited 130 after SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iro_fed.federated.procs import free_port

pytest.importorskip("flwr")
psutil = pytest.importorskip("psutil")

STATUS = {signal.SIGTERM: 0, signal.SIGINT: 130}
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _start(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, Path]:
    """``iro ARGV`` with a private FLWR_HOME, its output in a log file."""
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(tmp_path / "flwr-home"),
           "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "iro.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", *argv], env=env, cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def _wait(proc: subprocess.Popen, log: Path, ready: Callable[[], bool], what: str, deadline_s: float = 180.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        assert proc.poll() is None, f"{what}: exited {proc.returncode} first: {log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s:.0f} s: {log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)


def _stop(proc: subprocess.Popen, sig: int) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=120)


@pytest.fixture
def cleanup() -> list[subprocess.Popen]:
    """Processes to kill (with their own process groups' descendants) should a test fail midway."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()


def _server(tmp_path: Path, cleanup: list[subprocess.Popen]) -> tuple[subprocess.Popen, Path, list]:
    port = free_port()
    proc, log = _start(tmp_path, "fed", "server", "--insecure", "--host", "127.0.0.1", "--port", str(port))
    cleanup.append(proc)
    _wait(proc, log, lambda: _listens(port), "flower-superlink listens")
    children = psutil.Process(proc.pid).children(recursive=True)
    assert any("flower-superlink" in " ".join(c.cmdline()) for c in children), children
    return proc, log, children


@SIGNALS
def test_fed_server_stopped_by_a_signal_exits_by_the_convention_and_leaves_no_process(tmp_path, cleanup, sig):
    proc, log, children = _server(tmp_path, cleanup)
    assert _stop(proc, sig) == STATUS[sig], log.read_text(errors="replace")[-3000:]
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [" ".join(p.cmdline()) for p in alive]
    assert "Traceback" not in log.read_text(errors="replace")


def test_fed_server_whose_superlink_dies_unasked_passes_its_status_on(tmp_path, cleanup):
    # A failure is not a stop: the supervisor (systemd, Kubernetes) must see it (128 + SIGKILL).
    proc, log, children = _server(tmp_path, cleanup)
    (link,) = [c for c in children if c.ppid() == proc.pid]
    link.kill()
    assert proc.wait(timeout=120) == 128 + signal.SIGKILL, log.read_text(errors="replace")[-3000:]
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


def test_fed_node_stopped_by_sigterm_exits_0_with_the_supernode_and_its_executor_gone(tmp_path, cleanup):
    from iro_fed.federated.executor import READY_LINE

    # No SuperLink: the SuperNode keeps trying to connect, which is all this stop needs.
    proc, log = _start(tmp_path, "fed", "node", "--superlink", f"127.0.0.1:{free_port()}", "--site", "0",
                       "--insecure", "--port", str(free_port()))
    cleanup.append(proc)
    _wait(proc, log, lambda: READY_LINE in log.read_text(errors="replace"), "the warm executor is ready")
    children = psutil.Process(proc.pid).children(recursive=True)
    names = " ".join(" ".join(c.cmdline()) for c in children)
    assert "flower-supernode" in names and "iro_fed.federated.executor" in names, names
    assert _stop(proc, signal.SIGTERM) == 0, log.read_text(errors="replace")[-3000:]
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


@SIGNALS
def test_fed_rounds_stopped_while_it_waits_for_requests_exits_by_the_convention(tmp_path, cleanup, sig):
    root = tmp_path / "requests"
    (root / "requests").mkdir(parents=True)
    (root / "requests" / "notes.json").write_text('{"hello": 1}')  # no request: set aside on the first look
    proc, log = _start(tmp_path, "fed", "rounds", "--requests", str(root), "--federation", "local", "--poll-s", "0.2")
    cleanup.append(proc)
    # The first look at the folder comes after the stop handlers are in place.
    _wait(proc, log, lambda: (root / "rounds" / "rejected" / "notes.json").is_file(), "the first look")
    assert _stop(proc, sig) == STATUS[sig], log.read_text(errors="replace")[-3000:]
    assert "stopped; unfinished requests wait in the requests folder" in log.read_text(errors="replace")
