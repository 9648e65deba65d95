"""A stop flag that a signal handler may set, and a wait for it that a signal always ends.

Two ways a daemon waiting on ``threading.Event`` for SIGTERM never stopped, both seen (py-spy
dumps of ``iro extender`` signalled as soon as its ``--ready-file`` appeared, about 1 run in 200
on a loaded machine):

* ``Event.set`` takes the lock of the Event's Condition, which ``Event.wait`` holds for a few
  bytecodes on the way in and out. Python runs a handler in the main thread between two
  bytecodes, so a handler run there waits forever for a lock its own thread holds.
* The kernel may deliver the signal to any thread. Python's handlers run in the main thread
  only, when it next runs bytecode; a main thread blocked in a lock without timeout (or in
  ``poll`` without one) is not woken by a signal another thread took, and never runs it.

:class:`SignalEvent` takes no lock (``set`` notes the flag and writes one byte to a socket pair)
and waits in ``poll`` on that socket at most :data:`POLL_S` at a time: a handler that runs
during the wait (PEP 475: the interrupted ``poll`` runs it, then goes on) makes the socket
readable at once; a signal another thread took runs within :data:`POLL_S`.
"""

from __future__ import annotations

import select
import socket
import time

#: Longest single wait: how late a signal that another thread took is handled.
POLL_S = 0.25


class SignalEvent:
    """``set``, ``is_set`` and ``wait`` as ``threading.Event``'s (no ``clear``: a stop stays
    asked for), ``set`` safe in a signal handler. Holds two sockets until :meth:`close`."""

    def __init__(self) -> None:
        self._flag = False
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        # poll() where there is one: select() refuses a descriptor past 1023, which a daemon
        # holding many connections can be given.
        self._poll = select.poll() if hasattr(select, "poll") else None
        if self._poll is not None:
            self._poll.register(self._reader, select.POLLIN)

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        try:
            self._writer.send(b"\0")  # never read: the reader stays readable, every later wait returns at once
        except OSError:  # closed, or (never with one byte) full
            pass

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False after ``timeout`` seconds (None: no limit) without, or at once
        when closed and not set."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self._flag and self._reader.fileno() >= 0:
            left = POLL_S if end is None else min(POLL_S, end - time.monotonic())
            if left <= 0:
                break
            # back between polls: the handlers of signals another thread took run
            if self._poll is not None:
                self._poll.poll(left * 1000.0)
            else:
                select.select([self._reader], [], [], left)
        return self._flag

    def close(self) -> None:
        self._reader.close()
        self._writer.close()

    def __enter__(self) -> SignalEvent:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
