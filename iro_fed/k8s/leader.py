"""Lease-based leader election (``coordination.k8s.io/v1`` Lease) for the IRO scheduler.

The lock and the acquire-or-renew step are the Python client's own
(``kubernetes.leaderelection``: :class:`LeaseLock`, ``LeaderElection.try_acquire_or_renew``,
which follow client-go: a candidate takes the lease only when its holder has not renewed it for
``lease_duration`` as observed locally, and every write carries the Lease's ``resourceVersion``
so two concurrent takeovers cannot both succeed: the loser gets 409 Conflict).

What this module adds around them, because the scheduler must never bind as a stale leader:

* a stoppable loop with sub-second periods (``LeaderElection.run`` cannot be stopped and its
  ``Config`` exits the process on periods under one second);
* :meth:`LeaderElector.is_leader` is true only until ``renew_deadline`` after the start of the
  last successful renew. A follower takes over no earlier than ``lease_duration`` after it saw
  that renew, and ``lease_duration > renew_deadline``, so the old leader has stopped binding
  before the new one starts (clock rates assumed equal, as in client-go);
* :meth:`LeaderElector.release` on a clean stop empties ``holderIdentity`` so a follower takes
  over at its next retry instead of waiting out the lease (client-go's ``ReleaseOnCancel``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

log = logging.getLogger("iro_fed.k8s.leader")
JITTER_FACTOR = 1.2


class LeaderElector:
    """One candidate. Call :meth:`start` (a thread) and ask :meth:`is_leader` before each write."""

    def __init__(self, kube: Any, name: str, namespace: str, identity: str, lease_duration: int = 15,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started: Callable[[], None] | None = None, on_stopped: Callable[[], None] | None = None) -> None:
        from kubernetes.leaderelection.leaderelection import LeaderElection
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        if not isinstance(lease_duration, int) or lease_duration < 1:
            raise ValueError(f"lease_duration: whole seconds >= 1 (Lease.spec.leaseDurationSeconds), got {lease_duration!r}")
        if not lease_duration > renew_deadline:
            raise ValueError(f"lease_duration ({lease_duration}) must be greater than renew_deadline ({renew_deadline})")
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline ({renew_deadline}) must be greater than {JITTER_FACTOR} x retry_period ({retry_period})")
        if retry_period <= 0:
            raise ValueError(f"retry_period must be > 0, got {retry_period}")
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.lock = LeaseLock(name, namespace, identity)
        self.lock.api_instance = kube.coordination  # the client of this process, not the global default
        # LeaderElection only reads these attributes of its config; its Config class would
        # sys.exit() on sub-second periods, which the tests use.
        config = SimpleNamespace(lock=self.lock, lease_duration=lease_duration, renew_deadline=renew_deadline,
                                 retry_period=retry_period, onstarted_leading=lambda: None, onstopped_leading=lambda: None)
        self._election = LeaderElection(config)
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._leading = False
        self._renewed_at = 0.0  # monotonic start of the last successful acquire/renew
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions = 0
        self._state = threading.Condition()

    def is_leader(self) -> bool:
        """Leading, and the last renew started less than ``renew_deadline`` ago."""
        with self._state:
            return self._leading and time.monotonic() - self._renewed_at < self.renew_deadline

    def wait_leader(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._state:
            while not self.is_leader_locked():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._state.wait(min(left, 0.1))
            return True

    def is_leader_locked(self) -> bool:
        return self._leading and time.monotonic() - self._renewed_at < self.renew_deadline

    def _try(self) -> bool:
        started = time.monotonic()
        try:
            ok = bool(self._election.try_acquire_or_renew())
        except Exception as exc:  # API unreachable, bad answer: counts as a failed renew
            log.warning("%s: lease update failed: %s: %s", self.identity, type(exc).__name__, exc)
            ok = False
        if ok:
            with self._state:
                self._renewed_at = started
                if not self._leading:
                    self._leading = True
                    self.transitions += 1
                    log.info("%s: became leader", self.identity)
                    self._state.notify_all()
                    if self._on_started:
                        self._on_started()
        return ok

    def _lose(self) -> None:
        with self._state:
            was = self._leading
            self._leading = False
            self._state.notify_all()
        if was:
            log.info("%s: lost leadership", self.identity)
            if self._on_stopped:
                self._on_stopped()

    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self._try()
            if not ok and self._leading and time.monotonic() - self._renewed_at >= self.renew_deadline:
                self._lose()
            self._stop.wait(self.retry_period)
        self._lose()

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.identity}", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; with ``release`` give the lease up so a follower need not wait."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if release:
            self.release()

    def release(self) -> bool:
        """Empty the lease's holder if this candidate holds it (optimistic: a 409 means someone else)."""
        from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

        ok, record = self.lock.get(self.lock.name, self.lock.namespace)
        if not ok or record is None or record.holder_identity != self.identity:
            return False
        now = str(time.strftime("%Y-%m-%d %H:%M:%S"))
        empty = LeaderElectionRecord("", "1", now, now)
        return bool(self.lock.update(self.lock.name, self.lock.namespace, empty))
