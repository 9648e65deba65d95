"""Every resource a pending pod requests is checked, not only the cluster config's ``resources``.

Before: with ``resources: [cpu, memory]`` (deploy/base/cluster-config.yaml) the scheduler bound a
pod requesting ``example.com/fpga: 1`` or ``ephemeral-storage: 500Gi`` to a node without them, and
5 pods to a node whose allocatable ``pods`` is 2; the kubelet then rejects them (OutOf...).
"""

from __future__ import annotations

from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import Clock, make_scheduler

CONFIG = ClusterConfig(resources=("cpu", "memory"))


def _requesting(name: str, resource: str, amount: str) -> dict:
    pod = make_pod(name, cpu="100m", scheduler="iro")
    pod["spec"]["containers"][0]["resources"]["requests"][resource] = amount
    return pod


def _outcomes(result) -> dict:
    return {o.key.split("/")[1]: (o.status, o.node if o.status == "bound" else o.message) for o in result.pods}


def test_unconfigured_resources_and_pod_slots_are_checked(api: FakeApiServer, kubeconfig: str, clock: Clock):
    api.add_node(make_node("n0", cpu="8", memory="16Gi", zone="z1", pods="2"))
    api.add_pod(_requesting("fpga", "example.com/fpga", "1"))
    api.add_pod(_requesting("eph", "ephemeral-storage", "500Gi"))
    for i in range(3):
        api.add_pod(make_pod(f"p{i}", cpu="100m", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock, config=CONFIG)
    out = _outcomes(s.schedule_batch(s.ready_pods()))
    assert out["fpga"] == ("unschedulable", "0/1 nodes are available: 1 Insufficient example.com/fpga.")
    assert out["eph"] == ("unschedulable", "0/1 nodes are available: 1 Insufficient ephemeral-storage.")
    plain = sorted(out[f"p{i}"] for i in range(3))
    assert plain == [("bound", "n0"), ("bound", "n0"), ("unschedulable", "0/1 nodes are available: 1 Too many pods.")]
    assert sum(bool(p["spec"].get("nodeName")) for p in api.list("pods")) == 2


def test_a_node_that_has_the_resource_takes_the_pod_and_bound_pods_count(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    plain, fpga = (
        make_node("plain", cpu="8", memory="16Gi", zone="z1"),
        make_node("fpga", cpu="8", memory="16Gi", zone="z1"),
    )
    fpga["status"]["allocatable"]["example.com/fpga"] = "1"
    api.add_node(plain)
    api.add_node(fpga)
    api.add_pod(_requesting("a", "example.com/fpga", "1"))
    s = make_scheduler(kubeconfig, clock, config=CONFIG)
    assert _outcomes(s.schedule_batch(s.ready_pods())) == {"a": ("bound", "fpga")}
    # The card is held by the pod bound there (assumed, then shown by the watch): the next one waits.
    api.add_pod(_requesting("b", "example.com/fpga", "1"))
    s.pending._list()
    s.cache.pods._list()
    out = _outcomes(s.schedule_batch(s.ready_pods()))
    assert out == {"b": ("unschedulable", "0/2 nodes are available: 2 Insufficient example.com/fpga.")}
    # A batch that asks for nothing more is placed on the configured resources, as before.
    api.add_pod(make_pod("c", cpu="100m", scheduler="iro"))
    s.pending._list()
    ready = [p for p in s.ready_pods() if p["metadata"]["name"] == "c"]
    assert s._model(ready).with_pods(ready).problem.resources == ("cpu", "memory")
    assert _outcomes(s.schedule_batch(ready))["c"][0] == "bound"


def test_the_model_adds_only_what_the_pending_pods_need():
    nodes = [make_node("n0", pods="110"), make_node("n1", pods="3")]
    bound = [make_pod(f"b{i}", node="n1") for i in range(2)]
    plain = [make_pod("x"), make_pod("y")]
    assert ClusterModel(nodes, bound, CONFIG, pending=plain).with_pods(plain).problem.resources == (
        "cpu",
        "memory",
        "pods",
    )
    assert ClusterModel(nodes, bound, CONFIG, pending=plain[:1]).with_pods(plain[:1]).problem.resources == (
        "cpu",
        "memory",
    )
    gpu = make_pod("g", gpus=1)
    assert ClusterModel(nodes, bound, CONFIG, pending=[gpu]).with_pods([gpu]).problem.resources == ("cpu", "memory")
    eph = _requesting("e", "ephemeral-storage", "1Gi")
    problem = ClusterModel(nodes, bound, CONFIG, pending=[eph]).with_pods([eph]).problem
    assert problem.resources == ("cpu", "memory", "ephemeral-storage")
    assert problem.demand[0].tolist() == [100.0, 512.0, 1024.0]
    # Not widened (the extender, snapshots): the configured resources as they are.
    assert ClusterModel(nodes, bound, CONFIG).with_pods([eph]).problem.resources == ("cpu", "memory")


def test_a_bad_quantity_of_an_unconfigured_resource_is_that_pods_error(
    api: FakeApiServer, kubeconfig: str, clock: Clock
):
    api.add_node(make_node("n0", cpu="8", memory="16Gi", zone="z1"))
    api.add_pod(_requesting("bad", "example.com/fpga", "abc"))
    api.add_pod(make_pod("good", cpu="100m", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock, config=CONFIG)
    out = _outcomes(s.schedule_batch(s.ready_pods()))
    assert out["good"] == ("bound", "n0")
    assert out["bad"][0] == "invalid"
    assert "spec.containers[0].resources.requests.example.com/fpga" in out["bad"][1]
