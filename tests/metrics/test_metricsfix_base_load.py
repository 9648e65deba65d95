"""Load-aware ``max`` scoring keeps a node's base load (what its daemons use, which no pod
requests) on top of its requests, as Koordinator's LoadAwareScheduling keeps the node's usage
less its pods' usage. The snapshot comes from a loopback server speaking the Prometheus API,
answering each query of SnapshotQueries with its own series."""

from __future__ import annotations

import pytest

from iro_fed.metrics import (
    ClusterSnapshot,
    NodeUsage,
    PrometheusClient,
    SnapshotQueries,
    build_snapshot,
    load_aware_problem,
)
from iro_fed.problem_io import problem_from_dict
from tests.metrics.promapi import params, serve, vector

GIB = 2**30
Q = SnapshotQueries()
# Two equal nodes with equal requests (3 cores, 8 GiB). "daemons" runs 1.5 cores and 4 GiB of
# system daemons beside pods that use 1 core and 2 GiB; "lean" has no base load to speak of.
SERIES = {
    Q.cpu_used_cores: {"daemons": 2.5, "lean": 1.1},
    Q.memory_used_bytes: {"daemons": 6 * GIB, "lean": 2.2 * GIB},
    Q.cpu_capacity_cores: {"daemons": 4, "lean": 4},
    Q.memory_capacity_bytes: {"daemons": 16 * GIB, "lean": 16 * GIB},
    Q.pods_cpu_used_cores: {"daemons": 1.0, "lean": 1.0},
    Q.pods_memory_used_bytes: {"daemons": 2 * GIB, "lean": 2 * GIB},
}


def prometheus():
    """The loopback Prometheus API answering each query of SnapshotQueries with SERIES."""

    def respond(handler):
        series = SERIES.get(params(handler)["query"], {})
        return 200, vector([{"metric": {"node": node}, "value": [1.0, repr(float(v))]} for node, v in series.items()])

    return serve(respond)


def site():
    node = {"domain": "d", "capacity": {"cpu": 4000, "memory": 16384}, "allocated": {"cpu": 3000, "memory": 8192}}
    return problem_from_dict({"domains": [{"name": "d"}], "nodes": [{"name": "daemons", **node}, {"name": "lean", **node}],
                              "workloads": [{"name": "w", "requests": {"cpu": 500, "memory": 512}}]})


def test_max_scoring_adds_the_base_load_prometheus_shows_to_the_requests() -> None:
    with prometheus() as url:
        snap = build_snapshot(PrometheusClient(url, timeout_s=5.0))
    usage = snap.nodes["daemons"]
    assert (usage.cpu_millicores, usage.pods_cpu_millicores) == (2500.0, 1000.0)
    assert (usage.memory_mib, usage.pods_memory_mib) == (6144.0, 2048.0)
    assert snap.to_dict()["nodes"]["daemons"]["pods_cpu_millicores"] == 1000.0
    mx, n = load_aware_problem(site(), snap, "max")
    # daemons: requests 3000 m + base 1500 m (2500 used - 1000 by pods) = 4500, clipped to the
    # node's 4000 m: full. Before, max(3000, 2500) = 3000 left it 1000 m free - the daemons' room.
    # Memory: 8192 + (6144 - 2048) = 12288 MiB (was 8192). lean: 3000 + 100, 8192 + 204.8.
    assert n == 2
    assert mx.allocated.ravel().tolist() == pytest.approx([4000.0, 12288.0, 3100.0, 8396.8])


def test_max_scoring_is_unchanged_where_pods_usage_is_not_read() -> None:
    # No pods' series for a node (a Prometheus without cAdvisor): the base load cannot be told
    # apart, and ``max`` is max(requests, usage) as before.
    snap = ClusterSnapshot(0.0, {"daemons": NodeUsage(cpu_millicores=2500.0, memory_mib=9000.0),
                                 "lean": NodeUsage(cpu_millicores=3500.0, pods_memory_mib=1.0)})
    mx, _ = load_aware_problem(site(), snap, "max")
    assert mx.allocated.tolist() == [[3000.0, 9000.0], [3500.0, 8192.0]]


def test_pods_using_more_than_the_node_reads_give_no_negative_base_load() -> None:
    # Two sources (cAdvisor's working set counts page cache psutil's "used" leaves out).
    snap = ClusterSnapshot(0.0, {"daemons": NodeUsage(cpu_millicores=1000.0, pods_cpu_millicores=1500.0)})
    mx, _ = load_aware_problem(site(), snap, "max")
    assert mx.allocated[0].tolist() == [3000.0, 8192.0]


def test_usage_scoring_already_counts_the_base_load() -> None:
    with prometheus() as url:
        snap = build_snapshot(PrometheusClient(url, timeout_s=5.0))
    usage, _ = load_aware_problem(site(), snap, "usage")
    assert usage.allocated.ravel().tolist() == pytest.approx([2500.0, 6144.0, 1100.0, 2252.8])

