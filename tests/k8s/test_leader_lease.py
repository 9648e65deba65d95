"""The Lease as client-go writes it (MicroTime, leaseTransitions) and leadership that ends as soon
as another holder is seen. Loopback API server, real kubernetes client."""

from __future__ import annotations

import datetime
import re

from kubernetes import client

from iro_fed.k8s.leader import LeaderElector, MicroTime

# metav1.MicroTime is parsed with time.Parse("2006-01-02T15:04:05.000000Z07:00", s): six digits.
RFC3339_MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")


def spec_of(api, name: str = "iro-system/l") -> dict:
    return api.get("leases", name)["spec"]


def assert_micro_times(spec: dict) -> None:
    for key in ("acquireTime", "renewTime"):
        assert RFC3339_MICRO.match(spec[key]), f"{key}: {spec[key]!r} is not a MicroTime"


def test_lease_times_are_micro_times_and_transitions_count_holders(api, kube):
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=30, renew_deadline=20, retry_period=0.2).start()
    b = None
    try:
        assert a.wait_leader(10)
        assert api.wait_for(lambda: spec_of(api)["renewTime"] != spec_of(api)["acquireTime"], 10)  # renewed once
        created = spec_of(api)
        assert created["holderIdentity"] == "a" and created["leaseTransitions"] == 0
        assert_micro_times(created)
        a.stop(release=True)  # the release used whole-second times, which the API server refuses
        released = spec_of(api)
        assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
        assert released["leaseTransitions"] == 0
        assert_micro_times(released)
        b = LeaderElector(kube, "l", "iro-system", "b", lease_duration=30, renew_deadline=20, retry_period=0.2).start()
        assert b.wait_leader(10)
        taken = spec_of(api)
        assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
        assert_micro_times(taken)
        assert api.wait_for(lambda: spec_of(api)["renewTime"] != taken["renewTime"], 10)
        assert spec_of(api)["leaseTransitions"] == 1  # renewals keep the count
        assert spec_of(api)["acquireTime"] == taken["acquireTime"]
    finally:
        a.stop(release=False)
        if b is not None:
            b.stop()


def test_a_whole_second_is_written_with_its_six_digits():
    t = MicroTime.of(datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC))
    spec = client.V1LeaseSpec(holder_identity="a", acquire_time=t, renew_time=t)
    body = client.ApiClient().sanitize_for_serialization(client.V1Lease(spec=spec))
    assert body["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"
    local = MicroTime.of(datetime.datetime(2026, 1, 1, 12, 0, 0, 250).astimezone())
    assert local.isoformat().endswith(".000250Z")


def test_leadership_ends_as_soon_as_another_holder_is_seen(api, kube):
    """If the Lease shows another holder (taken over while this replica stalled, or edited by
    hand), this replica must stop binding at its next read, not renew_deadline (50 s) later."""
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=60, renew_deadline=50, retry_period=0.2).start()
    try:
        assert a.wait_leader(10)
        lease = api.get("leases", "iro-system/l")
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["renewTime"] = lease["spec"]["acquireTime"] = MicroTime.now(datetime.UTC).isoformat()
        api.update("leases", lease)
        assert api.wait_for(lambda: not a.is_leader(), 10)
        assert spec_of(api)["holderIdentity"] == "intruder"  # not overwritten: its lease has not expired
    finally:
        a.stop(release=True)
    assert spec_of(api)["holderIdentity"] == "intruder"  # a release gives up only a lease it holds
