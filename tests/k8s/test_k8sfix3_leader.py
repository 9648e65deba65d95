"""A follower waits the holder's lease duration (``spec.leaseDurationSeconds`` written in the
Lease), not its own setting, as client-go's ``isLeaseValid`` does. Loopback API server, real
kubernetes client; no sleeps (each step is one ``_try``, and the follower's observation of the
holder's last renew is moved back by hand)."""

from __future__ import annotations

from iro_fed.k8s.leader import LeaderElector


def holder(api) -> str:
    return api.get("leases", "iro-system/l")["spec"]["holderIdentity"]


def test_a_follower_with_a_shorter_setting_does_not_take_a_live_lease(api, kube):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=30, renew_deadline=20, retry_period=1)
    b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=3, renew_deadline=2, retry_period=1)
    assert a._try() and a.is_leader()
    assert api.get("leases", "iro-system/l")["spec"]["leaseDurationSeconds"] == 30
    assert not b._try()
    b._election.observed_at -= 10  # past b's 3 s, well within a's 30 s: a is still binding
    assert not b._try()
    assert holder(api) == "a" and a.is_leader()
    b._election.observed_at -= 30  # a's own 30 s have passed without a renew
    assert b._try() and holder(api) == "b"
    assert api.get("leases", "iro-system/l")["spec"]["leaseDurationSeconds"] == 3


def test_a_follower_with_a_longer_setting_takes_an_expired_short_lease(api, kube):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=3, renew_deadline=2, retry_period=1)
    b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=60, renew_deadline=50, retry_period=1)
    assert a._try()
    assert not b._try()
    b._election.observed_at -= 4  # past a's 3 s without a renew (b's own 60 s made it wait a minute)
    assert b._try() and holder(api) == "b"
