"""The extender and the webhook refuse, before parsing, a body that would take more memory once
parsed than ``max_parse_memory`` (413 naming the limit), over real HTTP(S) on 127.0.0.1; a
NodeList-mode request of 5,000 realistic kubelet Nodes still passes.

The body limit and the body budget count body bytes, but ``[{},{},...]`` parses to ~24 times its
size: 24 MiB of it became ~600 MB of Python objects before the extender looked at it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import ssl
import uuid
from collections.abc import Iterator

import pytest

from iro_fed.k8s.extender import ExtenderServer
from iro_fed.k8s.testing import make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer
from tests.k8s.helpers import extender_server, serving, tls_files  # noqa: F401 (the ext and tls fixtures)


def kubelet_node(i: int) -> dict:
    """A v1.Node as a GKE kubelet reports it: 23 labels, 6 annotations, managedFields, 8
    conditions and its 50 largest images (kubelet's nodeStatusMaxImages): about 18 KB."""
    name = f"gke-prod-pool-{i // 1000:02d}-{hashlib.sha1(str(i).encode()).hexdigest()[:4]}-{i:05d}"
    zone = f"us-central1-{'abcf'[i % 4]}"
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "n2-standard-16",
        "beta.kubernetes.io/os": "linux", "cloud.google.com/gke-boot-disk": "pd-balanced",
        "cloud.google.com/gke-container-runtime": "containerd", "cloud.google.com/gke-cpu-scaling-level": "16",
        "cloud.google.com/gke-logging-variant": "DEFAULT", "cloud.google.com/gke-max-pods-per-node": "110",
        "cloud.google.com/gke-nodepool": f"pool-{i // 1000:02d}", "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-provisioning": "standard", "cloud.google.com/gke-stack-type": "IPV4",
        "cloud.google.com/machine-family": "n2", "cloud.google.com/private-node": "false",
        "failure-domain.beta.kubernetes.io/region": "us-central1", "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "n2-standard-16", "topology.gke.io/zone": zone,
        "topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": zone,
    }
    annotations = {
        "container.googleapis.com/instance_id": str(7000000000000000000 + i),
        "csi.volume.kubernetes.io/nodeid": json.dumps({"pd.csi.storage.gke.io": f"projects/prod/zones/{zone}/instances/{name}"}),
        "node.alpha.kubernetes.io/ttl": "0",
        "node.gke.io/last-applied-node-labels": ",".join(f"{k}={v}" for k, v in list(labels.items())[:14]),
        "node.gke.io/last-applied-node-taints": "",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    ts = "2024-05-01T10:00:00Z"
    managed = [
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": ts, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:container.googleapis.com/instance_id": {},
                                                         "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                                     "f:labels": {".": {}, **{f"f:{k}": {} for k in list(labels)[:12]}}},
                      "f:spec": {"f:providerID": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": ts,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                                                "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"10.8.0.0/24"': {}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": ts, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:status": {"f:allocatable": {"f:ephemeral-storage": {}, "f:memory": {}},
                                   "f:conditions": {f'k:{{"type":"{t}"}}': {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}
                                                    for t in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")},
                                   "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}}},
    ]
    conds = [
        {"type": t, "status": s, "lastHeartbeatTime": ts, "lastTransitionTime": ts, "reason": r, "message": m}
        for t, s, r, m in [
            ("FrequentUnregisterNetDevice", "False", "NoFrequentUnregisterNetDevice", "node is functioning properly"),
            ("FrequentKubeletRestart", "False", "NoFrequentKubeletRestart", "kubelet is functioning properly"),
            ("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
            ("NetworkUnavailable", "False", "RouteCreated", "NodeController create implicit route"),
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status. AppArmor enabled"),
        ]]
    images = []
    for k in range(50):  # kubelet's nodeStatusMaxImages default
        repo = f"us-docker.pkg.dev/prod-project/team-{k % 7}/service-{k:02d}"
        digest = hashlib.sha256(f"{i}-{k}".encode()).hexdigest()
        images.append({"names": [f"{repo}@sha256:{digest}", f"{repo}:v1.{k}.{i % 10}"], "sizeBytes": 50_000_000 + 1_234_567 * k})
    alloc = {"cpu": "15890m", "ephemeral-storage": "47060071478", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
             "memory": "58885872Ki", "pods": "110"}
    cap = {"cpu": "16", "ephemeral-storage": "98831908Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
           "memory": "65851632Ki", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": str(uuid.UUID(int=i + 1)), "resourceVersion": str(123456789 + i),
                     "creationTimestamp": ts, "labels": labels, "annotations": annotations, "managedFields": managed},
        "spec": {"podCIDR": f"10.{8 + i // 65536}.{(i // 256) % 256}.0/24", "podCIDRs": [f"10.8.{i % 256}.0/24"],
                 "providerID": f"gce://prod/{zone}/{name}"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": f"10.128.{i // 256 % 256}.{i % 256}"},
                          {"type": "ExternalIP", "address": f"34.{i % 200}.{i // 200 % 256}.7"},
                          {"type": "Hostname", "address": name}],
            "allocatable": alloc, "capacity": cap, "conditions": conds,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.UUID(int=10**12 + i)),
                         "containerRuntimeVersion": "containerd://1.7.13", "kernelVersion": "6.1.75+",
                         "kubeProxyVersion": "v1.29.4-gke.1043002", "kubeletVersion": "v1.29.4-gke.1043002",
                         "machineID": hashlib.md5(str(i).encode()).hexdigest(), "operatingSystem": "linux",
                         "osImage": "Container-Optimized OS from Google", "systemUUID": str(uuid.UUID(int=10**15 + i))},
        },
    }


def node_list_args(n: int) -> bytes:
    return json.dumps({"Pod": make_pod("p", cpu="500m"), "NodeNames": None,
                       "Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"},
                                 "items": [kubelet_node(i) for i in range(n)]}}).encode()


