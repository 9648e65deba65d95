"""The cluster cache keeps each bound pod and node trimmed to what is read of it (BOUND_POD_FIELDS,
NODE_FIELDS): the model, the pod-reading plugins, the solver's ranking and the scheduler's change
hints are the same as on the whole objects, for pods using every feature the model reads.
The cache used to keep the whole API objects (managedFields, container statuses, env, volumes,
every annotation): about 36 MB per 1,000 bound pods."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import numpy as np
import pytest

pytest.importorskip("kubernetes")

import solvers  # noqa: E402
from iro_fed.k8s import scheduler as sched_mod  # noqa: E402
from iro_fed.k8s.client import BOUND_POD_FIELDS, NODE_FIELDS, ClusterCache, Reflector, trim_object  # noqa: E402
from iro_fed.k8s.snapshot import ClusterModel, PlacedPods, bound_view  # noqa: E402
from iro_fed.k8s.testing import make_node  # noqa: E402
from iro_fed.model import ClusterState  # noqa: E402
from iro_fed.problem_io import problem_to_dict  # noqa: E402
from tests.k8s.test_hard5_parse_budget import kubelet_node  # noqa: E402

TS = "2024-05-01T10:00:00Z"
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def _container(name: str, cpu: str, memory: str, ports: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """A container as a Deployment's pod has it: image, env, mounts, probes, security context."""
    c: dict[str, Any] = {
        "name": name, "image": f"us-docker.pkg.dev/prod/team/{name}:v1.2.3", "imagePullPolicy": "IfNotPresent",
        "args": ["--port=8080", "--log-level=info"],
        "env": [{"name": f"ENV_{k}", "value": f"value-{k}-" + "x" * 20} for k in range(12)]
        + [{"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                         {"name": "config", "mountPath": "/etc/config"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                          "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                           "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True, "runAsNonRoot": True},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}] + list(ports or []),
    }
    c.update(extra)
    return c


def _status_of(c: dict[str, Any], node_ip: str) -> dict[str, Any]:
    return {"name": c["name"], "image": c["image"], "imageID": c["image"] + "@sha256:" + "a" * 64,
            "containerID": "containerd://" + "b" * 64, "ready": True, "restartCount": 0, "started": True,
            "state": {"running": {"startedAt": TS}}, "lastState": {},
            "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets", "readOnly": True,
                              "recursiveReadOnly": "Disabled"}],
            "allocatedResources": dict(c["resources"].get("requests", {})), "resources": copy.deepcopy(c["resources"])}


