"""deploy/: the kustomize base and overlays render with kubectl and every object validates.

They render with whatever ``kubectl`` is on PATH: Debian 12's ``kubernetes-client`` (kubectl 1.20,
kustomize v2.0.3, installed by .ci/run) and current kubectl (kustomize v5) give the same objects.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The opt-in overlays (webhook-affinity, edge-hostnetwork, the network policies) render and validate like the others.
TARGETS = ["deploy/base", "deploy/overlays/edge", "deploy/overlays/cloud", "deploy/overlays/webhook-affinity",
           "deploy/overlays/edge-hostnetwork", "deploy/overlays/webhook-network-policy",
           "deploy/overlays/fed-server-network-policy", "deploy/overlays/edge-agent-network-policy"]
KUSTOMIZATIONS = ["deploy", "deploy/base", *TARGETS[1:], "deploy/prometheus"]
# The Kubernetes minor the manifests target (the kube-scheduler image's); validated against it and the newest
# schema kubernetes-validate ships.
TARGET_K8S = "1.32.0"
IMAGE = "ghcr.io/iro-fed/iro-fed:0.1.0"
PART_OF = {"app.kubernetes.io/part-of": "iro-fed"}
# Fields kustomize v2.0.3 (kubectl 1.20) knows; newer ones (labels, patches, ...) fail there with "unknown field".
KUSTOMIZE_V2_FIELDS = {"apiVersion", "kind", "resources", "bases", "patchesStrategicMerge", "patchesJson6902",
                       "configMapGenerator", "secretGenerator", "generatorOptions", "images", "commonLabels",
                       "commonAnnotations", "namePrefix", "nameSuffix", "namespace", "vars", "crds"}
# Deprecation notes current kustomize prints on stderr for the v2-compatible fields; anything else fails.
DEPRECATION = re.compile(r"^# Warning: '(bases|patchesStrategicMerge|patchesJson6902)' is deprecated\.")
HASHED = re.compile(r"^(?P<name>.+)-[a-z0-9]{10}$")  # configMapGenerator's name suffix

BASE_OBJECTS = {
    ("Namespace", "", "iro-system"),
    ("ServiceAccount", "iro-system", "iro-scheduler"),
    ("ClusterRole", "", "iro-scheduler"),
    ("ClusterRoleBinding", "", "iro-scheduler"),
    ("Role", "iro-system", "iro-scheduler-leases"),
    ("RoleBinding", "iro-system", "iro-scheduler-leases"),
    ("Deployment", "iro-system", "iro-scheduler"),
    ("ServiceAccount", "iro-system", "iro-kube-scheduler"),
    ("ClusterRoleBinding", "", "iro-kube-scheduler-as-kube-scheduler"),
    ("ClusterRoleBinding", "", "iro-kube-scheduler-as-volume-scheduler"),
    ("RoleBinding", "kube-system", "iro-kube-scheduler-auth-reader"),
    ("Role", "iro-system", "iro-kube-scheduler-leases"),
    ("RoleBinding", "iro-system", "iro-kube-scheduler-leases"),
    ("Deployment", "iro-system", "iro-kube-scheduler"),
    ("ServiceAccount", "iro-system", "iro-webhook"),
    ("Deployment", "iro-system", "iro-webhook"),
    ("Service", "iro-system", "iro-webhook"),
    ("MutatingWebhookConfiguration", "", "iro-webhook"),
    ("ServiceAccount", "iro-system", "iro-edge-agent"),
    ("DaemonSet", "iro-system", "iro-edge-agent"),
    ("ServiceAccount", "iro-system", "iro-fed-server"),
    ("Deployment", "iro-system", "iro-fed-server"),
    ("Service", "iro-system", "iro-fed-server"),
    ("NetworkPolicy", "iro-system", "iro-fed-server"),
    ("ConfigMap", "iro-system", "iro-kube-scheduler-config"),
    ("ConfigMap", "iro-system", "iro-cluster-config"),
    ("ConfigMap", "iro-system", "iro-edge-agent"),
    ("ConfigMap", "iro-system", "iro-prometheus-rules"),
}
FED_SERVER = {("ServiceAccount", "iro-system", "iro-fed-server"), ("Deployment", "iro-system", "iro-fed-server"),
              ("Service", "iro-system", "iro-fed-server"), ("NetworkPolicy", "iro-system", "iro-fed-server")}
EXPECTED_OBJECTS = {
    "deploy/base": BASE_OBJECTS,
    "deploy/overlays/edge": BASE_OBJECTS - FED_SERVER,
    "deploy/overlays/cloud": BASE_OBJECTS | {("PodDisruptionBudget", "iro-system", "iro-webhook"),
                                             ("PodDisruptionBudget", "iro-system", "iro-scheduler")},
    "deploy/overlays/webhook-affinity": BASE_OBJECTS | {("ClusterRole", "", "iro-webhook-affinity"),
                                                        ("ClusterRoleBinding", "", "iro-webhook-affinity")},
    "deploy/overlays/edge-hostnetwork": BASE_OBJECTS,
    "deploy/overlays/webhook-network-policy": BASE_OBJECTS | {("NetworkPolicy", "iro-system", "iro-webhook")},
    "deploy/overlays/fed-server-network-policy": BASE_OBJECTS | {("NetworkPolicy", "iro-system", "iro-fed-server-external")},
    "deploy/overlays/edge-agent-network-policy": BASE_OBJECTS | {("NetworkPolicy", "iro-system", "iro-edge-agent")},
}
WINDOW = {"deploy/base": "--window-s=1", "deploy/overlays/edge": "--window-s=0.2", "deploy/overlays/cloud": "--window-s=2",
          "deploy/overlays/webhook-affinity": "--window-s=1", "deploy/overlays/edge-hostnetwork": "--window-s=1",
          "deploy/overlays/webhook-network-policy": "--window-s=1", "deploy/overlays/fed-server-network-policy": "--window-s=1",
          "deploy/overlays/edge-agent-network-policy": "--window-s=1"}
# Objects an overlay changes (same key as the base's, other content): counted once more among the distinct objects.
CHANGED = {"deploy/overlays/edge": {"DaemonSet/iro-edge-agent", "Deployment/iro-scheduler"},
           "deploy/overlays/cloud": {"DaemonSet/iro-edge-agent", "Deployment/iro-scheduler"},
           "deploy/overlays/webhook-affinity": {"Deployment/iro-webhook"},
           "deploy/overlays/edge-hostnetwork": {"DaemonSet/iro-edge-agent"}}

# --- RBAC: what the code calls ------------------------------------------------------------------
# Every Kubernetes API call of `iro scheduler`, by the Python client's method name (found by
# `grep -rn "\.core\.\|coordination\|CustomObjectsApi\|_namespaced_" iro_fed/k8s` and in the client's
# LeaseLock, which leader.py subclasses), with the (apiGroup, resource, verbs) the API server
# authorizes it as. test_scheduler_api_calls_are_the_table keeps this table equal to the code;
# test_scheduler_rbac_grants_exactly_the_table keeps the manifests equal to this table.
SCHEDULER_CALLS = {
    # client.py: Kube.list_nodes; ClusterCache's Reflector(kube.core.list_node) lists, then watches.
    "list_node": ("", "nodes", {"list", "watch"}),
    # client.py: Kube.list_pods; ClusterCache's bound-pods Reflector; scheduler.py: the pending-pods
    # Reflector(kube.core.list_pod_for_all_namespaces) (list, then watch, all namespaces).
    "list_pod_for_all_namespaces": ("", "pods", {"list", "watch"}),
    # client.py Kube.bind: self.core.create_namespaced_pod_binding (scheduler.py _bind).
    "create_namespaced_pod_binding": ("", "pods/binding", {"create"}),
    # client.py Kube.patch_pod_status: self.core.patch_namespaced_pod_status (PodScheduled=False).
    "patch_namespaced_pod_status": ("", "pods/status", {"patch"}),
    # client.py Kube.create_event: self.core.create_namespaced_event (core v1, never events.k8s.io).
    "create_namespaced_event": ("", "events", {"create"}),
    # client.py Kube.node_metrics: list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    # (feedback.py NodeMetricsFeed.poll, with --feedback-threshold).
    "list_cluster_custom_object": ("metrics.k8s.io", "nodes", {"list"}),
}
# Leader election on the Lease "<--name>-scheduler" in --lease-namespace (only that name, but
# create, which RBAC cannot limit by name).
SCHEDULER_LEASE_CALLS = {
    "create_namespaced_lease": "create",  # leader.py Lock.create
    "read_namespaced_lease": "get",  # kubernetes/leaderelection/resourcelock/leaselock.py LeaseLock.get
    "replace_namespaced_lease": "update",  # leader.py Lock.update (renew, release)
}
SCHEDULER_SOURCES = ["iro_fed/k8s/client.py", "iro_fed/k8s/scheduler.py", "iro_fed/k8s/leader.py",
                     "iro_fed/k8s/feedback.py"]
# `iro webhook --mode affinity` (cli.py cmd_webhook): ClusterCache's two Reflectors, nothing else;
# `--mode scheduler-name` calls no API at all.
WEBHOOK_AFFINITY_CALLS = {"list_node": SCHEDULER_CALLS["list_node"],
                          "list_pod_for_all_namespaces": SCHEDULER_CALLS["list_pod_for_all_namespaces"]}
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
CONFIG_FIELDS = {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "healthzBindAddress",
                 "metricsBindAddress", "debuggingConfiguration", "percentageOfNodesToScore", "podInitialBackoffSeconds",
                 "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive"}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    return kubectl


@functools.cache
def _kubectl_version() -> str:
    out = subprocess.run([_kubectl(), "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["clientVersion"]["gitVersion"] if out.returncode == 0 else "unknown"


@functools.cache
def _rendered_text(target: str) -> str:
    out = subprocess.run([_kubectl(), "kustomize", str(ROOT / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl {_kubectl_version()} kustomize {target}: {out.stderr}"
    unexpected = [line for line in out.stderr.splitlines() if line.strip() and not DEPRECATION.match(line)]
    assert not unexpected, f"kubectl {_kubectl_version()} kustomize {target}: {unexpected}"
    return out.stdout


def _render(target: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(_rendered_text(target)) if d]


def _key(doc: dict) -> tuple[str, str, str]:
    """(kind, namespace, name) with a generated ConfigMap's hash suffix removed (it differs between kustomizes)."""
    meta = doc["metadata"]
    name = meta["name"]
    if doc["kind"] == "ConfigMap" and (m := HASHED.match(name)):
        name = m["name"]
    return doc["kind"], meta.get("namespace", ""), name


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request) -> tuple[str, list[dict]]:
    _kubectl()
    return request.param, _render(request.param)


