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
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["deploy/base", "deploy/overlays/edge", "deploy/overlays/cloud"]
KUSTOMIZATIONS = ["deploy", "deploy/base", "deploy/overlays/edge", "deploy/overlays/cloud", "deploy/prometheus"]
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
    ("ClusterRole", "", "iro-webhook"),
    ("ClusterRoleBinding", "", "iro-webhook"),
    ("Deployment", "iro-system", "iro-webhook"),
    ("Service", "iro-system", "iro-webhook"),
    ("MutatingWebhookConfiguration", "", "iro-webhook"),
    ("ServiceAccount", "iro-system", "iro-edge-agent"),
    ("DaemonSet", "iro-system", "iro-edge-agent"),
    ("ServiceAccount", "iro-system", "iro-fed-server"),
    ("Deployment", "iro-system", "iro-fed-server"),
    ("Service", "iro-system", "iro-fed-server"),
    ("ConfigMap", "iro-system", "iro-kube-scheduler-config"),
    ("ConfigMap", "iro-system", "iro-cluster-config"),
    ("ConfigMap", "iro-system", "iro-edge-agent"),
    ("ConfigMap", "iro-system", "iro-prometheus-rules"),
}
FED_SERVER = {("ServiceAccount", "iro-system", "iro-fed-server"), ("Deployment", "iro-system", "iro-fed-server"),
              ("Service", "iro-system", "iro-fed-server")}
EXPECTED_OBJECTS = {
    "deploy/base": BASE_OBJECTS,
    "deploy/overlays/edge": BASE_OBJECTS - FED_SERVER,
    "deploy/overlays/cloud": BASE_OBJECTS | {("PodDisruptionBudget", "iro-system", "iro-webhook"),
                                             ("PodDisruptionBudget", "iro-system", "iro-scheduler")},
}
WINDOW = {"deploy/base": "--window-s=1", "deploy/overlays/edge": "--window-s=0.2", "deploy/overlays/cloud": "--window-s=2"}
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
    assert len(distinct) == len(set.union(*EXPECTED_OBJECTS.values())) + 4  # + the changed DaemonSet/Deployment
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


def test_scheduler_rbac_is_exactly_what_the_scheduler_needs(rendered):
    _, docs = rendered
    rules = find(docs, "ClusterRole", "iro-scheduler")["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
        ("", "pods/binding", "create"), ("", "pods/status", "patch"),
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
        ("", "events", "create"), ("", "events", "patch"),
        ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
        ("metrics.k8s.io", "nodes", "get"), ("metrics.k8s.io", "nodes", "list"),
    }
    lease_rules = find(docs, "Role", "iro-scheduler-leases")["rules"]
    assert {v for r in lease_rules for v in r["verbs"]} == {"get", "create", "update"}
    assert all(r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"] for r in lease_rules)
    assert all("*" not in v for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"] for v in r["verbs"])


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