def real_pod(name: str, node: str, app: str, cpu: str = "250m", memory: str = "256Mi", *, ns: str = "shop",
             ports: list[dict[str, Any]] | None = None, spec: dict[str, Any] | None = None,
             annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
             containers: list[dict[str, Any]] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A bound v1.Pod of a Deployment as the API server sends it: managedFields, ownerReferences,
    annotations, env, volumes, probes, tolerations, conditions and container statuses (~7 KB)."""
    containers = containers or [_container(app, cpu, memory, ports)]
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{ns}/{name}"))
    pod_labels = {"app": app, "pod-template-hash": "5d8f7c9b6d", "app.kubernetes.io/name": app,
                  "app.kubernetes.io/part-of": "shop", **(labels or {})}
    managed = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": TS,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {f"f:{k}": {} for k in pod_labels},
                                                               "f:ownerReferences": {".": {}, f'k:{{"uid":"{uid}"}}': {}}},
                                                  "f:spec": {"f:containers": {f'k:{{"name":"{c["name"]}"}}': {
                                                      f"f:{k}": {} for k in c} for c in containers}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": TS, "fieldsType": "FieldsV1",
         "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {f'k:{{"type":"{t}"}}': {
             ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
             for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")},
             "f:containerStatuses": {}, "f:hostIP": {}, "f:podIP": {}, "f:startTime": {}}}},
    ]
    pod_spec: dict[str, Any] = {
        "containers": containers, "nodeName": node, "schedulerName": "default-scheduler", "priority": 0,
        "serviceAccountName": "default", "serviceAccount": "default", "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority", "securityContext": {"fsGroup": 2000},
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                         "fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}}],
        **(spec or {}),
    }
    node_ip = "10.128.0.7"
    pod_status: dict[str, Any] = {
        "phase": "Running", "qosClass": "Burstable", "hostIP": node_ip, "hostIPs": [{"ip": node_ip}],
        "podIP": "10.8.0.12", "podIPs": [{"ip": "10.8.0.12"}], "startTime": TS,
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": TS}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [_status_of(c, node_ip) for c in containers],
        **(status or {}),
    }
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": f"{app}-5d8f7c9b6d-", "namespace": ns, "uid": uid,
            "resourceVersion": str(1000 + len(name)), "creationTimestamp": TS, "labels": pod_labels,
            "annotations": {"kubectl.kubernetes.io/restartedAt": TS, "prometheus.io/scrape": "true",
                            "prometheus.io/port": "8080", "cni.projectcalico.org/podIP": "10.8.0.12/32",
                            **(annotations or {})},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-5d8f7c9b6d",
                                 "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, app)), "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": managed,
        },
        "spec": pod_spec, "status": pod_status,
    }


def _gpu(c: dict[str, Any], cards: int) -> dict[str, Any]:
    c["resources"]["requests"]["nvidia.com/gpu"] = c["resources"]["limits"]["nvidia.com/gpu"] = str(cards)
    return c


def _anti(app: str, key: str = HOST) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def _gpu_node() -> dict[str, Any]:
    node = make_node("gpu-1", "32", "128Gi", zone="us-central1-a", gpus=4, gpu_model="NVIDIA-A100")
    real = kubelet_node(99)
    node["metadata"].update(uid="gpu-uid", resourceVersion="777", managedFields=real["metadata"]["managedFields"])
    node["status"].update(images=real["status"]["images"], nodeInfo=real["status"]["nodeInfo"])
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return node


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes (kubelet-reported, one cordoned, one tainted GPU node) and bound pods using every
    feature the model reads of a bound pod, and the scheduling fields it does not."""
    nodes = [kubelet_node(i) for i in range(4)] + [_gpu_node()]
    nodes[3]["spec"]["unschedulable"] = True
    n = [x["metadata"]["name"] for x in nodes]
    gpu_tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pods = [
        # Required anti-affinity (read of bound pods), preferred affinity, a host port.
        real_pod("web-0", n[0], "web", "1", "1Gi", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
                 spec={"affinity": {**_anti("web"), "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}},
                                                        "topologyKey": ZONE}}]}}}),
        # A regular init container bigger than the app, a sidecar with a host port, overhead, node
        # selector and required node affinity, a spread constraint, tolerations, a priority.
        real_pod("batch-0", n[1], "batch", "500m", "512Mi", containers=[_container("batch", "500m", "512Mi")],
                 spec={"initContainers": [_container("migrate", "3", "2Gi"),
                                          _container("proxy", "100m", "128Mi", restartPolicy="Always",
                                                     ports=[{"containerPort": 15001, "hostPort": 9090, "protocol": "TCP"}])],
                       "overhead": {"cpu": "250m", "memory": "120Mi"}, "nodeSelector": {"kubernetes.io/os": "linux"},
                       "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                           {"matchExpressions": [{"key": ZONE, "operator": "Exists"}]}]}}},
                       "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "batch"}}}],
                       "priority": 1000, "priorityClassName": "high"}),
        # GPU pods: a share of one card on the card it holds, two whole cards.
        real_pod("infer-0", n[4], "infer", containers=[_gpu(_container("infer", "2", "8Gi"), 1)],
                 annotations={"iro-fed.io/gpu-milli": "500", "iro-fed.io/gpu-cards": "2"},
                 spec={"tolerations": gpu_tol, "schedulerName": "iro"}),
        real_pod("train-0", n[4], "train", containers=[_gpu(_container("train", "4", "16Gi"), 2)], annotations={"iro-fed.io/gpu-cards": "0,1"},
                 spec={"tolerations": gpu_tol, "schedulerName": "iro"}),
        # Terminating, with anti-affinity against "cache" pods (zone-wide).
        real_pod("old-0", n[2], "old", "1", "1Gi", spec={"affinity": _anti("cache", ZONE)}),
        # Finished: counts nothing.
        real_pod("job-0", n[2], "job", "8", "8Gi", status={"phase": "Succeeded"}),
        # In-place resize: allocated more than the spec asks, the resize pending (infeasible);
        # pod-level resources.
        real_pod("resize-0", n[1], "resize", "500m", "1Gi",
                 spec={"resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "4"}}},
                 status={"resize": "Infeasible",
                         "resources": {"requests": {"cpu": "3"}}, "allocatedResources": {"cpu": "3"},
                         "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                         "lastTransitionTime": TS},
                                        {"type": "Ready", "status": "True", "lastTransitionTime": TS}]}),
        # A best-effort pod (no requests: non-zero defaults), and "db" replicas across zones.
        real_pod("idle-0", n[0], "idle", containers=[dict(_container("idle", "1m", "1Mi"), resources={})]),
    ]
    pods[4]["metadata"]["deletionTimestamp"] = TS
    pods[6]["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "1500m", "memory": "1Gi"}
    pods += [real_pod(f"db-{k}", n[k % 3], "db", "750m", "3Gi", ns="data") for k in range(5)]
    return nodes, pods


def pending() -> list[dict[str, Any]]:
    """Pending pods that each read the bound pods another way (and one GPU pod)."""
    def p(name: str, app: str, **spec: Any) -> dict[str, Any]:
        pod = real_pod(name, "", app, "500m", "512Mi", ns=spec.pop("ns", "shop"), spec=spec.pop("spec", {}),
                       ports=spec.pop("ports", None), annotations=spec.pop("annotations", None))
        del pod["spec"]["nodeName"], pod["status"]["containerStatuses"]
        pod["status"] = {"phase": "Pending"}
        return pod

    return [
        p("web-1", "web", spec={"affinity": _anti("web")}),
        p("near-db", "near", spec={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaces": ["data"], "topologyKey": ZONE}]}}}),
        p("db-9", "db", ns="data", spec={"topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "db"}}}]}),
        p("port-a", "porta", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]),
        p("port-b", "portb", ports=[{"containerPort": 80, "hostPort": 9090, "protocol": "TCP"}]),
        p("cache-0", "cache"),
        p("gpu-share", "gpu", annotations={"iro-fed.io/gpu-milli": "600"},
          spec={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
    ]


def _same_problem(a: Any, b: Any) -> None:
    assert problem_to_dict(a) == problem_to_dict(b)
    assert vars(a).keys() == vars(b).keys()
    for name, x in vars(a).items():  # the arrays too: nonzero_demand, initial_nonzero, gpu_free...
        y = getattr(b, name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
        elif x is None or isinstance(x, (tuple, dict, str, int, float)):
            assert x == y, name


def _trimmed(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    return [trim_object(x, NODE_FIELDS) for x in nodes], [trim_object(p, BOUND_POD_FIELDS) for p in pods]


def test_trimmed_objects_give_the_same_model_snapshots_conflicts_and_ranking() -> None:
    nodes, pods = cluster()
    t_nodes, t_pods = _trimmed(copy.deepcopy(nodes), copy.deepcopy(pods))
    assert len(json.dumps(t_pods)) < len(json.dumps(pods)) / 5  # most of a pod is what nothing reads
    whole, trimmed = ClusterModel(nodes, pods), ClusterModel(t_nodes, t_pods)
    _same_problem(whole.problem, trimmed.problem)
    assert whole.warnings == trimmed.warnings
    assert whole.node_docs == trimmed.node_docs
    # The features are in play: usage counted, the finished pod left out, the resize counted.
    cpu = {d["name"]: d["allocated"]["cpu"] for d in whole.node_docs}
    assert cpu[nodes[2]["metadata"]["name"]] > 0 and whole.node_docs[4]["gpu_free_milli"] == [0, 0, 500, 1000]
    names = [x["metadata"]["name"] for x in nodes]
    ranker = solvers.make("greedy-objective")
    for pod in pending():
        s_whole, s_trim = whole.with_pods([pod]), trimmed.with_pods([pod])
        _same_problem(s_whole.problem, s_trim.problem)
        conflicts = [whole.placement_conflict(pod, n, PlacedPods()) for n in names]
        assert conflicts == [trimmed.placement_conflict(pod, n, PlacedPods()) for n in names]
        ranks = [ranker.rank(ClusterState(s.problem), 0, k=5) for s in (s_whole, s_trim)]
        assert ranks[0] == ranks[1], pod["metadata"]["name"]
    # Each pod-reading plugin excludes some node here (a test that compares nothing proves nothing).
    reasons = {whole.placement_conflict(p, n, PlacedPods()) for p in pending() for n in names}
    assert len(reasons - {None}) >= 3, reasons
    # The scheduler's pending-pods batch model (widened resources, rules cache) too.
    batch = pending()
    _same_problem(ClusterModel(nodes, pods, pending=batch, rules_cache={}).with_pods(batch).problem,
                  ClusterModel(t_nodes, t_pods, pending=batch, rules_cache={}).with_pods(batch).problem)


def test_trim_keeps_what_bound_view_keeps_and_the_reflector_needs() -> None:
    """The snapshot's own reduced bound pod (the extender's assumed pods) is a subset of the trimmed one."""
    _, pods = cluster()

    def paths(doc: Any, at: str = "") -> set[str]:
        if isinstance(doc, dict):
            return {at} | {q for k, v in doc.items() if v is not None for q in paths(v, f"{at}.{k}")}
        if isinstance(doc, list):
            return {at} | {q for v in doc for q in paths(v, f"{at}[]")}
        return {at}

    for pod in pods:
        kept = trim_object(pod, BOUND_POD_FIELDS)
        assert paths(bound_view(pod)) <= paths(kept)
        assert kept["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
        assert Reflector.key(kept) == Reflector.key(pod)


def test_scheduler_change_hints_are_the_same_on_trimmed_pods() -> None:
    """_frees_room / _adds_a_pod / _node_fields judge the trimmed versions as the whole ones."""
    nodes, pods = cluster()
    res = ("cpu", "memory")
    changes = []
    for pod in pods:
        shrunk = copy.deepcopy(pod)
        shrunk["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1m"}
        relabelled = copy.deepcopy(pod)
        relabelled["metadata"]["labels"]["tier"] = "x"
        done = copy.deepcopy(pod)
        done["status"]["phase"] = "Failed"
        churn = copy.deepcopy(pod)
        churn["status"]["conditions"][0]["lastTransitionTime"] = "2024-06-01T00:00:00Z"
        churn["metadata"]["managedFields"][0]["time"] = "2024-06-01T00:00:00Z"
        changes += [(None, pod), (pod, None), (pod, shrunk), (pod, relabelled), (pod, done), (pod, churn)]
    for old, new in changes:
        t_old, t_new = (None if p is None else trim_object(p, BOUND_POD_FIELDS) for p in (old, new))
        assert sched_mod._frees_room(old, new, res) == sched_mod._frees_room(t_old, t_new, res)
        assert sched_mod._adds_a_pod(old, new) == sched_mod._adds_a_pod(t_old, t_new)
    for node in nodes:
        assert sched_mod._node_fields(node) == sched_mod._node_fields(trim_object(node, NODE_FIELDS))


def test_cache_stores_trimmed_pods_and_nodes_listed_and_watched(api, kube) -> None:
    """Fails on the old code: the cache held every pod and node whole."""
    nodes, pods = cluster()
    for node in nodes:
        api.add_node(node)
    for pod in pods[:6]:
        api.add_pod(pod)
    cache = ClusterCache(kube, refresh_s=0, watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10)
        for pod in pods[6:]:  # these arrive by the watch
            api.add_pod(pod)
        assert api.wait_for(lambda: len(cache.pods.items()) == len(pods))
        for obj in cache.pods.items():
            text = json.dumps(obj)
            assert "managedFields" not in obj["metadata"]
            # the controller reference stays (kube-default's system default spreading), trimmed
            assert all(set(ref) <= {"kind", "name", "uid", "controller"} for ref in obj["metadata"].get("ownerReferences", []))
            assert "env" not in text and "volumes" not in obj["spec"] and "image" not in text, text[:300]
            assert not any(k.startswith(("prometheus.io", "kubectl.")) for k in obj["metadata"].get("annotations", {}))
            assert all(set(cs) <= {"name", "allocatedResources", "resources"} for cs in obj["status"]["containerStatuses"])
            assert obj["metadata"]["resourceVersion"] and obj["metadata"]["uid"]
        for obj in cache.nodes.items():
            assert set(obj["status"]) <= {"allocatable", "capacity"} and "managedFields" not in obj["metadata"]
        # The model from the trimmed stores is the model of the whole objects.
        assert cache.wait_fresh(10)
        _same_problem(cache.model().problem, ClusterModel(api.list("nodes"), api.list("pods")).problem)
        # A watched update is trimmed too, and a relist that finds nothing changed changes nothing.
        pod = api.get("pods", "shop/web-0")
        pod["metadata"]["labels"]["tier"] = "front"
        api.update("pods", pod)
        assert api.wait_for(lambda: cache.pods.store["shop/web-0"]["metadata"]["labels"].get("tier") == "front")
        assert "managedFields" not in cache.pods.store["shop/web-0"]["metadata"]
    finally:
        cache.stop()


def test_whole_objects_where_asked(api, kube) -> None:
    """Trimming is opt-in per reflector: a plain Reflector (the scheduler's pending pods, which it
    patches, binds and compares whole) and ``ClusterCache(trim=False)`` keep the objects whole."""
    nodes, pods = cluster()
    api.add_node(nodes[0])
    api.add_pod(pods[0])
    cache = ClusterCache(kube, refresh_s=0, watch_timeout_s=5, trim=False).start()
    plain = Reflector(kube.core.list_pod_for_all_namespaces, "all-pods", watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10) and plain.synced.wait(10)
        assert "managedFields" in cache.pods.store["shop/web-0"]["metadata"]
        assert "images" in cache.nodes.items()[0]["status"]
        assert "managedFields" in plain.store["shop/web-0"]["metadata"]
    finally:
        cache.stop()
        plain.stop()
