"""``_supervise`` (``iro fed server`` / ``node``) notes Ctrl-C in a handler, as it does SIGTERM,
instead of letting KeyboardInterrupt unwind through ``Popen.wait``: raised between that wait's
lock acquire and the ``try`` that releases it, it left the lock held and the stop's next
``wait()`` hung for ever (``tests/test_stop_fed.py`` timed out once under load). The first test
delivers a Ctrl-C at that very moment (a lock that raises SIGINT once acquired); the others pin the
behaviour around it: a second Ctrl-C kills without waiting (130, no message), and a Ctrl-C ignored
at start stays ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# argv: STOP_WAIT_S, "ignore" to start with SIGINT ignored. The child says "ready" once its
# SIGTERM handler is in place and "term" for each SIGTERM (and goes on): only SIGKILL ends it.
SUPERVISE = r"""
import signal, sys
from iro_fed.federated import cli
cli.STOP_WAIT_S = float(sys.argv[1])
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
child = ("import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True))\n"
         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "print('ready', flush=True)\n"
         "while True:\n    time.sleep(1)\n")
status = cli._supervise([sys.executable, "-c", child], None, command="fed server")
print("sigint", "ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "default"
      if signal.getsignal(signal.SIGINT) is signal.default_int_handler else "other", file=sys.stderr)
sys.exit(status)
"""


def _supervise(stop_wait_s: float, sigint: str = "default") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISE, str(stop_wait_s), sigint], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=60)
    return proc


# A Ctrl-C delivered as wait()'s lock is taken: Python runs its handler as the acquire call returns,
# before the try that releases the lock. The child exits on SIGTERM, so the stop is clean: 130.
RACE = r"""
import signal, subprocess, sys, threading
from iro_fed.federated import cli
cli.STOP_WAIT_S = 1.0


class SignalOnAcquire:
    def __init__(self):
        self.lock, self.fired = threading.Lock(), False

    def acquire(self, blocking=True, timeout=-1):
        got = self.lock.acquire(blocking, timeout)
        if got and not self.fired:
            self.fired = True
            signal.raise_signal(signal.SIGINT)
        return got

    def release(self):
        self.lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


init = subprocess.Popen.__init__


def popen(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self._waitpid_lock = SignalOnAcquire()


subprocess.Popen.__init__ = popen
sys.exit(cli._supervise([sys.executable, "-c", "import time; time.sleep(60)"], None, command="fed server"))
"""


def test_ctrl_c_as_wait_takes_its_lock_stops_cleanly() -> None:
    # Was: KeyboardInterrupt left the lock held; after STOP_WAIT_S the SIGKILL's wait() blocked for ever.
    proc = subprocess.Popen([sys.executable, "-c", RACE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the supervisor hung after a Ctrl-C taken inside Popen.wait") from None
    assert proc.returncode == 130, err
    assert err == "", err


def test_ctrl_c_twice_kills_without_waiting_and_exits_130() -> None:
    proc = _supervise(600.0)
    assert proc.stdout is not None
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == "term\n"  # passed on as SIGTERM: the stop is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err == "sigint default\n", err  # no message; Python's Ctrl-C handler is back


def test_ctrl_c_then_a_stopping_child_exits_130() -> None:
    proc = _supervise(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # The child ignores SIGTERM: killed after STOP_WAIT_S, which the status says (1), as after SIGTERM.
    assert proc.returncode == 1, err
    assert "did not stop within 1 s and was killed" in err


def test_ctrl_c_ignored_at_start_stays_ignored() -> None:
    proc = _supervise(600.0, "ignore")
    assert proc.stdout is not None
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)  # SIGINT did nothing: this is the first stop, answered by the child
    assert proc.stdout.readline() == "term\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err.endswith("a second signal: Flower's processes were killed\nsigint ignored\n"), err
