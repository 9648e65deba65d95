"""A placement problem from Kubernetes objects (the JSON the API server returns).

Nodes become the problem's nodes, pods already bound to a node become its ``allocated`` usage,
pending pods become its workloads. Everything is read from plain dicts in the API's JSON form
(``metadata``, ``spec``, ``status`` with camelCase keys), so the same code serves the extender
(pods and nodes arrive in the request body), the scheduler and the webhook (from a watch).

Mapping (documented for users in ``docs/kubernetes.md``):

* node capacity: ``status.allocatable`` (``cpu`` in millicores, ``memory`` in MiB; the other
  resources named in :class:`ClusterConfig` ``resources``: ``pods`` as a count, everything else
  in its base unit, ``ephemeral-storage`` in MiB); GPUs: ``nvidia.com/gpu``; GPU model: label
  ``nvidia.com/gpu.product`` (or ``iro-fed.io/gpu-model``);
* domain: label ``topology.kubernetes.io/zone``, else ``topology.kubernetes.io/region``, else
  ``default``; its kind from the config or the node label ``iro-fed.io/domain-kind``;
* taints as given; ``spec.unschedulable`` adds ``node.kubernetes.io/unschedulable:NoSchedule``
  (what the node lifecycle controller does);
* a pod's request: the sum over containers (plus restartable init containers, i.e. sidecars),
  or the largest init container if that is more, plus ``spec.overhead`` (kube's
  ``PodRequests``); a container without a request but with a limit requests its limit;
* GPU: ``nvidia.com/gpu: k`` takes k whole cards; the pod annotation ``iro-fed.io/gpu-milli``
  (1..1000) asks for that share of one card instead; ``iro-fed.io/gpu-cards`` on a bound pod
  (written by IRO's scheduler through the Binding) says which cards it holds;
* node selector, tolerations, required and preferred node affinity (all operators, including
  ``matchFields`` on ``metadata.name``); pod annotations ``iro-fed.io/user-region``,
  ``iro-fed.io/max-latency-ms``, ``iro-fed.io/class``, ``iro-fed.io/allowed-domains``,
  ``iro-fed.io/gpu-models`` carry the model's own constraints.

Affinity terms that are more than label equality are evaluated here, against each node, and
handed to the model as a synthetic node label (``iro-fed.io/affinity-<hash>``) that the pod
selects, so the one feasibility module enforces them and reports kube's message
("didn't match Pod's node affinity/selector").
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.k8s.quantity import QuantityError, count, cpu_millicores, memory_mib, plain
from iro_fed.model import GPU_MILLI, Problem
from iro_fed.problem_io import ProblemValidationError, load_document, problem_from_dict

PREFIX = "iro-fed.io/"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MODEL_LABELS = ("nvidia.com/gpu.product", "iro-fed.io/gpu-model")
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
DOMAIN_KIND_LABEL = "iro-fed.io/domain-kind"
DEFAULT_DOMAIN = "default"
ANN_GPU_MILLI = "iro-fed.io/gpu-milli"
ANN_GPU_MODELS = "iro-fed.io/gpu-models"
ANN_GPU_CARDS = "iro-fed.io/gpu-cards"
ANN_USER_REGION = "iro-fed.io/user-region"
ANN_MAX_LATENCY = "iro-fed.io/max-latency-ms"
ANN_CLASS = "iro-fed.io/class"
ANN_ALLOWED_DOMAINS = "iro-fed.io/allowed-domains"
#: On a Node, in the extender's NodeList mode only: JSON of the resources already requested
#: there (``{"cpu": "3500m", "memory": "6Gi"}``), for extenders that see no pods.
ANN_NODE_ALLOCATED = "iro-fed.io/allocated"
AFFINITY_LABEL_PREFIX = "iro-fed.io/affinity-"
TERMINAL_PHASES = ("Succeeded", "Failed")


class PodSpecError(ValueError):
    """A pod or node object the model cannot read; the message names the object and field."""


# --- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterConfig:
    """What the API does not say: domain prices, carbon, PUE, user-region latency, weights.

    The file is a subset of the problem file (``shared/spec/interfaces.md``): ``resources``,
    ``domains`` (a list, or a map name -> fields), ``latency_ms``, ``weights``, ``latency_ref_ms``.
    """

    resources: tuple[str, ...] = ("cpu", "memory")
    domains: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    latency_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    latency_ref_ms: float | None = None

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "") -> ClusterConfig:
        if not isinstance(doc, Mapping):
            raise ProblemValidationError([("", "the cluster config must be an object")], source)
        known = {"resources", "domains", "latency_ms", "weights", "latency_ref_ms"}
        errors = [(str(k), f"unknown field (known: {', '.join(sorted(known))})") for k in doc if k not in known]
        if errors:
            raise ProblemValidationError(errors, source)
        domains = doc.get("domains") or {}
        if isinstance(domains, list):
            domains = {d.get("name"): {k: v for k, v in d.items() if k != "name"} for d in domains if isinstance(d, Mapping)}
        if not isinstance(domains, Mapping):
            raise ProblemValidationError([("domains", "expected a list or a map of domains")], source)
        resources = tuple(doc.get("resources") or ("cpu", "memory"))
        cfg = cls(resources, dict(domains), dict(doc.get("latency_ms") or {}), dict(doc.get("weights") or {}),
                  doc.get("latency_ref_ms"))
        # Validate by building a tiny problem: the same checks and field paths as the problem file.
        problem_from_dict(cfg.problem_skeleton(list(domains) or [DEFAULT_DOMAIN], []), source=source)
        return cfg

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClusterConfig:
        return cls.from_dict(load_document(path), source=str(path))

    def domain_doc(self, name: str, kind_hint: str | None) -> dict[str, Any]:
        d = dict(self.domains.get(name, {}))
        d["name"] = name
        if "kind" not in d and kind_hint:
            d["kind"] = kind_hint
        return d

    def problem_skeleton(self, domain_names: Iterable[str], nodes: list[dict], kinds: Mapping[str, str] | None = None) -> dict:
        names = list(dict.fromkeys([*domain_names, *self.domains]))
        doc: dict[str, Any] = {
            "resources": list(self.resources),
            "domains": [self.domain_doc(n, (kinds or {}).get(n)) for n in names],
            "latency_ms": {r: dict(row) for r, row in self.latency_ms.items()},
            "nodes": nodes,
            "workloads": [],
        }
        if self.weights:
            doc["weights"] = dict(self.weights)
        if self.latency_ref_ms is not None:
            doc["latency_ref_ms"] = self.latency_ref_ms
        return doc


# --- small readers -----------------------------------------------------------------------


def obj_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object (``name`` for cluster-scoped ones)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("spec")
    return s if isinstance(s, Mapping) else {}


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(f"{where}: expected an object of strings")
    return {str(k): str(v) for k, v in value.items()}


def resource_amount(resource: str, value: Any, where: str) -> float:
    """One quantity in the model's unit for ``resource``."""
    if resource == "cpu":
        return float(cpu_millicores(value, where))
    if resource in ("memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi"):
        return memory_mib(value, where)
    if resource == "pods" or "/" in resource:
        return float(count(value, where))
    return plain(value, where)