def find(docs: list[dict], kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    assert matches, f"{kind}/{name} missing"
    return matches[0]


def test_kustomizations_use_only_fields_kustomize_v2_knows():
    """Debian 12's kubectl 1.20 embeds kustomize v2.0.3: no `labels`/`patches`, directories only under `bases`."""
    for target in KUSTOMIZATIONS:
        kust = yaml.safe_load((ROOT / target / "kustomization.yaml").read_text())
        assert set(kust) <= KUSTOMIZE_V2_FIELDS, f"{target}: {sorted(set(kust) - KUSTOMIZE_V2_FIELDS)}"
        for field in ("resources", "patchesStrategicMerge"):
            for entry in kust.get(field, []):
                assert isinstance(entry, str) and (ROOT / target / entry).is_file(), f"{target}: {field} {entry!r}"
        for entry in kust.get("bases", []):
            assert (ROOT / target / entry / "kustomization.yaml").is_file(), f"{target}: bases {entry!r}"
        for patch in kust.get("patchesJson6902", []):
            assert {"group", "version", "kind", "name"} <= set(patch["target"]), f"{target}: {patch}"
            assert (ROOT / target / patch["path"]).is_file(), f"{target}: {patch['path']}"


def test_every_target_renders_exactly_the_expected_objects(rendered):
    target, docs = rendered
    keys = [_key(d) for d in docs]
    assert len(keys) == len(set(keys)), f"duplicates in {target}"
    assert set(keys) == EXPECTED_OBJECTS[target], f"kubectl {_kubectl_version()}"


def test_every_object_is_labelled_and_uses_the_released_image(rendered):
    _, docs = rendered
    for d in docs:
        assert d["metadata"].get("labels", {}).items() >= PART_OF.items(), _key(d)
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = d["spec"]
        # Selectors are immutable: the part-of label must not leak into them (as commonLabels would).
        assert spec["selector"] == {"matchLabels": {"app.kubernetes.io/name": d["metadata"]["name"]}}
        assert spec["template"]["metadata"]["labels"] == spec["selector"]["matchLabels"]
        for c in spec["template"]["spec"]["containers"]:
            if (c.get("command") or [None])[0] in ("iro", "edge-agent"):
                assert c["image"] == IMAGE, (d["metadata"]["name"], c["name"])
    for svc in (d for d in docs if d["kind"] in ("Service", "PodDisruptionBudget")):
        selector = svc["spec"]["selector"]
        labels = selector.get("matchLabels", selector)
        assert set(labels) == {"app.kubernetes.io/name"}, _key(svc)


def test_config_map_references_resolve_to_the_generated_names(rendered):
    _, docs = rendered
    config_maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    # A changed ConfigMap rolls the pods that mount it; the rules' keeps its name for a Prometheus outside.
    assert all(HASHED.match(n) for n in config_maps - {"iro-prometheus-rules"})
    referenced = {v["configMap"]["name"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
                  for v in d["spec"]["template"]["spec"].get("volumes", []) if "configMap" in v}
    assert referenced and referenced <= config_maps
    # Each --cluster-config / --config file is a key of the ConfigMap mounted at its folder.
    data = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    for d in (d for d in docs if d["kind"] in ("Deployment", "DaemonSet")):
        spec = d["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            mounts = {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}
            for arg in c.get("args", []):
                if arg.startswith(("--cluster-config=", "--config=")):
                    path = Path(arg.split("=", 1)[1])
                    volume = mounts.get(str(path.parent), {})
                    assert path.name in data.get(volume.get("configMap", {}).get("name"), {}), (d["metadata"]["name"], arg)


def test_every_object_validates_against_the_kubernetes_schema():
    """Every distinct object of every target (once: the overlays share most of the base), strictly, against the
    Kubernetes version the manifests target and the newest one kubernetes-validate knows."""
    kv = pytest.importorskip("kubernetes_validate")
    _kubectl()
    from kubernetes_validate.utils import all_versions, latest_version

    supported = set(all_versions())
    versions = sorted({v for v in (TARGET_K8S, latest_version()) if v in supported})
    assert versions, f"kubernetes-validate supports neither {TARGET_K8S} nor its latest"
    distinct = {json.dumps(d, sort_keys=True): d for t in TARGETS for d in _render(t)}
    assert len(distinct) == len(set.union(*EXPECTED_OBJECTS.values())) + sum(map(len, CHANGED.values()))
    for version in versions:
        for doc in distinct.values():
            kv.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_webhook_configuration_is_safe(rendered):
    _, docs = rendered
    (hook,) = find(docs, "MutatingWebhookConfiguration", "iro-webhook")["webhooks"]
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["failurePolicy"] == "Ignore"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
    dep = find(docs, "Deployment", "iro-webhook")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    budget = float(next(a for a in args if a.startswith("--budget-s=")).split("=")[1])
    assert budget < hook["timeoutSeconds"]  # answers before the API server gives up


# The placeholder of deploy/overlays/webhook-network-policy/network-policy.yaml (TEST-NET-1: matches no host).
NETWORK_POLICY_PLACEHOLDER = "192.0.2.0/24"


def test_only_the_network_policy_overlay_restricts_who_reaches_the_webhook(rendered):
    """The webhook has no client authentication: deploy/overlays/webhook-network-policy lets only the
    control plane's addresses (the documented CIDR to edit) reach its port, and nothing else in."""
    import ipaddress

    target, docs = rendered
    webhook_pods = {"matchLabels": {"app.kubernetes.io/name": "iro-webhook"}}
    policies = [d for d in docs if d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"] in (webhook_pods, {})]
    if not target.endswith("webhook-network-policy"):
        assert policies == []  # opt-in: the CIDR differs in every cluster
        return
    (policy,) = policies
    spec = policy["spec"]
    pod = find(docs, "Deployment", "iro-webhook")["spec"]["template"]
    assert spec["podSelector"] == {"matchLabels": pod["metadata"]["labels"]}  # exactly the webhook's pods
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    # Only address blocks: a pod or namespace selector would let pods in.
    assert [list(peer) for peer in rule["from"]] == [["ipBlock"]]
    cidrs = [peer["ipBlock"]["cidr"] for peer in rule["from"]]
    assert cidrs == [NETWORK_POLICY_PLACEHOLDER] and all(ipaddress.ip_network(c) for c in cidrs)
    assert not any(peer["ipBlock"].get("except") for peer in rule["from"])
    # The policy sees the pod's port: the one the Service forwards its port 443 to (by name).
    (container,) = pod["spec"]["containers"]
    (service_port,) = find(docs, "Service", "iro-webhook")["spec"]["ports"]
    target_port = next(p["containerPort"] for p in container["ports"] if p["name"] == service_port["targetPort"])
    assert target_port == 8443 and "--port=8443" in container["args"]
    assert rule["ports"] == [{"protocol": "TCP", "port": target_port}]
    # The CIDR to edit is marked where it is.
    text = (ROOT / target / "network-policy.yaml").read_text()
    assert "EDIT" in text and NETWORK_POLICY_PLACEHOLDER in text


def _policies_selecting(docs: list[dict], pod_labels: dict) -> dict[str, dict]:
    """The NetworkPolicies (by name) whose podSelector selects pods with ``pod_labels`` (an empty selector: all)."""
    out = {}
    for d in (d for d in docs if d["kind"] == "NetworkPolicy"):
        selector = d["spec"]["podSelector"]
        assert set(selector) <= {"matchLabels"}, _key(d)  # matchExpressions would need evaluating
        if selector.get("matchLabels", {}).items() <= pod_labels.items():
            out[d["metadata"]["name"]] = d
    return out


def _ingress_ports(policy: dict) -> list[list[dict]]:
    return [rule.get("ports") for rule in policy["spec"]["ingress"]]


def test_base_admits_only_the_edge_agents_to_the_federated_server(rendered):
    """Whoever reaches the SuperLink's port can start a run, whose code executes in the server pod and in every
    site's agent pod: the base denies ingress to the fed server's pods except its port from the agents' pods.
    Only overlays/fed-server-network-policy opens it to more (the documented CIDR to edit), and never other ports."""
    import ipaddress

    target, docs = rendered
    if target.endswith("overlays/edge"):  # no federated server there, and no policy left behind
        assert "iro-fed-server" not in {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"}
        return
    dep = find(docs, "Deployment", "iro-fed-server")["spec"]["template"]
    policies = _policies_selecting(docs, dep["metadata"]["labels"])
    expected = {"iro-fed-server", "iro-fed-server-external"} if target.endswith("fed-server-network-policy") \
        else {"iro-fed-server"}
    assert set(policies) == expected
    # The port the Service forwards to (by name), which --port makes the SuperLink listen on.
    (container,) = dep["spec"]["containers"]
    (service_port,) = find(docs, "Service", "iro-fed-server")["spec"]["ports"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == service_port["targetPort"])
    assert f"--port={port}" in container["args"]
    for policy in policies.values():
        assert policy["spec"]["podSelector"] == {"matchLabels": dep["metadata"]["labels"]}  # exactly the server's pods
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert _ingress_ports(policy) == [[{"protocol": "TCP", "port": port}]]
    (rule,) = policies["iro-fed-server"]["spec"]["ingress"]
    agent = find(docs, "DaemonSet", "iro-edge-agent")
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "iro-system"}},
                             "podSelector": {"matchLabels": agent["spec"]["template"]["metadata"]["labels"]}}]
    assert agent["metadata"]["namespace"] == "iro-system"
    if "iro-fed-server-external" in policies:
        (rule,) = policies["iro-fed-server-external"]["spec"]["ingress"]
        assert [list(peer) for peer in rule["from"]] == [["ipBlock"]]
        cidrs = [peer["ipBlock"]["cidr"] for peer in rule["from"]]
        assert cidrs == [NETWORK_POLICY_PLACEHOLDER] and all(ipaddress.ip_network(c) for c in cidrs)
        assert "EDIT" in (ROOT / target / "network-policy.yaml").read_text()


def test_only_the_agent_policy_overlay_restricts_who_reaches_the_edge_agent(rendered):
    """The agent has no client authentication: overlays/edge-agent-network-policy lets only Prometheus and the
    listed clients reach its port (the pod's `metrics` port, where /recommend and /outcome are served too)."""
    target, docs = rendered
    ds = find(docs, "DaemonSet", "iro-edge-agent")["spec"]["template"]
    policies = _policies_selecting(docs, ds["metadata"]["labels"])
    if not target.endswith("edge-agent-network-policy"):
        assert policies == {}  # opt-in: Prometheus' namespace and the clients differ in every installation
        return
    (policy,) = policies.values()
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": ds["metadata"]["labels"]} and spec["policyTypes"] == ["Ingress"]
    (container,) = ds["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    assert f"--port={port}" in container["args"] and ds["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert _ingress_ports(policy) == [[{"protocol": "TCP", "port": port}]]
    (rule,) = spec["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
        {"ipBlock": {"cidr": NETWORK_POLICY_PLACEHOLDER}}]
    assert (ROOT / target / "network-policy.yaml").read_text().count("EDIT") >= 2


# What a decision (transition: the pod's name, the state vector, the top-k node names, the policy-sample columns)
# takes in the agent's experience store, roughly; its outcome adds at most the agent's cap on `observed`.
TRANSITION_BYTES = 1024


def test_edge_agent_state_volume_is_bounded_to_hold_the_store(rendered):
    """Any client of the agent's port adds rows to the experience store: its emptyDir has a sizeLimit (past it the
    kubelet evicts the pod instead of the node's disk filling up), large enough for store.max_rows rows."""
    import edge_agent.agent
    from edge_agent.config import StoreConfig
    from iro_fed.k8s.quantity import parse_quantity

    row_bytes = TRANSITION_BYTES + getattr(edge_agent.agent, "MAX_OBSERVED_BYTES", 16 * 1024)

    _, docs = rendered
    spec = find(docs, "DaemonSet", "iro-edge-agent")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (container,) = spec["containers"]
    settings = yaml.safe_load(find(docs, "ConfigMap", "iro-edge-agent")["data"]["edge-agent-config.yaml"])
    store_dir = str(Path(settings["store"]["path"]).parent)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == store_dir]
    volume = volumes[mount["name"]]
    assert set(volume) == {"name", "emptyDir"} and "sizeLimit" in volume["emptyDir"], volume
    max_rows = settings["store"].get("max_rows", StoreConfig.max_rows)
    assert not any(e["name"] == "IRO_AGENT_STORE_MAX_ROWS" for e in container.get("env", []))
    limit = parse_quantity(volume["emptyDir"]["sizeLimit"], "sizeLimit")
    assert max_rows * row_bytes <= limit <= 4 * 1024**3  # holds a full store; still a bound on a node's disk


def _bound_rules(docs: list[dict], account: str, namespace: str = "iro-system") -> Iterator[tuple[dict, str, dict]]:
    """(role, scope, rule) for every rule that the bindings of the rendered objects give the
    ServiceAccount ``namespace/account``; scope is a RoleBinding's namespace or "*"."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("ClusterRole", "Role")}
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace
                   for s in b.get("subjects", [])):
            continue
        scope = b["metadata"]["namespace"] if b["kind"] == "RoleBinding" else "*"
        ref = b["roleRef"]
        role_ns = b["metadata"]["namespace"] if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{b['metadata']['name']}: binds {ref['kind']} {ref['name']}, not in the manifests"
        for rule in role["rules"]:
            yield role, scope, rule


def _grants(docs: list[dict], account: str, namespace: str = "iro-system") -> set[tuple]:
    """(apiGroup, resource, verb, namespace or "*", resourceNames) that the bindings of the rendered
    objects give the ServiceAccount ``namespace/account`` (a RoleBinding's only in its namespace)."""
    granted = set()
    for _, scope, rule in _bound_rules(docs, account, namespace):
        names = tuple(sorted(rule.get("resourceNames", []))) or None
        granted |= {(g, r, v, scope, names) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return granted


def _needed(calls: dict[str, tuple[str, str, set[str]]]) -> set[tuple]:
    return {(g, r, v, "*", None) for g, r, verbs in calls.values() for v in verbs}


def _client_api_methods() -> set[str]:
    """Method names of the Kubernetes client's API classes the code can reach."""
    from kubernetes import client

    return {m for api in (client.CoreV1Api, client.CoordinationV1Api, client.CustomObjectsApi, client.EventsV1Api)
            for m in dir(api) if not m.startswith("_") and not m.endswith("_with_http_info")}


def test_scheduler_api_calls_are_the_table():
    """The table above is the code: every client call in the scheduler's modules (and the client's
    LeaseLock that leader.py builds on) is in it, and every entry is still called."""
    pytest.importorskip("kubernetes")
    import kubernetes.leaderelection.resourcelock.leaselock as leaselock

    methods = _client_api_methods()
    sources = {p: (ROOT / p).read_text() for p in SCHEDULER_SOURCES} | {"leaselock": Path(leaselock.__file__).read_text()}
    called = {name for text in sources.values() for name in re.findall(r"\.(\w+)", text) if name in methods}
    assert called == set(SCHEDULER_CALLS) | set(SCHEDULER_LEASE_CALLS)
    # The custom-object list is metrics-server's NodeMetrics, the group and resource of the table.
    assert re.search(r'list_cluster_custom_object\("metrics\.k8s\.io", "v1beta1", "nodes"', sources["iro_fed/k8s/client.py"])
    assert "LeaseLock" in sources["iro_fed/k8s/leader.py"] and "api_instance.read_namespaced_lease" in sources["leaselock"]


def test_scheduler_rbac_grants_exactly_the_table(rendered):
    """What the bindings give the scheduler's ServiceAccount is exactly what its calls need: cluster-wide
    for the table's calls, and for the Lease only in --lease-namespace, get/update only on its name."""
    _, docs = rendered
    dep = find(docs, "Deployment", "iro-scheduler")["spec"]["template"]["spec"]
    opts = dict(a.split("=", 1) for a in dep["containers"][0]["args"] if "=" in a)
    lease_ns, lease = opts["--lease-namespace"], f"{opts['--name']}-scheduler"
    needed = _needed(SCHEDULER_CALLS) | {
        ("coordination.k8s.io", "leases", v, lease_ns, None if v == "create" else (lease,))
        for v in SCHEDULER_LEASE_CALLS.values()}
    granted = _grants(docs, dep["serviceAccountName"])
    assert granted == needed, f"extra: {sorted(granted - needed, key=str)}; missing: {sorted(needed - granted, key=str)}"
    assert all("*" not in v for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"] for v in r["verbs"])


def test_webhook_rbac_is_what_its_mode_calls(rendered):
    """scheduler-name mode calls no API: no role, no token. Only deploy/overlays/webhook-affinity runs
    --mode affinity, and grants exactly its cluster cache's list + watch."""
    target, docs = rendered
    spec = find(docs, "Deployment", "iro-webhook")["spec"]["template"]["spec"]
    (mode,) = [a.split("=", 1)[1] for a in spec["containers"][0]["args"] if a.startswith("--mode=")]
    granted = _grants(docs, spec["serviceAccountName"])
    account = find(docs, "ServiceAccount", "iro-webhook")
    if target.endswith("webhook-affinity"):
        assert mode == "affinity"
        assert granted == _needed(WEBHOOK_AFFINITY_CALLS)
        assert spec["automountServiceAccountToken"] is True
    else:
        assert mode == "scheduler-name"
        assert granted == set()
        assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False


def test_kube_scheduler_configuration_matches_the_extender_sidecar(rendered):
    _, docs = rendered
    cm = find(docs, "ConfigMap", "iro-kube-scheduler-config")
    cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    assert set(cfg) <= CONFIG_FIELDS
    (ext,) = cfg["extenders"]
    assert set(ext) <= EXTENDER_FIELDS
    assert ext["weight"] > 0 and ext["httpTimeout"].endswith("s")
    dep = find(docs, "Deployment", "iro-kube-scheduler")
    containers = {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}
    args = containers["extender"]["args"]
    opts = dict(a.split("=", 1) for a in args if "=" in a)
    assert ext["urlPrefix"] == f"http://{opts['--host']}:{opts['--port']}{opts['--url-prefix']}"
    assert ext["nodeCacheCapable"] is ("--watch" in args or "--kubeconfig" in opts)
    mounted = {v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if "configMap" in v}
    assert cm["metadata"]["name"] in mounted  # the hashed generator name is wired in


def test_every_iro_command_in_the_manifests_parses(rendered, monkeypatch):
    """The manifests call the real CLI: each container's args are a valid `iro` invocation."""
    from iro_fed.cli import build_parser

    _, docs = rendered
    parsers = {"iro": build_parser()}
    try:
        from edge_agent.cli import build_parser as agent_parser

        parsers["edge-agent"] = agent_parser()
    except ImportError:
        pass
    seen = []
    for d in docs:
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            cmd = (c.get("command") or [None])[0]
            if cmd in parsers:
                args = parsers[cmd].parse_args(c["args"])
                assert callable(getattr(args, "func", None)) or cmd != "iro", shlex.join(c["args"])
                seen.append(f"{cmd} {c['args'][0]}")
    assert {"iro scheduler", "iro extender", "iro webhook"} <= set(seen)


def test_overlays_differ_where_they_should(rendered):
    target, docs = rendered
    agent = find(docs, "DaemonSet", "iro-edge-agent")["spec"]["template"]["spec"]
    scheduler = find(docs, "Deployment", "iro-scheduler")["spec"]
    args = scheduler["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--window-s=")] == [WINDOW[target]]
    assert ("--max-batch=1000" in args) is target.endswith("cloud")
    if target.endswith("edge"):
        assert agent["nodeSelector"] == {"iro-fed.io/domain-kind": "edge"}
        assert scheduler["replicas"] == 1
    elif target.endswith("cloud"):
        assert agent["nodeSelector"] == {"iro-fed.io/domain-kind": "zone"}
        assert scheduler["replicas"] == 2
        budgets = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
        assert budgets == {name: {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}}}
                           for name in ("iro-webhook", "iro-scheduler")}
    else:
        assert "nodeSelector" not in agent and scheduler["replicas"] == 2
    # hostNetwork (the node's network counters) only where the operator opted in, with cluster DNS and
    # the agent listening on the node's address instead of every host interface.
    (container,) = agent["containers"]
    env = {e["name"]: e for e in container["env"]}
    if target.endswith("edge-hostnetwork"):
        assert agent["hostNetwork"] is True and agent["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert env["IRO_AGENT_HOST"] == {"name": "IRO_AGENT_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        assert [(p["containerPort"], p.get("hostPort")) for p in container["ports"]] == [(9464, 9464)]
    else:
        assert "hostNetwork" not in agent and "dnsPolicy" not in agent
        assert env["IRO_AGENT_HOST"]["value"] == "::"


def test_cluster_config_sample_loads():
    from iro_fed.k8s.snapshot import ClusterConfig

    cfg = ClusterConfig.load(ROOT / "deploy/base/cluster-config.yaml")
    assert cfg.domains["edge-1"]["kind"] == "edge"


def test_deploy_root_renders_the_base():
    _kubectl()
    assert _rendered_text("deploy") == _rendered_text("deploy/base")


def test_edge_agent_settings_in_the_daemonset_are_valid(capsys):
    """The DaemonSet's ConfigMap (settings + site problem) passes `edge-agent check`."""
    cli = pytest.importorskip("edge_agent.cli")
    assert cli.main(["check", "--config", str(ROOT / "deploy/base/edge-agent-config.yaml")]) == 0
    assert '"settings_ok": true' in capsys.readouterr().out
