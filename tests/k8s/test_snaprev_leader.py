"""Leader election timed as client-go times it: a follower measures the holder's lease on its
monotonic clock, so a wall-clock step (NTP, a resumed VM) cannot end a live lease early and make
two schedulers bind. Loopback API server, real kubernetes client; no sleeps (each step is one
``_try``, the loop's body)."""

from __future__ import annotations

import time

from iro_fed.k8s.leader import LeaderElector


def holder(api) -> str:
    return api.get("leases", "iro-system/l")["spec"]["holderIdentity"]


def test_a_wall_clock_step_on_a_follower_does_not_end_a_live_lease(api, kube, monkeypatch):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=30, renew_deadline=20, retry_period=1)
    b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=30, renew_deadline=20, retry_period=1)
    assert a._try() and a.is_leader()
    assert not b._try()  # a's lease is fresh
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # the wall clock steps an hour on
    assert not b._try()  # the client's own step compared time.time() values and took the lease here
    assert holder(api) == "a" and a.is_leader()
    assert a._try()  # a renews (its times now an hour on: they are not what b times the lease by)
    assert not b._try() and holder(api) == "a"
    # lease_duration later on b's monotonic clock without a renew, b takes the lease
    b._election.observed_at -= 30
    assert b._try() and holder(api) == "b"
    assert not a._try() and not a.is_leader()  # a sees the new holder and stops at once


def test_a_released_lease_is_taken_at_the_next_try(api, kube):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=30, renew_deadline=20, retry_period=1)
    b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=30, renew_deadline=20, retry_period=1)
    assert a._try()
    assert not b._try()
    assert a.release()
    assert b._try() and holder(api) == "b"
    assert api.get("leases", "iro-system/l")["spec"]["leaseTransitions"] == 1