# --- nodes ---------------------------------------------------------------------------------


def node_domain(labels: Mapping[str, str]) -> str:
    return labels.get(ZONE_LABEL) or labels.get(REGION_LABEL) or DEFAULT_DOMAIN


def node_doc(node: Mapping[str, Any], resources: Sequence[str]) -> dict[str, Any]:
    """A problem-file node (no usage yet) from a v1.Node."""
    meta = _meta(node)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError("node: metadata.name is missing")
    where = f"node {name}"
    labels = _str_map(meta.get("labels"), f"{where}: metadata.labels")
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(alloc, Mapping):
        raise PodSpecError(f"{where}: status.allocatable: expected an object")
    capacity: dict[str, float] = {}
    for r in resources:
        if r not in alloc:
            raise PodSpecError(f"{where}: status.allocatable.{r} is missing")
        capacity[r] = resource_amount(r, alloc[r], f"{where}: status.allocatable.{r}")
        if capacity[r] <= 0:
            # The model needs capacity > 0; a node with none of a resource cannot take pods asking for it.
            capacity[r] = 1e-9
    gpus = count(alloc[GPU_RESOURCE], f"{where}: status.allocatable.{GPU_RESOURCE}") if GPU_RESOURCE in alloc else 0
    spec = _spec(node)
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        if not isinstance(t, Mapping) or not t.get("key"):
            raise PodSpecError(f"{where}: spec.taints[{i}]: expected an object with a key")
        taints.append({"key": str(t["key"]), "value": str(t.get("value") or ""), "effect": str(t.get("effect") or "NoSchedule")})
    if spec.get("unschedulable"):
        taints.append({"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"})
    model = next((labels[k] for k in GPU_MODEL_LABELS if labels.get(k)), "")
    return {
        "name": name,
        "domain": node_domain(labels),
        "capacity": capacity,
        "gpus": gpus,
        "gpu_model": model if gpus else "",
        "labels": labels,
        "taints": taints,
    }


