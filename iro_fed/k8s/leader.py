"""Lease-based leader election (``coordination.k8s.io/v1`` Lease) for the IRO scheduler.

The lock is the Python client's own (``kubernetes.leaderelection``: :class:`LeaseLock`), and so
is the acquire-or-renew step (``LeaderElection.try_acquire_or_renew``) but for its clock: both
follow client-go: a candidate takes the lease only when its holder has not renewed it for the
``leaseDurationSeconds`` written in the Lease (the holder's setting, not the candidate's), as
observed locally (on the monotonic clock, as Go's ``time.Since``: a wall-clock step on a
follower must not end a lease early), and every write carries the Lease's
``resourceVersion`` so two concurrent takeovers cannot both succeed: the loser gets 409 Conflict).

What this module adds around them, because the scheduler must never bind as a stale leader:

* a stoppable loop with sub-second periods (``LeaderElection.run`` cannot be stopped and its
  ``Config`` exits the process on periods under one second);
* :meth:`LeaderElector.is_leader` is true only until ``renew_deadline`` after the start of the
  last successful renew. A follower takes over no earlier than the holder's ``lease_duration``
  (the Lease's ``leaseDurationSeconds``) after it saw that renew, and ``lease_duration >
  renew_deadline``, so the old leader has stopped binding before the new one starts (clock
  rates assumed equal, as in client-go);
* :meth:`LeaderElector.release` on a clean stop empties ``holderIdentity`` so a follower takes
  over at its next retry instead of waiting out the lease (client-go's ``ReleaseOnCancel``);
* leadership ends as soon as a read of the Lease shows another holder (client-go's ``IsLeader``
  compares the observed holder), not only ``renew_deadline`` after the last renew;
* the Lease is written as client-go writes it: ``acquireTime`` / ``renewTime`` are ``MicroTime``
  (RFC 3339 with exactly six fractional digits, which the API server requires: the Python
  client's ``isoformat()`` drops them for a whole second, as the release's times always were),
  and ``leaseTransitions`` starts at 0 and counts every change of holder;
* every Lease call (get, create, replace; the release's too) waits at most half the
  ``renew_deadline`` for its answer and is not retried by urllib3 (its retries would multiply the
  wait), on a client of its own, as kube-scheduler gives leader election its own client with
  the renew deadline as its timeout: a hung API server or a dropped connection fails the renew
  in time, so the elector gives leadership up (``on_stopped``) and campaigns again, instead of
  waiting for ever in a call while still counted as leader.
"""

from __future__ import annotations

import copy
import datetime
import functools
import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

log = logging.getLogger("iro_fed.k8s.leader")
JITTER_FACTOR = 1.2


class MicroTime(datetime.datetime):
    """A datetime that the Python client writes as ``metav1.MicroTime`` (RFC 3339, exactly six
    fractional digits, ``Z``: the API server parses ``2006-01-02T15:04:05.000000Z07:00`` and
    refuses a time without the fraction, which ``datetime.isoformat()`` drops on a whole second)."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # naive: local time, as astimezone reads it

    @classmethod
    def of(cls, value: datetime.datetime) -> MicroTime:
        return cls(value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond,
                   value.tzinfo)


def _lease_lock(name: str, namespace: str, identity: str) -> Any:
    """The Python client's ``LeaseLock`` writing MicroTimes and ``leaseTransitions`` as client-go does."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class Lock(LeaseLock):
        def time_str_to_iso(self, str_time: str) -> Any:
            return MicroTime.of(super().time_str_to_iso(str_time))

        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            spec = self.get_lease_spec(election_record)
            spec.lease_transitions = 0
            try:
                self.lease_reference = self.api_instance.create_namespaced_lease(
                    namespace, client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec))
                return True
            except ApiException as exc:  # 409 AlreadyExists: another candidate created it first
                log.info("failed to create lease %s/%s: %s", namespace, name, exc.reason)
                return False

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            if self.lease_reference is None:
                return False
            old = self.lease_reference.spec
            old_holder = (old.holder_identity or "") if old is not None else ""
            transitions = (old.lease_transitions or 0) if old is not None else 0
            new_holder = updated_record.holder_identity or ""
            if new_holder and new_holder != old_holder:  # a takeover adds one; a renew or a release keeps it
                transitions += 1
            self.lease_reference.spec = self.get_lease_spec(updated_record, old)
            self.lease_reference.spec.lease_transitions = transitions
            try:
                self.api_instance.replace_namespaced_lease(name=name, namespace=namespace, body=self.lease_reference)
                return True
            except ApiException as exc:  # 409: written by someone since our read (resourceVersion)
                log.info("failed to update lease %s/%s: %s", namespace, name, exc.reason)
                return False

    return Lock(name, namespace, identity)


