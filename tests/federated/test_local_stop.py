"""LocalFederation.stop when interrupted during its grace period (a second Ctrl-C, or `iro fed
local`'s SIGTERM handler, which raises KeyboardInterrupt): the wait ends, every process it
started is still killed, then the interrupt goes on. Plain Python processes stand in for Flower's
(the stop only signals process groups and /proc descendants; no Flower API is involved).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from iro_fed.federated.local import LocalFederation, process_alive

# Ignores SIGTERM (as a process slow to stop does), starts a grandchild in a session of its own
# that ignores it too (as flower-superexec is detached), writes the grandchild's pid, then sleeps.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
    start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(child.pid))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("interrupt", [True, False])
def test_stop_kills_everything_even_when_interrupted(tmp_path: Path, interrupt: bool) -> None:
    fed = LocalFederation(1, workdir=tmp_path / "fed", sites=[0])
    pid_file = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN, str(pid_file)], start_new_session=True)
    fed.procs.append(("stubborn", proc))
    try:
        for _ in range(600):  # up to 30 s on a loaded machine
            if pid_file.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert pid_file.exists(), "the stand-in process did not start its grandchild"
        grandchild = int(pid_file.read_text())
        assert process_alive(grandchild)

        if interrupt:
            # The interrupt arrives 0.3 s into a grace period of 120 s (SIGUSR1 raising
            # KeyboardInterrupt in the main thread, as iro fed local's SIGTERM handler does).
            old = signal.signal(signal.SIGUSR1, _interrupt)
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    fed.stop(grace=120.0)
            finally:
                timer.cancel()
                signal.signal(signal.SIGUSR1, old)
        else:
            fed.stop(grace=0.5)  # both ignore SIGTERM: killed when the grace period ends

        assert proc.poll() is not None, "the process the federation started is still running"
        assert not process_alive(grandchild), "its detached descendant is still running"
        assert fed.procs == []
    finally:
        for pid in [proc.pid] + ([int(pid_file.read_text())] if pid_file.exists() else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
