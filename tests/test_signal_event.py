"""iro_fed.signal_event: a stop flag a signal handler can set without the deadlock of
threading.Event.set (the handler waiting for the Condition lock its own thread holds), and a wait
that a signal another thread took still ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from iro_fed.signal_event import SignalEvent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _run(code: str) -> subprocess.CompletedProcess:
    # In a child: a hang fails the test by the timeout instead of hanging the suite.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_a_signal_another_thread_takes_ends_the_wait():
    out = _run("""
        import signal, threading, time
        from iro_fed.signal_event import SignalEvent
        ev = SignalEvent()
        signal.signal(signal.SIGUSR1, lambda *_: ev.set())
        def other():
            time.sleep(0.2)  # the main thread is in its wait by then
            # The signal goes to this thread, not the main one: the kernel may pick any thread for
            # a process's signal (it did: an iro extender stopped by SIGTERM never woke up).
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        threading.Thread(target=other, daemon=True).start()
        print(ev.wait())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_handler_sets_it_during_a_blocking_wait_and_the_wait_returns_true():
    out = _run("""
        import os, signal, threading
        from iro_fed.signal_event import SignalEvent
        ev = SignalEvent()
        signal.signal(signal.SIGUSR1, lambda *_: ev.set())
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        print(ev.wait(), ev.is_set())  # no timeout: only the handler's set() ends it
        ev.close()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_a_handler_at_every_bytecode_of_a_wait_loop_never_hangs_it():
    # Signals as fast as they come while the main thread waits in a loop, setting a fresh event
    # each time: every wait must end with its event set.
    out = _run("""
        import os, signal, threading, time
        from iro_fed.signal_event import SignalEvent
        current = [SignalEvent()]
        signal.signal(signal.SIGUSR1, lambda *_: current[0].set())
        done = threading.Event()
        def fire():
            while not done.is_set():
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0)  # lets the main thread run between signals
        threading.Thread(target=fire, daemon=True).start()
        waits = 0
        for _ in range(300):
            assert current[0].wait(30), "a wait ended without its set()"
            current[0].close()
            current[0] = SignalEvent()
            waits += 1
        done.set()
        print(waits)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "300"


def test_a_wait_on_a_descriptor_past_1023_works():
    # select() refuses descriptors past 1023 (ValueError); a daemon holding many connections gets them.
    out = _run("""
        import os, resource, signal, threading
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1200
        if soft < want:
            if hard != resource.RLIM_INFINITY and hard < want:
                print("skip"); raise SystemExit(0)
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        held = [os.dup(0) for _ in range(1100)]
        from iro_fed.signal_event import SignalEvent
        ev = SignalEvent()
        assert ev._reader.fileno() > 1023
        signal.signal(signal.SIGUSR1, lambda *_: ev.set())
        threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1)).start()
        print(ev.wait(30), ev.wait(0.01))
    """)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "skip":
        pytest.skip("RLIMIT_NOFILE's hard limit is below 1200")
    assert out.stdout.split() == ["True", "True"]


def test_set_wait_close_behave_as_an_event_that_stays_set():
    ev = SignalEvent()
    assert not ev.is_set()
    assert ev.wait(0.01) is False  # not set: the timeout ends it
    ev.set()
    ev.set()  # twice is once
    assert ev.is_set()
    assert ev.wait(0) is True and ev.wait(None) is True and ev.wait(10) is True  # stays set, no clear
    ev.close()
    assert ev.is_set() and ev.wait(None) is True  # answers after close


def test_set_after_close_is_noted_without_an_error():
    with SignalEvent() as ev:
        pass
    ev.set()  # a late signal after the command closed it: no OSError
    assert ev.is_set() and ev.wait() is True
    unset = SignalEvent()
    unset.close()
    assert unset.wait(None) is False  # closed and never set: nothing to wait for, not a hang
