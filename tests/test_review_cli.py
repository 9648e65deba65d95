"""Review of the command lines as a hostile user: Ctrl-C, exit statuses, non-regular files.

Real subprocesses throughout. Where a signal must arrive mid-run, the command is made to block on
a FIFO: opening its other end returns only once the command has opened it, so the signal lands
at a known point without any sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.testing import random_problem_doc

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})


def _interrupt_while_it_reads(argv: list[str], fifo: Path, sig: int = signal.SIGINT,
                              writer: bool = True) -> subprocess.CompletedProcess:
    """Start ``argv``, wait until it has opened ``fifo`` (we open the other end), send ``sig``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    fd = os.open(fifo, os.O_WRONLY if writer else os.O_RDONLY)  # blocks until the command opened it
    try:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(fd)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(random_problem_doc(3, nodes=4, pods=5)))
    return path


# --- Ctrl-C ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "check"])
def test_edge_agent_ctrl_c_while_reading_its_settings_exits_130_without_traceback(fifo, command):
    # Was: a KeyboardInterrupt traceback and death by SIGINT (-2); the signal handlers that make
    # `run` stop cleanly are installed only once the agent is built.
    done = _interrupt_while_it_reads([str(BIN / "edge-agent"), command, "--config", str(fifo)], fifo)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert f"edge-agent {command}: interrupted" in done.stderr


def test_iro_ctrl_c_while_reading_the_problem_exits_130(fifo):
    # Already right (main catches KeyboardInterrupt): kept as the reference the others follow.
    done = _interrupt_while_it_reads([str(BIN / "iro"), "solve", str(fifo), "--solver", "best-fit"], fifo)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr


SUPERVISE = """
import sys
from iro_fed.federated.cli import _supervise
child = "import time; fh = open(sys.argv[1], 'w'); time.sleep(600)"
sys.exit(_supervise([sys.executable, "-c", "import sys; " + child, sys.argv[1]], None))
"""


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_fed_supervisor_stop_gives_a_shell_exit_status(fifo, sig, status):
    # `iro fed server` / `iro fed node` run Flower through _supervise. Was: exit status 241 on
    # both (the child's -15 passed to sys.exit); with flower-superlink, which exits 3 on SIGTERM,
    # Ctrl-C gave 3. A stop asked for by SIGTERM that ends cleanly exits 0 (iro_fed/cli.py's
    # stop convention). The child opens the FIFO for writing once it runs: our read end then opens.
    done = _interrupt_while_it_reads([sys.executable, "-c", SUPERVISE, str(fifo)], fifo, sig, writer=False)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr


# --- files that are there but are not files -----------------------------------------------------


def test_cluster_config_fifo_is_named_as_not_a_regular_file(fifo):
    # Was: "no such file" for a path that exists.
    done = _run(str(BIN / "iro"), "extender", "--port", "0", "--host", "127.0.0.1", "--cluster-config", str(fifo))
    assert done.returncode == 2, done.stderr
    assert f"--cluster-config: {str(fifo)!r} is not a regular file" in done.stderr


def test_fed_server_certificate_folder_is_named_as_a_folder(tmp_path):
    # Was: "--ssl-ca-certfile: no such file" for a folder that exists.
    pytest.importorskip("flwr")
    folder = str(tmp_path)
    done = _run(str(BIN / "iro"), "fed", "server", "--ssl-ca-certfile", folder, "--ssl-certfile", folder,
                "--ssl-keyfile", folder, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert f"--ssl-ca-certfile: {folder!r} is a folder" in done.stderr
