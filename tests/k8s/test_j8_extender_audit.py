"""Extender audit (j8): the snapshot cache key holds what the model reads of a pod; a pod bound
through /bind counts on its node until the node cache does; a NodeList node with a malformed
``iro-fed.io/allocated`` annotation is refused alone; /prioritize before the cache synced is a 503."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import post_json, serving

ZONE = "topology.kubernetes.io/zone"


def _names(result: dict[str, Any]) -> list[str]:
    if result["NodeNames"] is not None:
        return result["NodeNames"]
    return [n["metadata"]["name"] for n in result["Nodes"]["items"]]


@pytest.fixture
def cache(api, kube):
    """Two 2-cpu nodes in two zones; on n1 a pod with a host port, a label and a required
    anti-affinity against ``role=db`` pods of its namespace (per node). The model is rebuilt only
    when a test asks (refresh_s: an hour), so a test sees exactly the model it builds."""
    api.add_node(make_node("n1", cpu="2", memory="4Gi", zone="z1", gpus=1, gpu_model="A100"))
    api.add_node(make_node("n2", cpu="2", memory="4Gi", zone="z2", gpus=1, gpu_model="A100"))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    api.add_pod(make_pod("web-0", cpu="100m", memory="64Mi", node="n1", labels={"app": "s"},
                         ports=[{"containerPort": 80, "hostPort": 8080}], affinity=anti))
    c = ClusterCache(kube, watch_timeout_s=5, refresh_s=3600).start()
    assert c.wait_synced(10)
    c.model()  # built now, before any test binds: later ones only where a test builds them
    yield c
    c.stop()


def _pod(name: str, **kw: Any) -> dict[str, Any]:
    pod = make_pod(name, cpu="100m", memory="64Mi", **kw)
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def _spread() -> list[dict[str, Any]]:
    return [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "s"}}}]


def _pod_level(pod: dict[str, Any]) -> None:
    pod["spec"]["resources"] = {"requests": {"cpu": "3"}}


def _resized(pod: dict[str, Any]) -> None:
    pod["status"] = {"containerStatuses": [{"name": "app", "allocatedResources": {"cpu": "3"}}]}


def _init(pod: dict[str, Any], **extra: Any) -> None:
    # 1850m: alone (an init container) it fits either node; beside the app's 100m (a sidecar) only n2
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "1850m"}}, **extra}]


def _with(pod: dict[str, Any], change: Any) -> dict[str, Any]:
    change(pod)
    return pod


def _sidecar(pod: dict[str, Any]) -> None:
    _init(pod, restartPolicy="Always")


# (the pod that passes on both nodes, the same pod changed in one field, the nodes it passes then)
VARIANTS = {
    "pod-level spec.resources": (lambda: _pod("a"), lambda: _pod("b"), _pod_level, []),
    "container hostPort": (lambda: _pod("a", ports=[{"containerPort": 80}]),
                           lambda: _pod("b", ports=[{"containerPort": 80, "hostPort": 8080}]), None, ["n2"]),
    "metadata.labels": (lambda: _pod("a", labels={"role": "web"}), lambda: _pod("b", labels={"role": "db"}), None, ["n2"]),
    "metadata.namespace": (lambda: _pod("a", labels={"role": "db"}, namespace="other"),
                           lambda: _pod("b", labels={"role": "db"}), None, ["n2"]),
    "spec.topologySpreadConstraints": (lambda: _pod("a", labels={"app": "s"}),
                                       lambda: _pod("b", labels={"app": "s"}, topology_spread=_spread()), None, ["n2"]),
    "status resize": (lambda: _pod("a"), lambda: _pod("b"), _resized, []),
    "initContainers restartPolicy": (lambda: _with(_pod("a"), _init), lambda: _pod("b"), _sidecar, ["n2"]),
}


@pytest.mark.parametrize("first", ["plain", "changed"])
@pytest.mark.parametrize("field", list(VARIANTS))
def test_pods_differing_in_one_read_field_get_their_own_answer_in_either_order(cache, kube, field, first):
    make_a, make_b, change, b_passes = VARIANTS[field]
    a, b = make_a(), make_b()
    if change:
        change(b)
    ext = Extender(cache=cache, kube=kube)
    expected = {"a": ["n1", "n2"], "b": b_passes}
    order = [("a", a), ("b", b)] if first == "plain" else [("b", b), ("a", a)]
    for name, pod in order:
        args = {"Pod": pod, "NodeNames": ["n1", "n2"]}
        assert _names(ext.filter(args)) == expected[name], name
        # the scores are those an extender that never saw the other pod gives
        assert ext.prioritize(args) == Extender(cache=cache, kube=kube).prioritize(args), name
    assert {h["Score"] for h in ext.prioritize({"Pod": b, "NodeNames": ["n1", "n2"]}) if h["Host"] not in b_passes} == {0}


def test_nodelist_mode_pod_level_requests_are_not_answered_from_a_plain_pods_snapshot():
    nodes = {"items": [make_node("n1", cpu="2", memory="4Gi"), make_node("n2", cpu="2", memory="4Gi")]}
    for n in nodes["items"]:
        n["metadata"].update(uid=n["metadata"]["name"], resourceVersion="1")
    small, big = _pod("small"), _pod("big")
    _pod_level(big)
    for order in ((small, big), (big, small)):
        ext = Extender()
        for pod in order:
            got = _names(ext.filter({"Pod": pod, "Nodes": nodes}))
            assert got == ([] if pod is big else ["n1", "n2"])


def test_replicas_differing_only_in_unread_fields_share_a_snapshot(cache, kube):
    ext = Extender(cache=cache, kube=kube)
    a, b = _pod("a"), _pod("b")
    b["spec"]["volumes"] = [{"name": "kube-api-access-x1y2z"}]
    b["metadata"]["annotations"] = {"other.io/x": "1"}
    b["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "lastTransitionTime": "now"}]}
    model = cache.model()
    assert ext.snapshot(a, None) is ext.snapshot(b, None)
    assert ext._snapshots[model] and len(ext._snapshots[model]) == 1


# --- bind: the bound pod counts on its node until the node cache does ------------------------


def _share(api, name: str, milli: str = "600") -> dict[str, Any]:
    return api.add_pod(make_pod(name, cpu="100m", memory="64Mi", annotations={"iro-fed.io/gpu-milli": milli}))


def _bind(ext: Extender, pod: dict[str, Any], node: str) -> dict[str, str]:
    return ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                     "Node": node})


def test_a_gpu_share_bound_through_bind_is_not_booked_again_before_the_cache_counts_it(api, cache, kube):
    ext = Extender(cache=cache, kube=kube)
    p1, p2, p3 = _share(api, "p1"), _share(api, "p2"), _share(api, "p3", "400")
    assert _names(ext.filter({"Pod": p1, "NodeNames": ["n1"]})) == ["n1"]
    assert _bind(ext, p1, "n1") == {"Error": ""}
    # kube-scheduler goes on at once: the model has not seen p1 bound (it is rebuilt on demand here)
    res = ext.filter({"Pod": p2, "NodeNames": ["n1", "n2"]})
    assert res["NodeNames"] == ["n2"] and "nvidia.com/gpu" in res["FailedNodes"]["n1"]
    assert [h for h in ext.prioritize({"Pod": p2, "NodeNames": ["n1"]})] == [{"Host": "n1", "Score": 0}]
    assert _names(ext.filter({"Pod": p3, "NodeNames": ["n1"]})) == ["n1"]  # 400 of the card is free
    # once the model counts p1 it is counted once, not twice: the 400 share still fits
    assert api.wait_for(lambda: (cache.pods.store.get("default/p1") or {}).get("spec", {}).get("nodeName") == "n1")
    cache._build()  # what the refresh thread does (0.5 s by default)
    assert _names(ext.filter({"Pod": p3, "NodeNames": ["n1"]})) == ["n1"]
    assert _names(ext.filter({"Pod": p2, "NodeNames": ["n1"]})) == []


def test_an_assumed_pod_stops_counting_when_the_watch_shows_it_deleted(api, cache, kube):
    ext = Extender(cache=cache, kube=kube)
    p1, p2 = _share(api, "p1"), _share(api, "p2")
    ext.filter({"Pod": p1, "NodeNames": ["n1"]})
    assert _bind(ext, p1, "n1") == {"Error": ""}
    assert _names(ext.filter({"Pod": p2, "NodeNames": ["n1"]})) == []
    assert api.wait_for(lambda: "default/p1" in cache.pods.store)
    api.delete("pods", "default/p1")
    assert api.wait_for(lambda: "default/p1" not in cache.pods.store)
    assert _names(ext.filter({"Pod": p2, "NodeNames": ["n1"]})) == ["n1"]  # the model is still the old one


def test_a_failed_bind_or_one_without_a_request_for_the_pod_counts_nothing(api, cache, kube):
    ext = Extender(cache=cache, kube=kube)
    p1, p2 = _share(api, "p1"), _share(api, "p2")
    assert _bind(ext, p1, "n1") == {"Error": ""}  # never filtered here: its spec is unknown
    assert _names(ext.filter({"Pod": p2, "NodeNames": ["n1"]})) == ["n1"]
    stale = dict(p2, metadata=dict(p2["metadata"], uid="not-its-uid"))
    ext.filter({"Pod": stale, "NodeNames": ["n1"]})
    assert "409" in _bind(ext, stale, "n1")["Error"]
    assert _names(ext.filter({"Pod": p2, "NodeNames": ["n1"]})) == ["n1"]


# --- NodeList mode: one node's malformed usage annotation ------------------------------------


def _nodelist(bad: str) -> dict[str, Any]:
    nodes = [make_node("a", cpu="4"), make_node("b", cpu="4", annotations={"iro-fed.io/allocated": bad}),
             make_node("c", cpu="4", annotations={"iro-fed.io/allocated": '{"cpu": "3"}'})]
    for n in nodes:
        n["metadata"].update(uid=n["metadata"]["name"], resourceVersion="1")
    return {"items": nodes}


@pytest.mark.parametrize("bad", ["garbage", "[1]", '{"cpu": "lots"}'])
def test_a_node_with_a_malformed_allocated_annotation_is_refused_alone(bad):
    ext = Extender()
    res = ext.filter({"Pod": _pod("p", ), "Nodes": _nodelist(bad)})
    assert res["Error"] == ""
    assert _names(res) == ["a", "c"]
    assert list(res["FailedAndUnresolvableNodes"]) == ["b"]
    assert "metadata.annotations.iro-fed.io/allocated" in res["FailedAndUnresolvableNodes"]["b"]
    big = _pod("big")
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    res = ext.filter({"Pod": big, "Nodes": _nodelist(bad)})
    assert _names(res) == ["a"] and res["FailedNodes"] == {"c": "Insufficient cpu"}  # c's annotation still counts
    scores = ext.prioritize({"Pod": _pod("p"), "Nodes": _nodelist(bad)})
    assert [h["Host"] for h in scores] == ["a", "b", "c"]  # every node asked about, as HostPriorityList
    assert {h["Host"]: h["Score"] for h in scores}["b"] == 0


def test_every_node_malformed_refuses_every_node():
    nodes = _nodelist("garbage")
    nodes["items"] = nodes["items"][1:2]
    res = Extender().filter({"Pod": _pod("p"), "Nodes": nodes})
    assert res["Error"] == "" and _names(res) == [] and list(res["FailedAndUnresolvableNodes"]) == ["b"]


# --- before the node cache synced --------------------------------------------------------------


class _Unsynced:
    synced = False


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def test_prioritize_before_the_cache_synced_is_a_503_counted_as_an_error(serve):
    ext = Extender(cache=_Unsynced())
    srv = serve(ext)
    body = {"Pod": _pod("p"), "NodeNames": ["n1"]}
    status, res = post_json(srv.url, "/iro/prioritize", body)
    assert status == 503 and "not synced" in res["Error"]
    status, res = post_json(srv.url, "/iro/filter", copy.deepcopy(body))
    assert status == 200 and "not synced" in res["Error"] and res["NodeNames"] is None
    stats = ext.stats_snapshot()
    assert stats["errors"] == 2 and stats["bad_requests"] == 0


def test_prioritize_503_carries_retry_after(serve):
    import http.client

    srv = serve(Extender(cache=_Unsynced()))
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/iro/prioritize", body=json.dumps({"Pod": _pod("p"), "NodeNames": ["n1"]}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 503 and resp.getheader("Retry-After") == "1"


# --- j13: the key and the kept pods hold only what the model reads ------------------------------


def _busy_container(i: int, tag: str = "1.2") -> dict[str, Any]:
    """A container as a real workload has it: image, env, args, probes... (none of which the model reads)."""
    return {"name": f"c{i}", "image": f"registry.example.com/app-{i}:{tag}@sha256:" + "a" * 64,
            "command": ["/bin/app"], "args": [f"--flag{j}={tag}" for j in range(10)],
            "env": [{"name": f"ENV_{j}", "value": tag * 20} for j in range(25)],
            "envFrom": [{"configMapRef": {"name": f"cm-{tag}"}}], "workingDir": f"/srv/{tag}",
            "ports": [{"containerPort": 8000 + i, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "livenessProbe": {"httpGet": {"path": f"/healthz/{tag}", "port": 8000 + i}},
            "readinessProbe": {"httpGet": {"path": f"/ready/{tag}", "port": 8000 + i}},
            "startupProbe": {"exec": {"command": ["true", tag]}}, "lifecycle": {"preStop": {"exec": {"command": [tag]}}},
            "volumeMounts": [{"name": f"data-{tag}", "mountPath": "/data"}],
            "volumeDevices": [{"name": f"blk-{tag}", "devicePath": "/dev/xvda"}],
            "securityContext": {"runAsUser": 1000 if tag == "1.2" else 2000},
            "terminationMessagePath": f"/dev/log-{tag}", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent" if tag == "1.2" else "Always",
            "stdin": tag != "1.2", "stdinOnce": tag != "1.2", "tty": tag != "1.2"}


def _busy_pod(name: str, tag: str = "1.2", containers: int = 30, **kw: Any) -> dict[str, Any]:
    pod = _pod(name, **kw)
    pod["spec"]["containers"] = [_busy_container(i, tag) for i in range(containers)]
    pod["spec"]["initContainers"] = [dict(_busy_container(99, tag), name="sidecar", restartPolicy="Always")]
    return pod


def test_pods_differing_only_in_unread_container_fields_share_a_snapshot(cache, kube):
    ext = Extender(cache=cache, kube=kube)
    a, b = _busy_pod("a"), _busy_pod("b", tag="2.0")  # a new image, env, args, probes...: a new rollout
    assert ext.snapshot(a, None) is ext.snapshot(b, None)
    assert len(ext._snapshots[cache.model()]) == 1
    assert ext.filter({"Pod": b, "NodeNames": ["n1", "n2"]}) == Extender(cache=cache, kube=kube).filter(
        {"Pod": b, "NodeNames": ["n1", "n2"]})
    # the key holds a container's requests, not its whole spec: 30 busy containers, a few KB
    from iro_fed.k8s.snapshot import pod_shape_key

    assert len(pod_shape_key(a)) < 10_000 < len(json.dumps(a))


@pytest.mark.parametrize("change", [
    lambda c: c.update(name="other"),
    lambda c: c["resources"]["requests"].update(cpu="11m"),
    lambda c: c["ports"][0].update(hostPort=9000),
    lambda c: c.update(restartPolicy="Never"),
    lambda c: c.update(resizePolicy=[{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]),
], ids=["name", "resources", "ports", "restartPolicy", "resizePolicy"])
def test_a_pod_differing_in_a_container_field_that_may_be_read_gets_its_own_key(change):
    from iro_fed.k8s.snapshot import pod_shape_key

    a, b = _busy_pod("a", containers=2), _busy_pod("b", containers=2)
    for key in ("containers", "initContainers"):
        b2 = copy.deepcopy(b)
        change(b2["spec"][key][0])
        assert pod_shape_key(a) != pod_shape_key(b2), key


def test_a_pod_kept_for_bind_is_trimmed_to_what_its_usage_reads(api, cache, kube):
    ext = Extender(cache=cache, kube=kube)
    pod = _busy_pod("big", annotations={"iro-fed.io/gpu-milli": "600", "other.io/x": "y" * 1000})
    pod["metadata"]["managedFields"] = [{"manager": "kcm", "fieldsV1": {"f:spec": {f"k{i}": {} for i in range(300)}}}]
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    kept = ext._recent["uid-big"]
    text = json.dumps(kept)
    assert len(text) * 10 < len(json.dumps(pod))
    assert "env" not in text and "image" not in text and "managedFields" not in text and "other.io/x" not in text
    assert kept["metadata"] == {"name": "big", "namespace": "default", "uid": "uid-big",
                                "annotations": {"iro-fed.io/gpu-milli": "600"}}


def _usage_pods() -> list[dict[str, Any]]:
    """Pods that exercise every part of the usage accounting: GPU cards, shares and their card
    annotation, sidecars and init containers, overhead, pod-level requests, in-place resize (of
    containers and of the pod), a malformed container (ignored with a warning)."""
    share = _busy_pod("share", containers=2, annotations={"iro-fed.io/gpu-milli": "300", "iro-fed.io/gpu-cards": "1"})
    share["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    cards = _pod("cards", gpus=1)
    init = _busy_pod("init", containers=1)
    init["spec"]["initContainers"].append(dict(_busy_container(7), name="setup", resources={"requests": {"cpu": "3"}}))
    init["spec"]["overhead"] = {"cpu": "250m", "memory": "64Mi"}
    level = _busy_pod("level", containers=2)
    level["spec"]["resources"] = {"requests": {"cpu": "700m"}, "limits": {"memory": "1Gi"}}
    level["status"] = {"phase": "Running", "resources": {"requests": {"cpu": "900m"}}, "allocatedResources": {"cpu": "800m"}}
    resized = _busy_pod("resized", containers=2)
    resized["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c0", "image": "x", "allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "1500m"}}}],
        "conditions": [{"type": "Ready", "status": "True"},
                       {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]}
    bad = _busy_pod("bad", containers=1)
    bad["spec"]["containers"].append("not a container")
    return [share, cards, init, level, resized, bad]


def test_the_trimmed_pod_is_counted_exactly_as_the_whole_one():
    from iro_fed.k8s.snapshot import apply_usage, usage_view

    node = {"name": "n1", "gpus": 2, "capacity": {"cpu": 64.0, "memory": 262144.0}}
    res = ("cpu", "memory")
    whole_doc, trimmed_doc = dict(node), dict(node)
    whole_warn: list[str] = []
    trimmed_warn: list[str] = []
    pods = _usage_pods()
    whole = apply_usage(whole_doc, pods, res, whole_warn)
    trimmed = apply_usage(trimmed_doc, [usage_view(p) for p in pods], res, trimmed_warn)
    assert whole == trimmed and whole_doc == trimmed_doc and whole_warn == trimmed_warn
    assert whole_warn and whole_doc["gpu_free_milli"] == [0, 700]  # the accounting did read the parts
    for p in pods:
        assert apply_usage(dict(node), [p], res, []) == apply_usage(dict(node), [usage_view(p)], res, [])