class _Timed:
    """An API object whose every call waits at most ``timeout_s`` (the client's ``_request_timeout``)."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api = api
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        return functools.partial(attr, _request_timeout=self._timeout_s) if callable(attr) else attr


def _lease_api(kube: Any, timeout_s: float) -> Any:
    """``kube``'s ``CoordinationV1Api`` on an ``ApiClient`` of its own without urllib3's retries
    (by default a GET or PUT that timed out is sent up to 3 more times, each waiting the whole
    timeout again), each call waiting at most ``timeout_s``."""
    from kubernetes import client

    api = getattr(kube, "api", None)
    if getattr(api, "configuration", None) is None:  # not a real ApiClient: its calls as they are
        return _Timed(kube.coordination, timeout_s)
    cfg = copy.copy(api.configuration)  # shallow: the same credentials and their refresh hook
    cfg.retries = False  # a failed call fails the try; the elector retries every retry_period
    own = client.ApiClient(cfg)
    own.default_headers.update(api.default_headers)  # the user agent
    return _Timed(client.CoordinationV1Api(own), timeout_s)


def _lease_seconds(written: Any, own: int) -> int:
    """The lease duration the holder wrote (``spec.leaseDurationSeconds``, read by the client as a
    string); our own only where the record has none usable (then the record is taken at once anyway)."""
    try:
        seconds = int(written)
    except (TypeError, ValueError):
        return own
    return seconds if seconds > 0 else own


def _election(config: Any) -> Any:
    """The Python client's ``LeaderElection`` whose acquire-or-renew step times the holder's lease
    on the monotonic clock, as client-go does (Go's ``time.Now().Sub`` is monotonic).

    The client's own step compares ``time.time()`` values: a wall-clock step forward (NTP, a VM
    resumed) of ``lease_duration`` on a follower made it take the lease from a leader that had
    just renewed, while that leader (timed on the monotonic clock) still bound: two schedulers.
    Otherwise the step is the client's: create only on 404, take a lease with no holder or a
    missing field at once, keep ``acquireTime`` on a renew, every write optimistic.
    """
    import json
    from http import HTTPStatus

    from kubernetes.leaderelection.leaderelection import LeaderElection
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

    class Election(LeaderElection):
        observed_at = 0.0  # monotonic time the observed record was first seen (or written)

        def _observe(self, record: Any) -> None:
            self.observed_record = record
            self.observed_at = time.monotonic()

        def try_acquire_or_renew(self) -> bool:
            cfg, lock = self.election_config, self.election_config.lock
            now = str(datetime.datetime.now())  # the record's times: wall clock, the client's format
            record = LeaderElectionRecord(lock.identity, str(cfg.lease_duration), now, now)
            found, old = lock.get(lock.name, lock.namespace)
            if not found:
                try:  # only a clean 404 means "absent": a proxy's HTML page is retried, not created over
                    code = json.loads(old.body)["code"]
                except (ValueError, TypeError, KeyError, AttributeError):
                    code = None
                if code != HTTPStatus.NOT_FOUND or not lock.create(name=lock.name, namespace=lock.namespace,
                                                                   election_record=record):
                    return False
                self._observe(record)
                return True
            if old is None or None in (old.holder_identity, old.lease_duration, old.acquire_time, old.renew_time):
                return self.update_lock(record)  # released (no holder) or not a complete record
            if self.observed_record is None or old.__dict__ != self.observed_record.__dict__:
                self._observe(old)
            if lock.identity != old.holder_identity:
                # The holder's own leaseDurationSeconds, not ours (client-go's isLeaseValid): a
                # follower configured shorter must not take a lease its holder still renews in time.
                if time.monotonic() - self.observed_at < _lease_seconds(old.lease_duration, cfg.lease_duration):
                    return False  # the holder renewed less than its lease duration ago, as seen here
            else:
                record.acquire_time = old.acquire_time  # a renew keeps the acquire time
            return self.update_lock(record)

        def update_lock(self, record: Any) -> bool:
            lock = self.election_config.lock
            if not lock.update(lock.name, lock.namespace, record):
                return False
            self._observe(record)
            return True

    return Election(config)


class LeaderElector:
    """One candidate. Call :meth:`start` (a thread) and ask :meth:`is_leader` before each write."""

    def __init__(self, kube: Any, name: str, namespace: str, identity: str, lease_duration: int = 15,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started: Callable[[], None] | None = None, on_stopped: Callable[[], None] | None = None) -> None:
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
        #: Each Lease call's wait for its answer: a try (a get, then a create or a replace) ends
        #: within the renew deadline even when the API server does not answer.
        self.lease_timeout_s = self.renew_deadline / 2
        self.lock = _lease_lock(name, namespace, identity)
        # The client of this process (not the global default), its calls bounded.
        self.lock.api_instance = _lease_api(kube, self.lease_timeout_s)
        # LeaderElection only reads these attributes of its config; its Config class would
        # sys.exit() on sub-second periods, which the tests use.
        config = SimpleNamespace(lock=self.lock, lease_duration=lease_duration, renew_deadline=renew_deadline,
                                 retry_period=retry_period, onstarted_leading=lambda: None, onstopped_leading=lambda: None)
        self._election = _election(config)
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
        if not ok:
            observed = self._election.observed_record
            holder = getattr(observed, "holder_identity", None)
            if holder and holder != self.identity:
                self._lose()  # someone else holds the lease now: stop binding at once
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
        if self._thread is not None:  # a try in progress ends within the renew deadline
            self._thread.join(timeout=max(10.0, self.renew_deadline + 1.0))
        if release:
            self.release()

    def release(self) -> bool:
        """Empty the lease's holder if this candidate holds it (optimistic: a 409 means someone else)."""
        from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

        try:  # no answer in time (urllib3's errors pass the lock's ApiException handling): not released
            ok, record = self.lock.get(self.lock.name, self.lock.namespace)
            if not ok or record is None or record.holder_identity != self.identity:
                return False
            now = str(datetime.datetime.now())  # the record format of the client; written as a MicroTime
            empty = LeaderElectionRecord("", "1", now, now)
            return bool(self.lock.update(self.lock.name, self.lock.namespace, empty))
        except Exception as exc:  # the lease then ends after its duration, as without a release
            log.warning("%s: lease release failed: %s: %s", self.identity, type(exc).__name__, exc)
            return False
