"""Pod -> workload conversion (quantities themselves: tests/k8s/test_quantity.py)."""

from __future__ import annotations

import pytest

from edge_agent.workload import BadRequest, pod_to_workload, request_to_workload


def test_pod_requests_sum_containers_max_init_and_default_from_limits():
    pod = {
        "metadata": {"name": "api", "namespace": "shop",
                     "annotations": {"iro-fed.io/user-region": "users-eu", "iro-fed.io/max-latency-ms": "25",
                                     "iro-fed.io/class": "online", "iro-fed.io/gpu-milli": "250",
                                     "iro-fed.io/gpu-models": "T4, A10"}},
        "spec": {
            "containers": [
                {"name": "c0", "resources": {"requests": {"cpu": "250m", "memory": "256Mi", "nvidia.com/gpu": "1"}}},
                {"name": "c1", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "c2", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
            "overhead": {"cpu": "100m"},
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
            "priority": 100,
        },
    }
    wl = pod_to_workload(pod, ("cpu", "memory"))
    assert wl["name"] == "shop/api"
    assert wl["requests"] == {"cpu": 2100.0, "memory": 1280.0}  # max(1250, 2000) + 100 overhead; 256 + 1024
    assert wl["gpu"] == {"count": 1, "milli": 250, "models": ["T4", "A10"]}
    assert wl["node_selector"] == {"disk": "ssd"} and wl["priority"] == 100
    assert wl["user_region"] == "users-eu" and wl["max_latency_ms"] == 25.0 and wl["class"] == "online"
    assert wl["tolerations"][0]["key"] == "dedicated"


def test_sidecars_and_rounding_follow_kubernetes():
    pod = {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c3", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "initContainers": [
            {"name": "c4", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},  # sidecar
            {"name": "c5", "resources": {"requests": {"cpu": "3", "memory": "100Mi"}}},  # runs next to the sidecar only
        ]}}
    # max(1 + 0.5, 0.5 + 3) cpu = 3.5; max(1024 + 512, 512 + 100) MiB = 1536
    assert pod_to_workload(pod, ("cpu", "memory"))["requests"] == {"cpu": 3500.0, "memory": 1536.0}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c6", "resources": {"requests": {"cpu": "0.0001", "memory": "1"}}}]}}
    # Kubernetes' MilliValue rounds 0.1m up to 1m; memory is whole bytes
    assert pod_to_workload(pod, ("cpu", "memory"))["requests"] == {"cpu": 1.0, "memory": 1 / 2**20}


def test_recommend_and_the_snapshot_read_the_same_pod_the_same_way():
    # Sidecars, an init container larger than the app, and overhead on every resource (GPU too):
    # /recommend and the cluster snapshot share kube's PodRequests formula.
    from iro_fed.k8s.snapshot import pod_demand

    pod = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {
        "containers": [{"name": "c7", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}},
                       {"name": "c8", "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}}}],
        "initContainers": [
            {"name": "c9", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
            {"name": "c10", "resources": {"requests": {"cpu": "4", "memory": "64Mi", "nvidia.com/gpu": "2"}}},
            {"name": "c11", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}},
        ],
        "overhead": {"cpu": "50m", "memory": "16Mi", "nvidia.com/gpu": "1"}}}
    wl = pod_to_workload(pod, ("cpu", "memory"))
    demand = pod_demand(pod, ("cpu", "memory"))
    # cpu: max(1 + 0.25 + 0.5 + 0.1, 0.5 + 4) + 0.05; memory: max(1024 + 128 + 512 + 32, 512 + 64) + 16 MiB
    assert wl["requests"] == demand.requests == {"cpu": 4550.0, "memory": 1712.0}
    # gpus: max(1, 2) + 1 overhead
    assert wl["gpu"]["count"] == demand.gpu_count == 3


