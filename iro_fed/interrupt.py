"""Ctrl-C during long native calls (a CP-SAT solve, a simulated-annealing call).

Python runs its SIGINT handler only between bytecodes of the main thread, so while the main
thread sits in a native call Ctrl-C waits for the call to return (53 s for one annealing call of
5,000 reads). CP-SAT's own handler (``catch_sigint_signal``, on by default) was worse: it ended
the running solve early and took the signal, so the command went on and exited 0.
:func:`run_interruptibly` runs such a call in a thread of its own while the main thread waits
(the calls release the GIL), so the handler runs at once; on KeyboardInterrupt it asks the call
to stop and raises again, and the command exits 130 as its others do. This module imports
nothing optional: every layer may use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds to wait, after Ctrl-C, for a call that was asked to stop to return (it stops within a
#: read or a CP-SAT step); past them the interrupt is raised anyway and the call ends in its
#: daemon thread.
STOP_WAIT_S = 5.0
#: Seconds between two requests to stop.
STOP_POLL_S = 0.05


def stop_until(stop: Callable[[], Any], done: threading.Event, limit_s: float = STOP_WAIT_S) -> bool:
    """Ask ``stop()`` every :data:`STOP_POLL_S` until ``done`` is set or ``limit_s`` pass (asked
    before CP-SAT's search has begun, its ``stop_search`` does nothing); whether ``done`` was set."""
    give_up = time.monotonic() + limit_s
    while True:
        stop()
        if done.wait(STOP_POLL_S):
            return True
        if time.monotonic() >= give_up:
            return False


def solve_cp_sat(solver: Any, model: Any, callback: Any = None) -> Any:
    """``solver.solve(model, callback)`` (an OR-Tools ``CpSolver``) with Ctrl-C Python's: CP-SAT's
    own SIGINT handler is turned off (it ended only the running search, and the command went on
    to exit 0) and the solve runs through :func:`run_interruptibly`, stopped by ``stop_search``."""
    solver.parameters.catch_sigint_signal = False
    return run_interruptibly(lambda: solver.solve(model, callback), solver.stop_search)


def run_interruptibly(run: Callable[[], T], stop: Callable[[], Any]) -> T:
    """``run()``, with Ctrl-C stopping it: outside the main thread it is simply called (signals
    reach only the main thread); in it, ``run`` goes to a thread of its own, and on
    KeyboardInterrupt (or any exception while waiting) ``stop()`` is asked until the call ends or
    :data:`STOP_WAIT_S` pass (:func:`stop_until`), and the exception raised again. What ``run`` raises is raised here."""
    if threading.current_thread() is not threading.main_thread():
        return run()
    box: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=call, name="native-call", daemon=True)
    try:
        worker.start()  # inside: start() waits for the thread, and Ctrl-C may come then
        done.wait()  # a lock wait: signals interrupt it
    except BaseException:
        # An Event, not Thread.join: a join that Ctrl-C interrupted may mark the thread stopped
        # while it runs (CPython 3.11), and the interpreter then exited under it: a thread still
        # in CP-SAT's C++ at exit aborts the process (std::terminate, status -6, not 130).
        if stop_until(stop, done):
            worker.join(STOP_WAIT_S)
        raise
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
