"""StopSignal: a wait reads the pipe's fd under the lock, and close() leaves the pipe open while a
wait polls it (a closed fd's number is reused by the next open: the wait would poll that)."""

from __future__ import annotations

import os
import select
import socket
import threading
import types

import pytest

from iro_fed.k8s import httpjson
from iro_fed.k8s.httpjson import StopSignal


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _GatedPoll:
    """select.poll whose poll() first says it started, then waits for ``release``."""

    def __init__(self, started: threading.Event, release: threading.Event, fds: list[int]) -> None:
        self._poller = select.poll()
        self._started, self._release, self._fds = started, release, fds

    def register(self, fd, mask) -> None:
        self._fds.append(fd if isinstance(fd, int) else fd.fileno())
        self._poller.register(fd, mask)

    def poll(self, timeout):
        self._started.set()
        assert self._release.wait(30)
        return self._poller.poll(timeout)


def test_close_keeps_the_pipe_open_while_a_wait_polls_it(monkeypatch) -> None:
    """Old code: close() closed both fds while the wait was in poll (its number free for reuse)."""
    started, release, fds = threading.Event(), threading.Event(), []
    fake = types.SimpleNamespace(poll=lambda: _GatedPoll(started, release, fds), POLLIN=select.POLLIN)
    monkeypatch.setattr(httpjson, "select", fake)
    signal = StopSignal()
    read_fd, write_fd = signal._read, signal._write
    a, b = socket.socketpair()
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(signal.wait_readable(a, 30)))
    try:
        waiter.start()
        assert started.wait(30)
        signal.close()  # as server_close() does, the wait still in its poll
        assert _is_open(read_fd) and _is_open(write_fd)
        assert signal._read == read_fd  # not yet closed: the wait uses it
        release.set()
        waiter.join(30)
        assert result == [False]  # stopping: nothing to read, the signal set
        assert fds[:2] == [a.fileno(), read_fd]  # then the socket alone (_readable_now)
        assert signal._read == signal._write == -1  # the last wait closed the pipe
    finally:
        release.set()
        waiter.join(30)
        a.close()
        b.close()


def test_a_wait_after_close_polls_no_pipe(monkeypatch) -> None:
    signal = StopSignal()
    signal.close()
    assert signal._read == signal._write == -1
    registered: list[int] = []
    real_poll = select.poll

    class Recording:
        def __init__(self) -> None:
            self._p = real_poll()

        def register(self, fd, mask) -> None:
            registered.append(fd if isinstance(fd, int) else fd.fileno())
            self._p.register(fd, mask)

        def poll(self, timeout):
            return self._p.poll(timeout)

    monkeypatch.setattr(httpjson, "select", types.SimpleNamespace(poll=Recording, POLLIN=select.POLLIN))
    a, b = socket.socketpair()
    try:
        assert signal.wait_readable(a, 30) is False  # stopping, at once
        assert registered == [a.fileno()]
        b.sendall(b"x")
        assert signal.wait_readable(a, 30) is True  # a request already there is still read
    finally:
        a.close()
        b.close()
    signal.close()  # twice: no error


def test_a_wait_times_out_and_leaves_the_pipe_to_close() -> None:
    signal = StopSignal()
    a, b = socket.socketpair()
    try:
        with pytest.raises(TimeoutError):
            signal.wait_readable(a, 0)
        read_fd = signal._read
        assert _is_open(read_fd)  # no wait holds it: close() closes it at once
        signal.close()
        assert signal._read == -1
    finally:
        a.close()
        b.close()