def test_request_forms():
    wl, kind = request_to_workload({"pod": {"metadata": {"generateName": "job-"}, "spec": {"containers": [{"name": "app"}]}}},
                                   ("cpu",))
    assert kind == "pod" and wl["name"] == "default/job-" and wl["requests"] == {"cpu": 0.0}
    wl, kind = request_to_workload({"workload": {"name": "w"}, "k": 2}, ("cpu",))
    assert kind == "workload" and wl == {"name": "w"}
    wl, kind = request_to_workload({"name": "w", "k": 2}, ("cpu",))
    assert kind == "workload" and wl == {"name": "w"}
    with pytest.raises(BadRequest, match="pod.spec.containers\\[0\\].resources.requests.memory"):
        pod_to_workload({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c12", "resources": {"requests": {"memory": "lots"}}}]}},
                        ("cpu", "memory"))
    with pytest.raises(BadRequest, match="requests.nvidia.com/gpu: invalid quantity '500m': must be a whole number"):
        pod_to_workload({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c13", "resources": {"requests": {"nvidia.com/gpu": "500m"}}}]}},
                        ("cpu",))


RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods", "example.com/fpga")


def test_edge_agent_and_snapshot_read_the_same_requests_in_the_same_units():
    # One reader (iro_fed.k8s.snapshot.pod_requests) for both. Before, the agent read
    # ephemeral-storage in bytes (the snapshot: MiB), left out pods=1 and took a fractional
    # extended resource the snapshot rejects.
    from edge_agent.recommend import Recommender
    from iro_fed.k8s.snapshot import ClusterConfig, build_snapshot, pod_demand
    from iro_fed.k8s.testing import make_node

    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {
        "containers": [
            {"name": "c14", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi", "nvidia.com/gpu": "1",
                                        "example.com/fpga": "1"}}},
            {"name": "c15", "resources": {"limits": {"cpu": "250m", "memory": "128Mi", "ephemeral-storage": "500M"}}}],
        "initContainers": [
            {"name": "c16", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}}},
            {"name": "c17", "resources": {"requests": {"cpu": "4", "memory": "64Mi", "ephemeral-storage": "10Gi", "nvidia.com/gpu": "2",
                                        "example.com/fpga": "3"}}},
            {"name": "c18", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "32Mi", "example.com/fpga": "1"}}},
        ],
        "overhead": {"cpu": "50m", "memory": "16Mi", "ephemeral-storage": "1Mi"}}}
    expected = {
        "cpu": 4550.0,                # max(1000 + 250 + 500 + 100, 500 + 4000) + 50
        "memory": 1712.0,             # max(1024 + 128 + 512 + 32, 512 + 64) + 16 MiB
        "ephemeral-storage": 11265.0,  # max(2048 + 500e6 B + 1024, 1024 + 10240) + 1 MiB
        "pods": 1.0,                  # the pod itself
        "example.com/fpga": 3.0,      # max(1 + sidecar 1, 3 next to the first sidecar)
    }
    wl = pod_to_workload(pod, RESOURCES)
    assert wl["requests"] == pod_demand(pod, RESOURCES).requests == expected
    assert wl["gpu"]["count"] == pod_demand(pod, RESOURCES).gpu_count == 2  # max(1, 2) whole cards

    # And end to end: the agent's one-workload problem on the snapshot's own cluster has the
    # snapshot's demand row.
    node = make_node("n1", cpu="64", memory="256Gi", gpus=4)
    node["status"]["allocatable"].update({"ephemeral-storage": "100Gi", "example.com/fpga": "4"})
    snap = build_snapshot([node], [], [pod], ClusterConfig.from_dict({"resources": list(RESOURCES)}))
    rec = Recommender(snap.problem)
    workload, kind, _ = rec.parse(pod)
    problem = rec.join(workload, snap.problem, kind)
    assert problem.demand.tolist() == snap.problem.demand.tolist() == [[expected[r] for r in RESOURCES]]
    assert problem.wl_gpu_count.tolist() == snap.problem.wl_gpu_count.tolist() == [2]


@pytest.mark.parametrize(
    ("requests", "field", "message"),
    [
        ({"example.com/fpga": "500m"}, "requests.example.com/fpga", "must be a whole number"),
        ({"ephemeral-storage": "-1Gi"}, "requests.ephemeral-storage", "must not be negative"),
        ({"cpu": [1]}, "requests.cpu", "expected a string like '500m' or '1Gi', got list"),
    ],
)
def test_pod_errors_come_from_the_shared_reader_with_the_pod_path(requests, field, message):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c20", "resources": {"requests": requests}}]}}
    with pytest.raises(BadRequest) as info:
        pod_to_workload(pod, RESOURCES)
    assert info.value.field == f"pod.spec.containers[0].resources.{field}"
    assert str(info.value).startswith(f"pod.spec.containers[0].resources.{field}: invalid quantity")
    assert message in str(info.value)


def test_blank_scalar_annotations_read_as_absent_as_the_scheduler_reads_them():
    # Before: a class or user region of " " went to the model (refused as unknown), and a blank
    # max-latency-ms was "cannot read"; the scheduler's annotation_value reads them as absent.
    pod = {"metadata": {"name": "p", "annotations": {"iro-fed.io/class": " ", "iro-fed.io/user-region": "\t",
                                                     "iro-fed.io/max-latency-ms": "  "}},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    wl = pod_to_workload(pod, ("cpu",))
    assert not {"class", "user_region", "max_latency_ms"} & set(wl)
    pod["metadata"]["annotations"] = {"iro-fed.io/class": " batch ", "iro-fed.io/user-region": "users ",
                                      "iro-fed.io/max-latency-ms": " 12 "}
    wl = pod_to_workload(pod, ("cpu",))
    assert (wl["class"], wl["user_region"], wl["max_latency_ms"]) == ("batch", "users", 12.0)
