"""``PlacedPods`` keeps the counts the pod-reading plugins take over its pods and brings them up to
date when a pod is added (a batch's check adds a pod, then asks the same counts for the next one):
the counts after any adds are those of a fresh count over the same pods."""

from __future__ import annotations

import random
from typing import Any

from iro_fed.k8s.snapshot import PlacedPods, pod_rules
from iro_fed.k8s.testing import make_pod
from tests.k8s.helpers import HOST, ZONE

NODES = {f"n{i}": {HOST: f"n{i}", ZONE: f"z{i % 3}"} for i in range(6)} | {"bare": {HOST: "bare"}}


def term(app: str, key: str, namespaces: list[str] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if namespaces is not None:
        t["namespaces"] = namespaces
    return t


def random_pod(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    app = rng.choice(["a", "b", "c"])
    terms = [term(rng.choice("abc"), rng.choice([HOST, ZONE])) for _ in range(rng.randrange(3))]
    if rng.random() < 0.3:
        terms.append(term(rng.choice("abc"), ZONE, ["default", "other"]))
    aff: dict[str, Any] = {}
    if terms:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    pod = make_pod(f"p{i}", namespace=rng.choice(["default", "other"]), labels={"app": app}, affinity=aff or None)
    if rng.random() < 0.2:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return rng.choice([*NODES, "unknown"]), pod


def counts(placed: PlacedPods) -> list[Any]:
    """The counts the plugins ask for, in a fixed order."""
    probe = pod_rules(make_pod("probe", labels={"app": "a"}, affinity={
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("a", ZONE), term("b", HOST)]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("a", ZONE), term("c", HOST)]}}),
        pending=True)
    out: list[Any] = []
    for every, terms in ((True, probe.affinity), (False, probe.anti_affinity), (True, probe.anti_affinity[:1])):
        out.append(dict(placed.term_counts(terms, every, NODES)))
    for ns, labels in (("default", {"app": "a"}), ("other", {"app": "b"}), ("default", {"app": "c"})):
        out.append(dict(placed.existing_counts(ns, labels, NODES)))
    for ns in ("default", "other"):
        out.append(dict(placed.selector_counts(ns, probe.anti_affinity[0].selector)))
    return out


def test_counts_kept_across_adds_equal_a_fresh_count():
    rng = random.Random(7)
    pods = [random_pod(rng, i) for i in range(80)]
    kept = PlacedPods()
    for k, (node, pod) in enumerate(pods):
        kept.add(node, pod_rules(pod, pending=False))
        if k % 3 == 0:
            fresh = PlacedPods()
            for n, p in pods[:k + 1]:
                fresh.add(n, pod_rules(p, pending=False))
            assert counts(kept) == counts(fresh), k


def test_an_add_counts_the_pod_without_a_recount(monkeypatch):
    """After the first count, adding a pod costs the added pod only: no pass over the pods."""
    placed = PlacedPods()
    for i in range(5):
        placed.add("n0", pod_rules(make_pod(f"p{i}", labels={"app": "a"}), pending=False))
    counts(placed)
    passes = []
    real = PlacedPods.pods
    monkeypatch.setattr(PlacedPods, "pods", lambda self, namespaces=None: passes.append(1) or real(self, namespaces))
    placed.add("n1", pod_rules(make_pod("p5", labels={"app": "a"}), pending=False))
    after = counts(placed)
    assert passes == []
    assert after[1] == {(ZONE, "z0"): 5, (ZONE, "z1"): 1}  # anti-affinity term app=a over zones
    assert after[6] == {"n0": 5, "n1": 1}