def vm(key: str) -> int:
    """``key`` (VmRSS, VmHWM) of this process in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{key} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: clear_refs 5); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def post_json(port: int, path: str, body: bytes, context: ssl.SSLContext | None = None,
              timeout: float = 120) -> tuple[int, dict[str, str], dict]:
    """POST ``body`` to ``path`` over HTTP on 127.0.0.1, or HTTPS on localhost with ``context``:
    (status, headers by lowercase name, reply)."""
    if context is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection("localhost", port, timeout=timeout, context=context)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def raw_post(port: int, path: str, body: bytes, context: ssl.SSLContext | None = None) -> tuple[int, dict]:
    status, _, reply = post_json(port, path, body, context)
    return status, reply


@pytest.fixture
def serve_webhook(tls) -> Iterator:
    yield from serving(lambda: WebhookServer(Webhook(), tls[0], tls[1], "127.0.0.1", 0))


def test_hostile_body_is_refused_unparsed_without_the_memory(ext: ExtenderServer) -> None:
    # 24 MiB of empty objects in an ExtenderArgs: 16.8 M values, ~600 MB once parsed.
    count = 8 << 20
    body = b'{"Pod":{},"Nodes":{"items":[' + b",".join([b"{}"] * count) + b"]}}"
    peak = reset_peak_rss()
    before = vm("VmRSS")
    status, reply = raw_post(ext.server_address[1], "/iro/filter", body)
    grown = vm("VmHWM" if peak else "VmRSS") - before
    # The body is read (24 MiB, joined once more) but never parsed.
    assert grown < 200 * 1024 * 1024, f"RSS grew {grown >> 20} MiB serving {status}: {reply}"
    assert status == 413, reply
    assert reply["field"] == "body"
    assert f"over the limit of {ext.max_parse_memory} bytes" in reply["Error"]
    assert ext.extender.stats_snapshot()["bad_requests"] == 1


def test_nodelist_of_5000_kubelet_nodes_still_passes(ext: ExtenderServer) -> None:
    from iro_fed.k8s.httpjson import parse_estimate

    body = node_list_args(5000)
    values, need = parse_estimate(body)
    assert 2_500_000 < values < 3_000_000 and need < ext.max_parse_memory  # the reckoning the default was sized on
    status, reply = raw_post(ext.server_address[1], "/iro/filter", body)
    assert status == 200, reply
    assert reply.get("Error") in (None, "")
    assert len(reply["Nodes"]["items"]) == 5000  # 500m fits on every node


def test_webhook_refuses_a_hostile_review_unparsed(serve_webhook, tls) -> None:
    srv = serve_webhook()
    # Under the webhook's 8 MiB body limit: ~170 MB once parsed, for any caller that reaches the Service.
    body = b"[" + b",".join([b"{}"] * (2_500_000)) + b"]"
    status, reply = raw_post(srv.server_address[1], "/mutate", body, ssl.create_default_context(cafile=tls[0]))
    assert status == 413, reply
    assert reply["field"] == "body"
    assert f"over the limit of {srv.max_parse_memory} bytes" in reply["message"]


def test_parse_estimate_bounds_the_values() -> None:
    from iro_fed.k8s.httpjson import parse_estimate  # here: the old module had none (see the server tests)

    assert parse_estimate(b"{}", 100) == (2, 200)  # the "+ 1" is for a top-level scalar
    assert parse_estimate(b'{"a":[1,2,{"b":"x,y"}]}', 10) == (7, 70)  # the "," in a string counts: an upper bound
    assert parse_estimate(b"[" + b",".join([b"{}"] * 1000) + b"]", 1)[0] == 2001