# --- pods ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodDemand:
    """What a pod asks for, in model units."""

    requests: dict[str, float]
    gpu_count: int = 0
    gpu_milli: int = 0


def _container_requests(c: Mapping[str, Any], resources: Sequence[str], where: str) -> dict[str, float]:
    res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
    req = res.get("requests") or {}
    lim = res.get("limits") or {}
    if not isinstance(req, Mapping) or not isinstance(lim, Mapping):
        raise PodSpecError(f"{where}.resources: requests and limits must be objects")
    out: dict[str, float] = {}
    for r in (*resources, GPU_RESOURCE):
        if r == "pods":
            continue
        if r in req:
            out[r] = resource_amount(r, req[r], f"{where}.resources.requests.{r}")
        elif r in lim:  # API defaulting: a limit without a request requests the limit
            out[r] = resource_amount(r, lim[r], f"{where}.resources.limits.{r}")
    return out


def _add(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _max(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0.0), v)
    return out


def effective_requests(containers: Iterable[Mapping[str, float]], init_containers: Iterable[tuple[Mapping[str, float], bool]],
                       overhead: Mapping[str, float]) -> dict[str, float]:
    """kube's ``resourcehelper.PodRequests`` from parsed requests: ``init_containers`` are
    ``(requests, is_sidecar)`` in spec order (a sidecar has ``restartPolicy: Always`` and keeps
    running next to the app).

    ``max(sum(containers) + sum(sidecars), max_i(init_i + sidecars started before i)) + overhead``.
    The one place this formula lives: the snapshot and the agent's ``/recommend`` both use it.
    """
    total: dict[str, float] = {}
    for req in containers:
        total = _add(total, req)
    init_max: dict[str, float] = {}
    sidecars: dict[str, float] = {}
    for req, is_sidecar in init_containers:
        if is_sidecar:
            sidecars = _add(sidecars, req)
            init_max = _max(init_max, sidecars)
        else:
            init_max = _max(init_max, _add(sidecars, req))
    return _add(_max(_add(total, sidecars), init_max), overhead)


def pod_demand(pod: Mapping[str, Any], resources: Sequence[str]) -> PodDemand:
    """The pod's effective request (kube's ``resourcehelper.PodRequests``, :func:`effective_requests`)
    in model units."""
    spec = _spec(pod)
    who = f"pod {obj_key(pod)}"
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise PodSpecError(f"{who}: spec.containers: expected a list")
    apps = [_container_requests(c, resources, f"{who}: spec.containers[{i}]") for i, c in enumerate(containers)]
    inits = [(_container_requests(c, resources, f"{who}: spec.initContainers[{i}]"), c.get("restartPolicy") == "Always")
             for i, c in enumerate(spec.get("initContainers") or [])]
    overhead = spec.get("overhead") or {}
    extra = {r: resource_amount(r, v, f"{who}: spec.overhead.{r}")
             for r, v in (overhead.items() if isinstance(overhead, Mapping) else ()) if r in resources or r == GPU_RESOURCE}
    total = effective_requests(apps, inits, extra)
    gpus = int(total.pop(GPU_RESOURCE, 0))
    requests = {r: total.get(r, 0.0) for r in resources}
    if "pods" in resources:
        requests["pods"] = 1.0
    ann = _str_map(_meta(pod).get("annotations"), f"{who}: metadata.annotations")
    if ANN_GPU_MILLI in ann:
        try:
            milli = int(ann[ANN_GPU_MILLI])
        except ValueError:
            raise PodSpecError(f"{who}: annotation {ANN_GPU_MILLI}: expected an integer 1..{GPU_MILLI}, got {ann[ANN_GPU_MILLI]!r}") from None
        if not 1 <= milli <= GPU_MILLI:
            raise PodSpecError(f"{who}: annotation {ANN_GPU_MILLI}: must be 1..{GPU_MILLI}, got {milli}")
        if gpus > 1:
            raise PodSpecError(f"{who}: annotation {ANN_GPU_MILLI} is a share of one card, but the pod requests {gpus} {GPU_RESOURCE}")
        return PodDemand(requests, 1, milli)
    return PodDemand(requests, gpus, GPU_MILLI if gpus else 0)


