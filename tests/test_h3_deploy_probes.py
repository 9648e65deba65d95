"""deploy/: the iro scheduler and the extender sidecar have liveness probes (a wedged loop or server is
restarted), the scheduler's on the /healthz of its metrics port; no exec probe keeps the kubelet's 1 s
default timeout (a python exec needs more). Every target, as kubectl kustomize renders it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s.test_deploy import TARGETS, _kubectl, _render, find

PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request) -> tuple[str, list[dict]]:
    _kubectl()
    return request.param, _render(request.param)


def _container(doc: dict, name: str) -> dict[str, Any]:
    [c] = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


def test_the_scheduler_is_probed_on_its_loops_health(rendered):
    target, docs = rendered
    c = _container(find(docs, "Deployment", "iro-scheduler"), "scheduler")
    probe = c["livenessProbe"]
    assert probe["httpGet"]["path"] == "/healthz", target
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert probe["httpGet"]["port"] in ports, target
    assert f"--metrics-port={ports[probe['httpGet']['port']]}" in c["args"], target  # /healthz is served there
    # Never within a legitimate pass: the scheduler itself waits 60 s at least before reporting a stall.
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 30, target


def test_the_extender_sidecar_is_probed_for_liveness_and_readiness(rendered):
    target, docs = rendered
    c = _container(find(docs, "Deployment", "iro-kube-scheduler"), "extender")
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        command = c[kind]["exec"]["command"]
        assert f"127.0.0.1:8888{path}" in command[-1], (target, kind)


def test_no_exec_probe_keeps_the_one_second_default_timeout(rendered):
    target, docs = rendered
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
            for kind in PROBES:
                probe = c.get(kind)
                if probe and "exec" in probe:
                    assert probe.get("timeoutSeconds", 1) >= 3, (target, doc["metadata"]["name"], c["name"], kind)


def test_the_webhook_is_ready_on_readyz_and_live_on_healthz(rendered):
    # /readyz is 503 until the affinity cache has synced; the webhook had no liveness probe at all
    target, docs = rendered
    c = _container(find(docs, "Deployment", "iro-webhook"), "webhook")
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", target
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", target
    if target.endswith("webhook-affinity"):  # the pods cache: a relist parses ~48 MB per 1,000 bound pods
        assert c["resources"]["limits"]["memory"] == "2Gi", target
