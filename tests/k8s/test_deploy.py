"""deploy/: the kustomize base and overlays render with kubectl and every object validates."""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["deploy/base", "deploy/overlays/edge", "deploy/overlays/cloud"]
K8S_VERSION = "1.32.0"
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
CONFIG_FIELDS = {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "healthzBindAddress",
                 "metricsBindAddress", "debuggingConfiguration", "percentageOfNodesToScore", "podInitialBackoffSeconds",
                 "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive"}


@functools.cache
def _rendered_text(target: str) -> str:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _render(target: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(_rendered_text(target)) if d]


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request) -> tuple[str, list[dict]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    return request.param, _render(request.param)


def find(docs: list[dict], kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    assert matches, f"{kind}/{name} missing"
    return matches[0]


def test_every_object_validates_against_the_kubernetes_schema():
    """Every distinct object of every target (once: the overlays share most of the base)."""
    kv = pytest.importorskip("kubernetes_validate")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    distinct = {json.dumps(d, sort_keys=True): d for t in TARGETS for d in _render(t)}
    assert len(distinct) > 25
    for doc in distinct.values():
        kv.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError naming the field


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
    has_fed = any(d["kind"] == "Deployment" and d["metadata"]["name"] == "iro-fed-server" for d in docs)
    if target.endswith("edge"):
        assert agent["nodeSelector"] == {"iro-fed.io/domain-kind": "edge"}
        assert not has_fed
        assert find(docs, "Deployment", "iro-scheduler")["spec"]["replicas"] == 1
    elif target.endswith("cloud"):
        assert agent["nodeSelector"] == {"iro-fed.io/domain-kind": "zone"}
        assert has_fed
        assert {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"} == {"iro-webhook", "iro-scheduler"}
    else:
        assert has_fed and "nodeSelector" not in agent


def test_cluster_config_sample_loads():
    from iro_fed.k8s.snapshot import ClusterConfig

    cfg = ClusterConfig.load(ROOT / "deploy/base/cluster-config.yaml")
    assert cfg.domains["edge-1"]["kind"] == "edge"


def test_deploy_root_renders_the_base():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    assert _rendered_text("deploy") == _rendered_text("deploy/base")


def test_edge_agent_settings_in_the_daemonset_are_valid(capsys):
    """The DaemonSet's ConfigMap (settings + site problem) passes `edge-agent check`."""
    cli = pytest.importorskip("edge_agent.cli")
    assert cli.main(["check", "--config", str(ROOT / "deploy/base/edge-agent-config.yaml")]) == 0
    assert '"settings_ok": true' in capsys.readouterr().out