def _expr_matches(expr: Mapping[str, Any], value: str | None, where: str) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise PodSpecError(f"{where}: operator {op} needs exactly one value")
        try:
            bound = int(values[0])
        except ValueError:
            raise PodSpecError(f"{where}: operator {op} needs an integer value, got {values[0]!r}") from None
        try:
            v = int(value) if value is not None else None
        except ValueError:
            return False
        return v is not None and (v > bound if op == "Gt" else v < bound)
    raise PodSpecError(f"{where}: unknown operator {op!r} (In, NotIn, Exists, DoesNotExist, Gt, Lt)")


def term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str], where: str) -> bool:
    """A v1.NodeSelectorTerm against a node (expressions are ANDed; an empty term matches nothing)."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for j, e in enumerate(exprs):
        if not _expr_matches(e, labels.get(str(e.get("key"))), f"{where}.matchExpressions[{j}]"):
            return False
    for j, e in enumerate(fields):
        if e.get("key") != "metadata.name":
            raise PodSpecError(f"{where}.matchFields[{j}].key: only metadata.name is supported, got {e.get('key')!r}")
        if not _expr_matches(e, name, f"{where}.matchFields[{j}]"):
            return False
    return True


def _affinity_key(obj: Any) -> str:
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]
    return AFFINITY_LABEL_PREFIX + digest


def workload_doc(pod: Mapping[str, Any], resources: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                 extra_labels: dict[str, set[str]]) -> dict[str, Any]:
    """A problem-file workload from a pending pod.

    ``nodes`` are problem-file node docs (for evaluating affinity); node names that must get a
    synthetic affinity label are added to ``extra_labels[label]``.
    """
    who = f"pod {obj_key(pod)}"
    spec = _spec(pod)
    meta = _meta(pod)
    demand = pod_demand(pod, resources)
    wl: dict[str, Any] = {"name": obj_key(pod), "requests": demand.requests,
                          "priority": int(spec.get("priority") or 0)}
    if demand.gpu_count:
        wl["gpu"] = {"count": demand.gpu_count, "milli": demand.gpu_milli}
    ann = _str_map(meta.get("annotations"), f"{who}: metadata.annotations")
    if ann.get(ANN_GPU_MODELS) and demand.gpu_count:
        wl["gpu"]["models"] = [m.strip() for m in ann[ANN_GPU_MODELS].split(",") if m.strip()]
    if ann.get(ANN_CLASS):
        wl["class"] = ann[ANN_CLASS]
    if ann.get(ANN_USER_REGION):
        wl["user_region"] = ann[ANN_USER_REGION]
    if ann.get(ANN_MAX_LATENCY):
        try:
            wl["max_latency_ms"] = float(ann[ANN_MAX_LATENCY])
        except ValueError:
            raise PodSpecError(f"{who}: annotation {ANN_MAX_LATENCY}: expected a number, got {ann[ANN_MAX_LATENCY]!r}") from None
    if ann.get(ANN_ALLOWED_DOMAINS):
        wl["allowed_domains"] = [d.strip() for d in ann[ANN_ALLOWED_DOMAINS].split(",") if d.strip()]
    selector = _str_map(spec.get("nodeSelector"), f"{who}: spec.nodeSelector")
    tolerations = []
    for i, t in enumerate(spec.get("tolerations") or []):
        if not isinstance(t, Mapping):
            raise PodSpecError(f"{who}: spec.tolerations[{i}]: expected an object")
        op = t.get("operator") or "Equal"
        tolerations.append({"key": t.get("key") or "", "operator": op,
                            "value": "" if op == "Exists" else (t.get("value") or ""), "effect": t.get("effect") or ""})
    wl["tolerations"] = tolerations
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        terms = required.get("nodeSelectorTerms") or []
        label = _affinity_key(terms)
        where = f"{who}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        if label not in extra_labels:
            extra_labels[label] = {
                n["name"] for n in nodes
                if any(term_matches(t, n["name"], n["labels"], f"{where}.nodeSelectorTerms[{k}]") for k, t in enumerate(terms))
            }
        selector[label] = "true"
    preferred = []
    for i, p in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        weight = int(p.get("weight") or 0)
        pref = p.get("preference") or {}
        label = _affinity_key(pref)
        where = f"{who}: spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
        if label not in extra_labels:
            extra_labels[label] = {n["name"] for n in nodes if term_matches(pref, n["name"], n["labels"], where)}
        if weight:
            preferred.append({"weight": weight, "match_labels": {label: "true"}})
    wl["node_selector"] = selector
    if preferred:
        wl["preferred_node_affinity"] = preferred
    return wl


# --- usage of bound pods -------------------------------------------------------------------


def _parse_cards(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None


def apply_usage(node: dict[str, Any], pods: Iterable[Mapping[str, Any]], resources: Sequence[str], warnings: list[str]) -> None:
    """Fill ``allocated`` and ``gpu_free_milli`` of a node doc from the pods bound to it."""
    alloc = dict.fromkeys(resources, 0.0)
    cards = [GPU_MILLI] * int(node.get("gpus", 0))
    for pod in pods:
        try:
            d = pod_demand(pod, resources)
        except (PodSpecError, QuantityError) as exc:
            warnings.append(f"ignored in usage: {exc}")
            continue
        for r in resources:
            alloc[r] += d.requests.get(r, 0.0)
        if d.gpu_count and cards:
            take = d.gpu_milli if d.gpu_count == 1 else GPU_MILLI
            chosen = _parse_cards((_meta(pod).get("annotations") or {}).get(ANN_GPU_CARDS))
            if not chosen or len(chosen) != d.gpu_count or any(not 0 <= c < len(cards) or cards[c] < take for c in chosen):
                if take < GPU_MILLI:
                    fits = [c for c in range(len(cards)) if cards[c] >= take]
                    chosen = [min(fits, key=lambda c: cards[c])] if fits else []
                else:
                    chosen = [c for c in range(len(cards)) if cards[c] == GPU_MILLI][: d.gpu_count]
                if len(chosen) != d.gpu_count:
                    warnings.append(f"node {node['name']}: pod {obj_key(pod)} holds GPUs the node does not have free")
                    chosen = []
            for c in chosen:
                cards[c] -= take
    for r in resources:
        cap = node["capacity"][r]
        if alloc[r] > cap:
            warnings.append(f"node {node['name']}: {r} requested {alloc[r]:g} exceeds allocatable {cap:g}; clamped")
            alloc[r] = cap
    node["allocated"] = alloc
    node["gpu_free_milli"] = cards


def annotated_usage(node_obj: Mapping[str, Any], node: dict[str, Any], resources: Sequence[str]) -> None:
    """NodeList mode: usage from the ``iro-fed.io/allocated`` node annotation, if any."""
    ann = (_meta(node_obj).get("annotations") or {}).get(ANN_NODE_ALLOCATED)
    alloc = dict.fromkeys(resources, 0.0)
    if ann:
        where = f"node {node['name']}: annotation {ANN_NODE_ALLOCATED}"
        try:
            doc = json.loads(ann)
        except json.JSONDecodeError as exc:
            raise PodSpecError(f"{where}: not JSON: {exc}") from None
        if not isinstance(doc, Mapping):
            raise PodSpecError(f"{where}: expected an object of quantities")
        for r in resources:
            if r in doc:
                alloc[r] = min(resource_amount(r, doc[r], f"{where}.{r}"), node["capacity"][r])
    node["allocated"] = alloc
    node["gpu_free_milli"] = [GPU_MILLI] * int(node.get("gpus", 0))


# --- the snapshot --------------------------------------------------------------------------


@dataclass
class Snapshot:
    """A problem built from the cluster, with the objects behind its rows."""

    problem: Problem
    pods: list[Mapping[str, Any]]  # pending pods, one per workload
    node_objects: dict[str, Mapping[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def node_index(self, name: str) -> int | None:
        return self.problem.node_index.get(name)


class ClusterModel:
    """The cluster part of a problem (nodes and their usage), built once per cluster version;
    :meth:`with_pods` adds pending pods as workloads cheaply (no re-validation of nodes)."""

    def __init__(self, nodes: Sequence[Mapping[str, Any]], bound_pods: Sequence[Mapping[str, Any]] | None,
                 config: ClusterConfig | None = None, doc_cache: dict[tuple, dict[str, Any]] | None = None) -> None:
        """``doc_cache``: parsed node docs by (uid, name, resourceVersion), kept by the caller and
        reused by the next model built from the same Node objects (parsing 5,000 nodes' quantities
        is most of a rebuild)."""
        self.config = config or ClusterConfig()
        res = self.config.resources
        self.warnings: list[str] = []
        self.node_objects: dict[str, Mapping[str, Any]] = {}
        docs = []
        kinds: dict[str, str] = {}
        by_node: dict[str, list[Mapping[str, Any]]] = {}
        for pod in bound_pods or ():
            if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                continue
            node_name = _spec(pod).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(pod)
        for obj in nodes:
            meta = _meta(obj)
            key = (meta.get("uid"), meta.get("name"), meta.get("resourceVersion"))
            base = doc_cache.get(key) if (doc_cache is not None and key[2]) else None
            if base is None:
                base = node_doc(obj, res)
                if doc_cache is not None and key[2]:
                    if len(doc_cache) > 50_000:
                        doc_cache.clear()
                    doc_cache[key] = base
            doc = dict(base)  # usage is set on this copy; the cached parse stays as it was
            if doc["name"] in self.node_objects:
                continue
            self.node_objects[doc["name"]] = obj
            if bound_pods is None:
                annotated_usage(obj, doc, res)
            else:
                apply_usage(doc, by_node.get(doc["name"], ()), res, self.warnings)
            if doc["labels"].get(DOMAIN_KIND_LABEL):
                kinds.setdefault(doc["domain"], doc["labels"][DOMAIN_KIND_LABEL])
            docs.append(doc)
        self.node_docs = docs
        domain_names = list(dict.fromkeys(d["domain"] for d in docs)) or [DEFAULT_DOMAIN]
        self.skeleton = self.config.problem_skeleton(domain_names, docs, kinds)
        self.problem = problem_from_dict(self.skeleton, source="cluster snapshot")
        self._node_pos = {d["name"]: i for i, d in enumerate(docs)}

    def check_pod(self, pod: Mapping[str, Any]) -> None:
        """Raise the error that :meth:`with_pods` would raise for this pod, without building a problem."""
        wl = workload_doc(pod, self.config.resources, self.node_docs, {})
        try:
            problem_from_dict(dict(self.skeleton, nodes=[], workloads=[wl]), source="pending pods")
        except ProblemValidationError as exc:
            raise PodSpecError(_name_pods(exc, [pod])) from None

    def with_pods(self, pods: Sequence[Mapping[str, Any]]) -> Snapshot:
        """A snapshot whose workloads are ``pods`` (pending), in order."""
        extra: dict[str, set[str]] = {}
        wls = [workload_doc(p, self.config.resources, self.node_docs, extra) for p in pods]
        # Workloads are validated by the problem-file loader against an empty cluster of the same
        # domains and resources, then grafted onto the cached cluster problem.
        small_doc = dict(self.skeleton, nodes=[], workloads=wls)
        try:
            small = problem_from_dict(small_doc, source="pending pods")
        except ProblemValidationError as exc:
            raise PodSpecError(_name_pods(exc, pods)) from None
        base = self.problem
        changes: dict[str, Any] = {
            "workloads": small.workloads,
            "demand": small.demand,
            "wl_gpu_count": small.wl_gpu_count,
            "wl_gpu_milli": small.wl_gpu_milli,
        }
        if extra:
            nodes = list(base.nodes)
            for label, names in extra.items():
                for name in names:
                    i = self._node_pos[name]
                    nodes[i] = dc_replace(nodes[i], labels={**nodes[i].labels, label: "true"})
            changes["nodes"] = nodes
        problem = base.replace(**changes)
        return Snapshot(problem, list(pods), self.node_objects, list(self.warnings))


def _name_pods(exc: ProblemValidationError, pods: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for path, msg in exc.errors:
        if path.startswith("workloads["):
            idx = int(path[len("workloads["):path.index("]")])
            rest = path[path.index("]") + 1:].lstrip(".")
            lines.append(f"pod {obj_key(pods[idx])}: {rest}: {msg}")
        else:
            lines.append(f"{path}: {msg}")
    return "; ".join(lines)


def build_snapshot(nodes: Sequence[Mapping[str, Any]], bound_pods: Sequence[Mapping[str, Any]] | None,
                   pending: Sequence[Mapping[str, Any]], config: ClusterConfig | None = None) -> Snapshot:
    """Nodes + bound pods (``None``: usage from node annotations) + pending pods -> snapshot."""
    return ClusterModel(nodes, bound_pods, config).with_pods(pending)


def load_config(path: str | os.PathLike | None) -> ClusterConfig:
    """The cluster config file, or the defaults when no path is given."""
    return ClusterConfig() if path is None else ClusterConfig.load(Path(path))


def assignment_names(snapshot: Snapshot, assignment: np.ndarray) -> dict[str, str | None]:
    """``{namespace/name: node name or None}`` for an assignment over the snapshot's workloads."""
    p = snapshot.problem
    return {w.name: (p.nodes[int(assignment[i])].name if assignment[i] >= 0 else None) for i, w in enumerate(p.workloads)}
