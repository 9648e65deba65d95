"""`iro fed server` / `iro fed node` name the subcommand in their stop messages, as their errors
do (`iro fed server: error: ...`): they said `iro fed:`. Driven through the supervisor both
commands run Flower with (`_supervise`), its child a real process that ignores SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# argv: command, STOP_WAIT_S. The child says "ready" once its SIGTERM handler is in place and
# "term" for each SIGTERM it gets (and goes on): only a SIGKILL ends it.
SUPERVISE = r"""
import sys
from iro_fed.federated import cli
cli.STOP_WAIT_S = float(sys.argv[2])
child = ("import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True))\n"
         "print('ready', flush=True)\n"
         "while True:\n    time.sleep(1)\n")
sys.exit(cli._supervise([sys.executable, "-c", child], None, command=sys.argv[1]))
"""


def _supervise(command: str, stop_wait_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISE, command, str(stop_wait_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=60)
    return proc


def test_a_second_signal_names_the_subcommand() -> None:
    proc = _supervise("fed server", 600.0)
    assert proc.stdout is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline() == "term\n"  # passed on: the stop is under way
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err == "iro fed server: a second signal: Flower's processes were killed\n"  # was "iro fed: ..."


def test_a_child_that_does_not_stop_is_named_with_the_subcommand() -> None:
    proc = _supervise("fed node", 1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert re.fullmatch(r"iro fed node: python[0-9.]* did not stop within 1 s and was killed\n", err), err
