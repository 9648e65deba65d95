"""A placement problem from Kubernetes objects (the JSON the API server returns).

Nodes become the problem's nodes, pods already bound to a node become its ``allocated`` usage,
pending pods become its workloads. Everything is read from plain dicts in the API's JSON form
(``metadata``, ``spec``, ``status`` with camelCase keys), so the same code serves the extender
(pods and nodes arrive in the request body), the scheduler and the webhook (from a watch).

Mapping (documented for users in ``docs/kubernetes.md``):

* node capacity: ``status.allocatable`` (``cpu`` in millicores, ``memory`` in MiB; the other
  resources named in :class:`ClusterConfig` ``resources``: ``pods`` and extended resources as
  whole counts, ``ephemeral-storage`` and hugepages in MiB, everything else in its base unit:
  :func:`model_amount`; a resource the node does not list has none); GPUs: ``nvidia.com/gpu``; GPU model: label
  ``nvidia.com/gpu.product`` (or ``iro-fed.io/gpu-model``);
* domain: the node's zone, else its region, else ``default``, each read as kube-scheduler's
  ``GetZoneKey`` reads it (:data:`ZONE_LABELS`, :data:`REGION_LABELS`: the
  ``failure-domain.beta.kubernetes.io`` label when present, else the ``topology.kubernetes.io``
  one); its kind from the config or the node label ``iro-fed.io/domain-kind``;
* taints as given; ``spec.unschedulable`` adds ``node.kubernetes.io/unschedulable:NoSchedule``
  (what the node lifecycle controller does) unless the node has it already, and is a cordon
  ("node(s) were unschedulable", NodeUnschedulable); that taint on a node without
  ``spec.unschedulable`` (uncordoned, before the controller removes it) is an ordinary taint
  ("node(s) had untolerated taint {node.kubernetes.io/unschedulable: }", TaintToleration): the
  node gets the label ``iro-fed.io/unschedulable: "false"`` (:data:`UNSCHEDULABLE_LABEL`, which
  the snapshot alone sets: a node's own is dropped);
* a pod's request (:func:`pod_requests`, also the edge agent's reader): the sum over containers
  (plus restartable init containers, i.e. sidecars), or the largest init container if that is
  more, plus ``spec.overhead`` (kube's ``PodRequests``); a container without a request but with
  a limit requests its limit; pod-level ``spec.resources.requests`` (PodLevelResources) replace
  the containers' sum for cpu, memory and hugepages; summed exactly and rounded up once per pod
  (cpu to a whole millicore, memory to a whole byte, as kube's ``MilliValue`` / ``Value`` of the
  pod's total); ``pods`` is 1; alongside it the pod's non-zero cpu / memory
  request for kube-scheduler's scoring (:func:`nonzero_requests`), for pending pods
  (``Problem.nonzero_demand``) and summed per node over the bound pods
  (``Problem.initial_nonzero``, kube's ``NodeInfo.NonZeroRequested``); during an in-place
  resize a container counts the largest of its spec, allocated and actuated request (the spec
  left out when the resize is infeasible), as kube's ``UseStatusResources``, and so does a
  pod-level request during a pod-level resize (pod ``status.resources`` / ``allocatedResources``);
* GPU: ``nvidia.com/gpu: k`` takes k whole cards; the pod annotation ``iro-fed.io/gpu-milli``
  (1..1000, read as Go's ``strconv.Atoi`` reads it) asks for that share of one card instead;
  ``iro-fed.io/gpu-cards`` on a bound pod (written by IRO's scheduler through the Binding:
  ASCII digits and commas only) says which cards it holds; one it cannot be is ignored (first fit)
  and logged once per node and value; so are the other usage warnings (a bound pod left out of
  usage, GPUs held that the node does not have free, usage clamped to allocatable), once per node
  and pod or resource, while each model's ``warnings`` lists them all;
* node selector, tolerations, required and preferred node affinity (all operators, including
  ``matchFields`` on ``metadata.name``); pod annotations ``iro-fed.io/user-region``,
  ``iro-fed.io/max-latency-ms``, ``iro-fed.io/class``, ``iro-fed.io/allowed-domains``,
  ``iro-fed.io/gpu-models`` carry the model's own constraints (stripped; empty or blank reads as
  absent; an error on one names the annotation); ``iro-fed.io/max-latency-ms`` is a number in
  JSON syntax (:func:`annotation_number`: ``250``, ``12.5``, ``1e3``; not ``1_0``, ``+5``, ``nan``).

A field of the wrong type raises :class:`PodSpecError` whose ``field`` is its JSON path, never a
TypeError from deep inside; so does a container name that is missing, not a DNS-1123 label, or
repeated across ``spec.containers`` and ``spec.initContainers`` (the API server refuses such a
pod). ``spec.ephemeralContainers`` are not read: kube's ``PodRequests`` does not count them.

Affinity terms that are more than label equality are evaluated here, against each node, and
handed to the model as a synthetic node label (``iro-fed.io/affinity-<hash>``) that the pod
selects, so the one feasibility module enforces them and reports kube's message
("didn't match Pod's node affinity/selector"). A required affinity whose every term has
``matchFields`` ``metadata.name In [...]`` (a DaemonSet pod's) also gets the label
``iro-fed.io/node-names-<hash>`` on the nodes NodeAffinity's PreFilter narrows it to
(:func:`prefilter_node_names`): the others are "didn't satisfy plugin(s) [NodeAffinity]". When
those names conflict (every term's intersection is empty) the pod selects
``iro-fed.io/node-names-conflict-<hash>``, which no node has: PreFilter's "pod affinity terms
conflict" is then the whole message, as kube's.

The plugins that filter a node by the pods already on it are evaluated here too, against the bound
(and assumed) pods, and handed over the same way (feasibility's ``POD_FILTER_PREFIXES``, each with
kube's reason): NodePorts (host ports of the app containers and sidecars, ``0.0.0.0`` conflicting
with every address), PodTopologySpread (``whenUnsatisfiable: DoNotSchedule`` constraints with
``minDomains``, ``matchLabelKeys``, ``nodeAffinityPolicy`` and ``nodeTaintsPolicy``), and
InterPodAffinity (the pod's required affinity, with kube's rule for the first pod of a series that
matches its own terms, its required anti-affinity, and the bound pods' required anti-affinity
against it; a ``namespaceSelector`` is read against the namespace's ``kubernetes.io/metadata.name``
label only: no Namespace objects are watched). Only pods with such rules, or every pod while some
bound pod has required anti-affinity, pay for it (:meth:`ClusterModel.placement_conflict` checks a
batch's placements against each other).

What kube-scheduler's PodTopologySpread and InterPodAffinity *score* goes to ``Problem.pod_scoring``
(:func:`pod_scoring`, read by ``kube-default``): the pending pods' ScheduleAnyway constraints (with
``matchLabelKeys`` and the node inclusion policies), the system default constraints for a pod
without constraints that a ReplicaSet, StatefulSet or ReplicationController controls (its
controller ownerReference stands in for the selectors kube collects from Services and
controllers), the pods' preferred pod affinity and anti-affinity, and the bound and pending pods'
terms that select each pending pod (preferred ones with their weight, required affinity with
weight 1), as groups of pods counted per node and topology rows per node label key. A snapshot
without any of these has none.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import heapq
import json
import logging
import operator
import os
import re
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from decimal import ROUND_CEILING, Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np

# ZONE_LABELS, REGION_LABELS and topology_label live in the core (the solvers read them too);
# importable from here as before.
from iro_fed.feasibility import (
    NODE_NAMES_CONFLICT_PREFIX,
    NODE_NAMES_LABEL_PREFIX,
    REGION_LABELS,
    UNSCHEDULABLE_LABEL,
    UNSCHEDULABLE_TAINT,
    ZONE_LABELS,
    topology_label,
)
from iro_fed.k8s.quantity import MIB, QuantityError, count, parse_quantity
from iro_fed.model import (
    GPU_MILLI,
    NONZERO_DEFAULTS,
    NONZERO_RESOURCES,
    SPREAD_CONTROLLER_KINDS,
    SYSTEM_DEFAULT_SPREAD,
    PodScoring,
    Problem,
    SoftPodTerm,
    Taint,
    Toleration,
)
from iro_fed.problem_io import (
    DNS_LABEL,
    MAX_GPUS,
    MAX_NUMBER,
    MIN_CAPACITY,
    ProblemValidationError,
    json_kind,
    load_document,
    problem_from_dict,
)

log = logging.getLogger("iro_fed.k8s.snapshot")

PREFIX = "iro-fed.io/"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MODEL_LABELS = ("nvidia.com/gpu.product", "iro-fed.io/gpu-model")
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
    """A pod or node object the model cannot read; the message names the object and field.

    ``field`` is the JSON path inside the object (``spec.containers[0].resources.requests.cpu``;
    empty when no one field is at fault) and ``reason`` the message without object and path, so
    a caller can put the path in its own frame (the edge agent answers ``pod.<field>``).
    """

    def __init__(self, message: str, field: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason or message


def _bad(who: str, path: str, reason: str) -> PodSpecError:
    """``<who>: <path>: <reason>`` (``pod shop/web: spec.priority: expected an integer ...``)."""
    where = ": ".join(x for x in (who, path) if x)
    return PodSpecError(f"{where}: {reason}" if where else reason, path, reason)


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
        # Shapes first (a list where a map belongs would crash the conversions below); the values
        # are checked by the problem loader through the skeleton.
        domains = doc.get("domains") or {}
        if isinstance(domains, list):
            for i, d in enumerate(domains):
                if not isinstance(d, Mapping):
                    errors.append((f"domains[{i}]", f"expected an object, got {type(d).__name__}"))
                elif not isinstance(d.get("name"), str) or not d.get("name"):
                    errors.append((f"domains[{i}].name", "expected a non-empty string"))
            if not errors:
                domains = {d["name"]: {k: v for k, v in d.items() if k != "name"} for d in domains}
        elif isinstance(domains, Mapping):
            errors.extend((f"domains.{name}", f"expected a map of the domain's fields, got {type(d).__name__}")
                          for name, d in domains.items() if not isinstance(d, Mapping))
        else:
            errors.append(("domains", "expected a list or a map of domains"))
        resources = doc.get("resources") or ["cpu", "memory"]
        if not isinstance(resources, list):
            errors.append(("resources", f"expected a list of resource names, got {type(resources).__name__}"))
        for key in ("latency_ms", "weights"):
            if not isinstance(doc.get(key) or {}, Mapping):
                errors.append((key, f"expected a map, got {type(doc.get(key)).__name__}"))
        if isinstance(doc.get("latency_ms"), Mapping):
            errors.extend((f"latency_ms.{region}", f"expected a map of domain -> ms, got {type(row).__name__}")
                          for region, row in doc["latency_ms"].items() if not isinstance(row, Mapping))
        if errors:
            raise ProblemValidationError(errors, source)
        cfg = cls(tuple(resources), dict(domains), dict(doc.get("latency_ms") or {}), dict(doc.get("weights") or {}),
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
    """``namespace/name`` of an object (``name`` for cluster-scoped ones); lenient, for messages:
    metadata that is not an object or names that are not strings read as empty."""
    meta = _meta(obj)
    name = meta.get("name")
    name = name if isinstance(name, str) else ""
    ns = meta.get("namespace")
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


def obj_uid(obj: Mapping[str, Any]) -> str | None:
    """An object's ``metadata.uid`` (None without one or without a metadata object)."""
    meta = obj.get("metadata")
    return meta.get("uid") if isinstance(meta, Mapping) else None


def _meta(obj: Any) -> Mapping[str, Any]:
    m = obj.get("metadata") if isinstance(obj, Mapping) else None
    return m if isinstance(m, Mapping) else {}


def _spec(obj: Any) -> Mapping[str, Any]:
    s = obj.get("spec") if isinstance(obj, Mapping) else None
    return s if isinstance(s, Mapping) else {}


def _obj(value: Any, who: str, path: str, *, required: bool = False) -> Mapping[str, Any]:
    """An object field; absent (``None``) reads as empty unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(who, path, f"expected an object, got {json_kind(value)}")
    return value


def _items(value: Any, who: str, path: str) -> list[Any]:
    """A list field; absent (``None``) reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(who, path, f"expected a list, got {json_kind(value)}")
    return value


def _opt_str(obj: Mapping[str, Any], key: str, who: str, path: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(who, f"{path}.{key}", f"expected a string, got {json_kind(value)} {value!r}")
    return value


def _str_map(value: Any, who: str, path: str) -> dict[str, str]:
    """Labels, annotations, a node selector: an object of strings (as the API validates them)."""
    out = {}
    for k, v in _obj(value, who, path).items():
        if not isinstance(v, str):
            raise _bad(who, f"{path}.{k}", f"expected a string, got {json_kind(v)} {v!r}")
        out[str(k)] = v
    return out


def annotation_list(annotations: Mapping[str, str], key: str, who: str = "") -> list[str] | None:
    """A comma-list pod annotation (``iro-fed.io/allowed-domains: "eu,us"``), entries stripped;
    None when absent, empty or blank (an empty value reads as absent, as documented). An
    empty entry (``"a100,"``, ``"eu,,us"``, ``","``) is a :class:`PodSpecError` naming the
    annotation and the entry's position: dropped, ``","`` read as ``[]``, which is no restriction
    at all. The reader of the scheduler, extender, webhook and edge agent."""
    text = annotations.get(key)
    if text is None or not text.strip():
        return None
    parts = [p.strip() for p in text.split(",")]
    for i, part in enumerate(parts, start=1):
        if not part:
            raise _bad(who, f"metadata.annotations.{key}",
                       f"empty entry at position {i} of {len(parts)} in {_shown(text, 80)!r}: each ',' must separate two names")
    return parts


#: The scalar pod annotations and the workload field each one sets (:func:`annotation_value`);
#: the loader's errors on those fields name the annotation (:func:`annotation_path`).
_SCALAR_ANNOTATIONS = {ANN_CLASS: "class", ANN_USER_REGION: "user_region", ANN_MAX_LATENCY: "max_latency_ms"}


def annotation_value(annotations: Mapping[str, str], key: str) -> str | None:
    """A scalar pod annotation (``iro-fed.io/class: batch``), stripped; None when absent, empty or
    blank, as :func:`annotation_list` reads an empty or blank list (``"  "`` was a class or a user
    region of two spaces, refused by the loader under the workload's field name, not the annotation's)."""
    text = annotations.get(key)
    if text is None or not text.strip():
        return None
    return text.strip()


#: A number annotation (``iro-fed.io/max-latency-ms``) in JSON number syntax, ASCII only: Kubernetes
#: has no rule for numbers in annotations, and ``float()`` also took ``"1_0"`` (10), ``"+5"``,
#: ``"nan"``, ``"inf"``, ``"\u0665"`` (Arabic-Indic 5), ``".5"`` and ``"5."``.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def annotation_number(text: str) -> float:
    """A number annotation's value (already stripped, as :func:`annotation_value` gives it) as a
    float: JSON number syntax (``250``, ``12.5``, ``1e3``, ``-3``) and finite, else ValueError
    saying so; the range (``> 0``) is the problem loader's check. The edge agent reads it so too."""
    if not _JSON_NUMBER.fullmatch(text):
        raise ValueError(
            f"expected a number, got {_shown(text, 80)!r} (JSON number syntax: digits with an optional "
            "fraction and exponent, e.g. 250 or 12.5)"
        )
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"expected a number, got {_shown(text, 80)!r} (out of range)")
    return value


def metadata_error(meta: Mapping[str, Any], string_keys: Iterable[str]) -> tuple[str, str] | None:
    """The first field of an object's ``metadata`` a server reads that has not its kube type, as
    (path inside metadata, why), or None: each of ``string_keys`` a string when given, ``labels``
    and ``annotations`` objects of strings. For request checks (the extender's and the webhook's)."""
    for k in string_keys:
        if meta.get(k) is not None and not isinstance(meta[k], str):
            return k, f"expected a string, got {json_kind(meta[k])}"
    for k in ("labels", "annotations"):
        m = meta.get(k)
        if m is None:
            continue
        if not isinstance(m, dict):
            return k, f"expected an object of strings, got {json_kind(m)}"
        for key, v in m.items():
            if not isinstance(v, str):
                return f"{k}.{key}", f"expected a string, got {json_kind(v)}"
    return None


#: Arithmetic on exact quantities: a quantity is at most 2^63 - 1 with 9 decimals (nano), so
#: 60 digits hold any sum of a pod's containers without rounding (the default context has 28).
_EXACT = Context(prec=60)


def _memory_like(resource: str) -> bool:
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def exact_amount(resource: str, value: Any, where: str) -> Decimal:
    """One quantity, exact (not rounded), in the unit kube rounds it to: ``cpu`` in millicores;
    ``memory``, ``ephemeral-storage`` and hugepages in bytes; ``pods`` and extended resources as
    whole counts; anything else in its base unit. Raises :class:`QuantityError` (a negative
    quantity too). Pod requests are summed exactly and rounded once (:func:`model_amount`), as
    kube sums ``resource.Quantity`` values in ``PodRequests`` and rounds the pod's total."""
    if resource == "pods" or "/" in resource:
        return Decimal(count(value, where))
    q = parse_quantity(value, where)
    if q < 0:
        raise QuantityError(where, value, "must not be negative")
    return q.scaleb(3, context=_EXACT) if resource == "cpu" else q


def model_amount(resource: str, exact: Decimal) -> float:
    """An exact amount (:func:`exact_amount`, or a sum of them) in the model's unit, rounded up
    as kube rounds a quantity: cpu to whole millicores (``MilliValue``), memory-like resources to
    whole bytes (``Value``) before the conversion to MiB."""
    if resource == "cpu":
        return float(int(exact.to_integral_value(rounding=ROUND_CEILING)))
    if _memory_like(resource):
        return int(exact.to_integral_value(rounding=ROUND_CEILING)) / MIB
    return float(exact)


def _amount(resource: str, value: Any, who: str, path: str) -> float:
    """One quantity in the model's unit for ``resource``, the error as a :class:`PodSpecError`
    naming ``path``.

    The one unit table: ``cpu`` in millicores; ``memory``, ``ephemeral-storage`` and hugepages in
    MiB; ``pods`` and extended resources (``vendor/name``, ``nvidia.com/gpu``) as whole counts;
    anything else in its base unit. Rounded up as kube rounds one quantity (a node's
    allocatable: ``NewResource``); a pod's request is rounded once, on its total.
    """
    return model_amount(resource, _exact(resource, value, who, path))


def _exact(resource: str, value: Any, who: str, path: str) -> Decimal:
    """:func:`exact_amount` with the error as a :class:`PodSpecError` naming ``path``."""
    try:
        return exact_amount(resource, value, "")
    except QuantityError as exc:  # its message without a field: the path goes in _bad's frame
        raise _bad(who, path, str(exc)) from None


# --- nodes ---------------------------------------------------------------------------------


def node_domain(labels: Mapping[str, str]) -> str:
    return topology_label(labels, ZONE_LABELS) or topology_label(labels, REGION_LABELS) or DEFAULT_DOMAIN


def node_doc(node: Mapping[str, Any], resources: Sequence[str]) -> dict[str, Any]:
    """A problem-file node (no usage yet) from a v1.Node."""
    if not isinstance(node, Mapping):
        raise _bad("node", "", f"expected a v1.Node object, got {json_kind(node)}")
    meta = _obj(node.get("metadata"), "node", "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise _bad("node", "metadata.name", "is missing" if name is None else f"expected a non-empty string, got {json_kind(name)} {name!r}")
    who = f"node {name}"
    labels = _str_map(meta.get("labels"), who, "metadata.labels")
    status = _obj(node.get("status"), who, "status")
    path = "status.allocatable" if status.get("allocatable") else "status.capacity"
    alloc = _obj(status.get("allocatable") or status.get("capacity"), who, path)
    capacity: dict[str, float] = {}
    for r in resources:
        # A resource the node does not list is allocatable 0, as kube's NewResource reads it
        # (an extended resource such as example.com/fpga is only on the nodes that have it).
        capacity[r] = _amount(r, alloc[r], who, f"{path}.{r}") if r in alloc else 0.0
        if capacity[r] <= 0:
            # The model needs capacity > 0 (at least MIN_CAPACITY, or the problem does not load):
            # a node with none of a resource takes no pod asking for it (a request is a whole
            # millicore / count, or a byte: only a pod of 1 byte would fit), and kube-default
            # reads MIN_CAPACITY as allocatable 0.
            capacity[r] = MIN_CAPACITY
    gpus = int(_amount(GPU_RESOURCE, alloc[GPU_RESOURCE], who, f"{path}.{GPU_RESOURCE}")) if GPU_RESOURCE in alloc else 0
    if gpus > MAX_GPUS:  # checked here: the usage builds a list of cards ("1E" GPUs: a MemoryError)
        raise _bad(who, f"{path}.{GPU_RESOURCE}", f"at most {MAX_GPUS} GPUs per node (the model's limit), got {gpus}")
    spec = _obj(node.get("spec"), who, "spec")
    taints = []
    for i, t in enumerate(_items(spec.get("taints"), who, "spec.taints")):
        tp = f"spec.taints[{i}]"
        t = _obj(t, who, tp, required=True)
        if not _opt_str(t, "key", who, tp):
            raise _bad(who, f"{tp}.key", "required")
        taints.append({"key": t["key"], "value": _opt_str(t, "value", who, tp) or "",
                       "effect": _opt_str(t, "effect", who, tp) or "NoSchedule"})
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise _bad(who, "spec.unschedulable", f"expected a boolean, got {json_kind(unschedulable)} {unschedulable!r}")
    cordon = {"key": UNSCHEDULABLE_TAINT.key, "value": UNSCHEDULABLE_TAINT.value, "effect": UNSCHEDULABLE_TAINT.effect}
    if unschedulable and cordon not in taints:  # the node lifecycle controller has usually added it already
        taints.append(cordon)
    if UNSCHEDULABLE_LABEL in labels:  # ours to set: a node's own would say what its spec does not
        labels = {k: v for k, v in labels.items() if k != UNSCHEDULABLE_LABEL}
    if not unschedulable and cordon in taints:
        # Uncordoned, the taint not yet removed: kube's NodeUnschedulable reads spec.unschedulable
        # only, so the taint is TaintToleration's ("untolerated taint {...unschedulable: }").
        labels = {**labels, UNSCHEDULABLE_LABEL: "false"}
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


def node_cache_key(node: Any) -> tuple[str, str, str] | None:
    """``(uid, name, resourceVersion)`` of a v1.Node, the key of a parsed node doc; ``None`` when
    the node has no resourceVersion (nothing says two such objects are the same version).

    Only strings are keys: a ``resourceVersion`` of ``1`` and one of ``true`` would hash alike
    (``1 == True``) and hit each other's entry, and a list would not hash at all, so a
    non-string ``uid``, ``name`` or ``resourceVersion`` is a :class:`PodSpecError`.
    """
    if not isinstance(node, Mapping):
        raise _bad("node", "", f"expected a v1.Node object, got {json_kind(node)}")
    meta = _obj(node.get("metadata"), "node", "metadata")
    name = meta.get("name")
    who = f"node {name}" if isinstance(name, str) and name else "node"
    uid, name, version = (_opt_str(meta, k, who, "metadata") for k in ("uid", "name", "resourceVersion"))
    return (uid or "", name or "", version) if version else None


# --- pods ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodDemand:
    """What a pod asks for, in model units."""

    requests: dict[str, float]
    gpu_count: int = 0
    gpu_milli: int = 0
    #: kube's non-zero (cpu, memory) request (:func:`nonzero_requests`), for scoring only.
    nonzero: tuple[float, float] = (0.0, 0.0)


def _request_names(resources: Sequence[str]) -> tuple[str, ...]:
    """The names a container request is read for: the problem's resources (but ``pods``, which
    counts pods, not container requests) and ``nvidia.com/gpu``."""
    return tuple(dict.fromkeys(r for r in (*resources, GPU_RESOURCE) if r != "pods"))


def requested_names(pod: Mapping[str, Any]) -> set[str]:
    """Every resource name ``pod`` requests or limits (containers, init containers, ``spec.overhead``
    and pod-level ``spec.resources``) but ``pods`` and ``nvidia.com/gpu``, which the model always
    reads. Lenient: a field of the wrong type names nothing (the full parse reports it)."""
    spec = _spec(pod)
    maps: list[Any] = [spec.get("overhead")]
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else ():
            res = c.get("resources") if isinstance(c, Mapping) else None
            if isinstance(res, Mapping):
                maps += [res.get("requests"), res.get("limits")]
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        maps += [pod_level.get("requests"), pod_level.get("limits")]
    names = {k for m in maps if isinstance(m, Mapping) for k in m if isinstance(k, str) and _RESOURCE_NAME.fullmatch(k)}
    return names - {"pods", "gpu", GPU_RESOURCE}


# A resource name the API server accepts (a qualified name, optionally prefixed by a DNS subdomain);
# another key cannot come from the API, and is not made a problem resource.
_RESOURCE_NAME = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def feasibility_resources(configured: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                          by_node: Mapping[str, Sequence[Mapping[str, Any]]],
                          pending: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The problem's resources for placing ``pending``: the configured ones, then each other one a
    pending pod requests (kube's NodeResourcesFit checks every requested resource: a node that
    does not list it has 0), then ``pods`` when a node has fewer free pod slots than there are
    pending pods (kube's "Too many pods"). The added ones bound fit only (the problem's
    ``feasibility_only``): a placement scores the same with or without them."""
    return _widened_resources(configured, pending, lambda wanted: _short_of_pod_slots(nodes, by_node, wanted))


def _widened_resources(configured: Sequence[str], pending: Sequence[Mapping[str, Any]],
                       short_of_slots: Callable[[int], bool]) -> tuple[str, ...]:
    """:func:`feasibility_resources`' rule, the slot check given (``short_of_slots(n)``: whether some
    node has fewer than ``n`` pod slots free; asked only when ``pods`` would be added), so that
    :meth:`ClusterModel.for_pods` applies the same rule with its memo of that check."""
    extra = sorted(set().union(*(requested_names(p) for p in pending)) - set(configured)) if pending else []
    res = (*configured, *extra)
    if "pods" not in res and pending and short_of_slots(len(pending)):
        res = (*res, "pods")
    return tuple(res)


def _allocatable(node: Any) -> Mapping[str, Any] | None:
    """A v1.Node's ``status.allocatable`` (else ``status.capacity``), leniently: None when it is not
    an object (the full parse, :func:`node_doc`, reports it)."""
    status = node.get("status") if isinstance(node, Mapping) else None
    alloc = (status.get("allocatable") or status.get("capacity")) if isinstance(status, Mapping) else None
    return alloc if isinstance(alloc, Mapping) else None


def _short_of_pod_slots(nodes: Sequence[Mapping[str, Any]], by_node: Mapping[str, Sequence[Mapping[str, Any]]],
                        wanted: int) -> bool:
    """Whether some node has fewer than ``wanted`` pod slots free (allocatable ``pods`` less the
    pods counted on it); a node whose ``pods`` cannot be read counts as short (the full parse
    reports it, or reads it as 0)."""
    for node in nodes:
        name = _meta(node).get("name")
        alloc = _allocatable(node)
        if alloc is None or "pods" not in alloc:
            return True
        try:
            slots = _amount("pods", alloc["pods"], "node", "pods")
        except (PodSpecError, QuantityError):
            return True
        if slots - len(by_node.get(name, ()) if isinstance(name, str) else ()) < wanted:
            return True
    return False


def _container_exact(container: Any, resources: Sequence[str], field: str, who: str) -> dict[str, Decimal]:
    """One container's requests, exact (:func:`exact_amount`), for the names of ``resources``
    (but ``pods``) and ``nvidia.com/gpu``; a resource without a request but with a limit
    requests its limit (API defaulting). ``field`` is the container's JSON path
    (``spec.containers[0]``) and ``who`` the object errors name (``pod shop/web``)."""
    c = _obj(container, who, field, required=True)
    res = _obj(c.get("resources"), who, f"{field}.resources")
    req = _obj(res.get("requests"), who, f"{field}.resources.requests")
    lim = _obj(res.get("limits"), who, f"{field}.resources.limits")
    out: dict[str, Decimal] = {}
    for r in _request_names(resources):
        if r in req:
            out[r] = _exact(r, req[r], who, f"{field}.resources.requests.{r}")
        elif r in lim:  # API defaulting: a limit without a request requests the limit
            out[r] = _exact(r, lim[r], who, f"{field}.resources.limits.{r}")
    return out


def _add(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v  # int 0: the values may be Decimals, which do not add to floats
    return out


def _max(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        # not max(out.get(k, 0), v): for v == Decimal(0) that keeps the int 0, which model_amount refuses
        out[k] = v if k not in out else max(out[k], v)
    return out


def effective_requests(containers: Iterable[Mapping[str, Any]], init_containers: Iterable[tuple[Mapping[str, Any], bool]],
                       overhead: Mapping[str, Any]) -> dict[str, Any]:
    """kube's ``resourcehelper.PodRequests`` from parsed requests: ``init_containers`` are
    ``(requests, is_sidecar)`` in spec order (a sidecar has ``restartPolicy: Always`` and keeps
    running next to the app). The values are numbers of one kind: floats, or the exact
    Decimals of :func:`exact_amount` (as the snapshot calls it, rounding the total once).

    ``max(sum(containers) + sum(sidecars), max_i(init_i + sidecars started before i)) + overhead``.
    The one place this formula lives: the snapshot and the agent's ``/recommend`` both use it.
    """
    total: dict[str, Any] = {}
    for req in containers:
        total = _add(total, req)
    init_max: dict[str, Any] = {}
    sidecars: dict[str, Any] = {}
    for req, is_sidecar in init_containers:
        if is_sidecar:
            sidecars = _add(sidecars, req)
            init_max = _max(init_max, sidecars)
        else:
            init_max = _max(init_max, _add(sidecars, req))
    return _add(_max(_add(total, sidecars), init_max), overhead)


def _who(pod: Any) -> str:
    """``pod namespace/name`` for messages (``pod`` when the object has no readable name)."""
    key = obj_key(pod) if isinstance(pod, Mapping) else ""
    return f"pod {key}" if key else "pod"


#: What kube-scheduler's scoring counts for a container without a cpu / memory request,
#: :data:`iro_fed.model.NONZERO_DEFAULTS` (model units: millicores, MiB) exact in the units of
#: :func:`exact_amount` (millicores, bytes): 100m, 200 MiB.
NONZERO_EXACT = {r: Decimal(v) * (MIB if _memory_like(r) else 1) for r, v in NONZERO_DEFAULTS.items()}


def _pod_level_resource(resource: str) -> bool:
    """Whether pod-level ``spec.resources`` may name ``resource`` (kube's
    ``IsSupportedPodLevelResource``: cpu, memory, hugepages)."""
    return resource in ("cpu", "memory") or resource.startswith("hugepages-")


def _with_pod_level(containers_total: Mapping[str, Decimal], pod_level: Mapping[str, Decimal],
                    overhead: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """The end of ``PodRequests``: the pod-level requests replace the containers' aggregate for
    the resources they name (``applyPodLevelResources``), then the overhead is added."""
    return _add({**containers_total, **pod_level}, overhead)


def nonzero_requests(containers: Iterable[Mapping[str, Decimal]], init_containers: Iterable[tuple[Mapping[str, Decimal], bool]],
                     overhead: Mapping[str, Decimal], resources: Sequence[str],
                     pod_level: Mapping[str, Decimal] | None = None) -> tuple[float, float]:
    """The pod's non-zero (cpu, memory) request that kube-scheduler scores with
    (``NodeInfo.update`` / ``calculateResource`` and ``resource_allocation.go``): ``PodRequests``
    with ``NonMissingContainerRequests``, i.e. :func:`effective_requests` after each container
    (app, init and sidecar alike) that has no cpu / memory request at all gets
    :data:`NONZERO_EXACT` for it. Only a *missing* request is replaced: an explicit ``0``
    stays 0, and a limit without a request already is a request (API defaulting,
    :func:`_container_exact`). A pod-level request (``pod_level``, PodLevelResources) replaces
    the containers' sum, defaults and all, for the resource it names; overhead is added as is.
    The requests are exact (:func:`exact_amount`); the result is in model units, rounded up once.
    A column whose resource is not in ``resources`` is 0 (nothing scores it)."""
    def fill(req: Mapping[str, Decimal]) -> dict[str, Decimal]:
        out = dict(req)
        for r in NONZERO_RESOURCES:
            if r in resources and r not in req:
                out[r] = NONZERO_EXACT[r]
        return out

    with localcontext(_EXACT):
        aggregate = effective_requests([fill(c) for c in containers], [(fill(r), side) for r, side in init_containers], {})
        total = _with_pod_level(aggregate, pod_level or {}, overhead)
    cpu, mem = (model_amount(r, total[r]) if r in resources and r in total else 0.0 for r in NONZERO_RESOURCES)
    return cpu, mem


def _misses_a_scored_request(apps: list[dict[str, Decimal]], inits: list[tuple[dict[str, Decimal], bool]],
                             resources: Sequence[str]) -> bool:
    """Whether some container lacks a cpu / memory request that :func:`nonzero_requests` would fill."""
    scored = [r for r in NONZERO_RESOURCES if r in resources]
    return any(r not in req for req in (*apps, *(req for req, _ in inits)) for r in scored)


@dataclass
class _PodParts:
    """A pod's parsed requests, exact (:func:`exact_amount`), as ``PodRequests`` combines them."""

    apps: list[dict[str, Decimal]]
    inits: list[tuple[dict[str, Decimal], bool]]  # with the sidecar flag (restartPolicy: Always)
    overhead: dict[str, Decimal]
    pod_level: dict[str, Decimal]  # spec.resources.requests (after API defaulting), supported names only

    def total(self) -> dict[str, Decimal]:
        """kube's ``PodRequests``, exact."""
        with localcontext(_EXACT):
            return _with_pod_level(effective_requests(self.apps, self.inits, {}), self.pod_level, self.overhead)


#: The pod condition that says the kubelet cannot grant a resize (and, before k8s 1.33,
#: ``status.resize``): kube then counts what the containers have, not what the spec asks.
RESIZE_PENDING = "PodResizePending"


def _status_requests(pod: Mapping[str, Any], resources: Sequence[str],
                     who: str) -> tuple[dict[str, tuple[dict[str, Decimal] | None, dict[str, Decimal] | None]], bool]:
    """In-place resize (InPlacePodVerticalScaling, on by default since k8s 1.33): for each container
    status (``status.containerStatuses`` and ``initContainerStatuses``, by name, the first of a
    name as kube's ``findContainerStatus``) its ``allocatedResources`` and actuated
    ``resources.requests`` (``None`` when absent), exact; and whether the resize is infeasible."""
    status = _obj(pod.get("status"), who, "status")
    names = _request_names(resources)
    out: dict[str, tuple[dict[str, Decimal] | None, dict[str, Decimal] | None]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, cs in enumerate(_items(status.get(key), who, f"status.{key}")):
            path = f"status.{key}[{i}]"
            cs = _obj(cs, who, path, required=True)
            name = _opt_str(cs, "name", who, path) or ""
            lists: list[dict[str, Decimal] | None] = []
            for sub, value in (("allocatedResources", cs.get("allocatedResources")),
                               ("resources.requests", _obj(cs.get("resources"), who, f"{path}.resources").get("requests"))):
                if value is None:
                    lists.append(None)
                    continue
                value = _obj(value, who, f"{path}.{sub}")
                lists.append({r: _exact(r, value[r], who, f"{path}.{sub}.{r}") for r in names if r in value})
            if name not in out and lists != [None, None]:
                out[name] = (lists[0], lists[1])
    infeasible = status.get("resize") == "Infeasible"
    for i, cond in enumerate(_items(status.get("conditions"), who, "status.conditions")):
        cond = _obj(cond, who, f"status.conditions[{i}]", required=True)
        if cond.get("type") == RESIZE_PENDING:
            infeasible = cond.get("reason") == "Infeasible"
            break
    return out, infeasible


def _resized(spec: dict[str, Decimal], status: tuple[dict[str, Decimal] | None, dict[str, Decimal] | None],
             infeasible: bool) -> dict[str, Decimal]:
    """A container's request during an in-place resize, as kube-scheduler counts it
    (``resourcehelper`` with ``UseStatusResources``): the largest of the spec's request, the
    allocated and the actuated one, so a bound pod shrinking in place keeps its old size on the
    node until the kubelet has actuated the new one; with the resize infeasible the spec is not
    counted (it will not be granted), only what is allocated and actuated."""
    allocated, actuated = status
    if actuated is None:
        actuated = allocated
    out: dict[str, Decimal] = {} if infeasible else dict(spec)
    for req in (allocated, actuated):
        out = _max(out, req or {})
    return out


def _shown(text: str, limit: int = 20) -> str:
    """``text`` for a message, cut after ``limit`` characters (a value may be megabytes long)."""
    return text if len(text) <= limit else text[:limit] + "..."


def _check_container_name(name: str, who: str, path: str) -> None:
    """A container name as the API server validates it (``validateContainerCommon``): required, a
    DNS-1123 label of at most 63 characters; the error is kube's, at ``path``."""
    if not name:
        raise _bad(who, path, "Required value")
    if len(name) > 63:
        raise _bad(who, path, f"Invalid value: {_shown(name, 63)!r}: must be no more than 63 characters, got {len(name)}")
    if not DNS_LABEL.fullmatch(name):
        raise _bad(who, path, f"Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case "
                              "alphanumeric characters or '-', and must start and end with an alphanumeric character")


def _pod_parts(pod: Mapping[str, Any], resources: Sequence[str]) -> _PodParts:
    """A pod's parsed requests: app containers, init containers with their sidecar flag,
    overhead and pod-level requests, exact, with every error naming its JSON path."""
    who = _who(pod)
    if not isinstance(pod, Mapping):
        raise _bad(who, "", f"expected a v1.Pod object, got {json_kind(pod)}")
    spec = _obj(pod.get("spec"), who, "spec")
    statuses, infeasible = _status_requests(pod, resources, who)

    names: set[str] = set()

    def container(c: Any, path: str) -> dict[str, Decimal]:
        req = _container_exact(c, resources, path, who)
        name = _opt_str(c, "name", who, path) or ""
        _check_container_name(name, who, f"{path}.name")
        # The API server refuses a repeated name (its statuses, found by name, would be ambiguous);
        # it reports the later one, an init container's when it repeats an app container's.
        if name in names:
            raise _bad(who, f"{path}.name", f"Duplicate value: {name!r} (containers and init containers share one namespace)")
        names.add(name)
        status = statuses.get(name)
        return _resized(req, status, infeasible) if status else req

    apps = [container(c, f"spec.containers[{i}]") for i, c in enumerate(_items(spec.get("containers"), who, "spec.containers"))]
    inits = []
    for i, c in enumerate(_items(spec.get("initContainers"), who, "spec.initContainers")):
        path = f"spec.initContainers[{i}]"
        # The field's type before the name's value: an unreadable field is reported as such first.
        sidecar = _opt_str(_obj(c, who, path, required=True), "restartPolicy", who, path) == "Always"
        inits.append((container(c, path), sidecar))
    # spec.ephemeralContainers are not read: kube's PodRequests leaves them out (the API refuses resources on them).
    overhead = _obj(spec.get("overhead"), who, "spec.overhead")
    extra = {r: _exact(r, overhead[r], who, f"spec.overhead.{r}") for r in _request_names(resources) if r in overhead}
    pod_level = _pod_level_requests(spec, apps, inits, resources, who)
    if pod_level:
        pod_level = _pod_level_resized(pod, pod_level, resources, infeasible, who)
    return _PodParts(apps, inits, extra, pod_level)


def _pod_level_requests(spec: Mapping[str, Any], apps: list[dict[str, Decimal]], inits: list[tuple[dict[str, Decimal], bool]],
                        resources: Sequence[str], who: str) -> dict[str, Decimal]:
    """Pod-level ``spec.resources.requests`` (PodLevelResources, k8s 1.32+, on by default since
    1.34; an API server with the feature off drops the field) for the names kube supports there
    and the model reads. A pod-level limit without a request is defaulted as the API server does
    (``defaultPodRequests``): cpu and memory to the containers' aggregate request if some
    container requests them, else (and hugepages always) to the pod-level limit."""
    if spec.get("resources") is None:  # the usual pod
        return {}
    res = _obj(spec.get("resources"), who, "spec.resources")
    requests = _obj(res.get("requests"), who, "spec.resources.requests")
    limits = _obj(res.get("limits"), who, "spec.resources.limits")
    names = [r for r in _request_names(resources) if _pod_level_resource(r)]
    out = {r: _exact(r, requests[r], who, f"spec.resources.requests.{r}") for r in names if r in requests}
    defaulted = [r for r in names if r in limits and r not in out]
    if defaulted:
        with localcontext(_EXACT):
            aggregate = effective_requests(apps, inits, {})
        for r in defaulted:
            limit = _exact(r, limits[r], who, f"spec.resources.limits.{r}")
            out[r] = aggregate[r] if r in aggregate and not r.startswith("hugepages-") else limit
    return out


def _pod_level_resized(pod: Mapping[str, Any], spec: dict[str, Decimal], resources: Sequence[str], infeasible: bool,
                       who: str) -> dict[str, Decimal]:
    """Pod-level requests during a pod-level in-place resize (InPlacePodLevelResourcesVerticalScaling,
    k8s 1.35 alpha: the kubelet writes the pod's ``status.resources`` and ``status.allocatedResources``):
    as ``PodRequests`` with ``UseStatusResources``, each counts the largest of the spec's, the
    actuated and the allocated request (the spec left out when the resize is infeasible), so a
    pod shrinking in place keeps its old size on the node until the kubelet has actuated the new
    one (:func:`_resized`, the containers' rule). Without ``status.resources`` (the gate off, or
    not resized yet) the spec's requests."""
    status = _obj(pod.get("status"), who, "status")
    if status.get("resources") is None:
        return spec
    names = [r for r in _request_names(resources) if _pod_level_resource(r)]
    actuated = _obj(_obj(status.get("resources"), who, "status.resources").get("requests"), who, "status.resources.requests")
    allocated = _obj(status.get("allocatedResources"), who, "status.allocatedResources")
    exact = [{r: _exact(r, found[r], who, f"{path}.{r}") for r in names if r in found}
             for path, found in (("status.resources.requests", actuated), ("status.allocatedResources", allocated))]
    return _resized(spec, (exact[1], exact[0]), infeasible)  # (allocated, actuated), parsed in path order


def _total_requests(total: Mapping[str, Decimal], resources: Sequence[str]) -> dict[str, float]:
    """An exact ``PodRequests`` total in model units, rounded up once (:func:`model_amount`)."""
    out = {r: model_amount(r, total[r]) if r in total else 0.0 for r in resources}
    if "pods" in resources:
        out["pods"] = 1.0
    out[GPU_RESOURCE] = model_amount(GPU_RESOURCE, total[GPU_RESOURCE]) if GPU_RESOURCE in total else 0.0
    return out


def pod_requests(pod: Mapping[str, Any], resources: Sequence[str]) -> dict[str, float]:
    """A pod's effective request (kube's ``resourcehelper.PodRequests``, :func:`effective_requests`,
    pod-level ``spec.resources.requests`` replacing the containers' sum for cpu, memory and
    hugepages) in model units (:func:`model_amount`): every name of ``resources`` (0 when not
    asked for; ``pods`` is 1, the pod itself) plus ``nvidia.com/gpu`` (whole cards). Summed
    exactly, then rounded up once as kube does (``MilliValue`` / ``Value`` of the pod's total):
    two containers of 0.4m request 1m, not 2m.

    The one reader of container requests: the snapshot (:func:`pod_demand`) and the edge agent's
    ``/recommend`` (``edge_agent.workload``) both call it, so they read a pod alike. A field of
    the wrong type or a bad quantity raises :class:`PodSpecError` naming its JSON path.
    """
    return _total_requests(_pod_parts(pod, resources).total(), resources)


def pod_demand(pod: Mapping[str, Any], resources: Sequence[str]) -> PodDemand:
    """What the pod asks for in model units: :func:`pod_requests`, with GPUs as cards or a share,
    and its non-zero request (:func:`nonzero_requests`) from the same parse."""
    who = _who(pod)
    parts = _pod_parts(pod, resources)
    total = _total_requests(parts.total(), resources)
    if _misses_a_scored_request(parts.apps, parts.inits, resources):
        nonzero = nonzero_requests(parts.apps, parts.inits, parts.overhead, resources, parts.pod_level)
    else:  # the usual pod: its non-zero request is its request
        nonzero = (total["cpu"] if "cpu" in resources else 0.0, total["memory"] if "memory" in resources else 0.0)
    gpus = int(total[GPU_RESOURCE])
    requests = {r: total[r] for r in resources}
    meta = _obj(pod.get("metadata"), who, "metadata")
    ann = _str_map(meta.get("annotations"), who, "metadata.annotations")
    if ANN_GPU_MILLI in ann:
        where = f"metadata.annotations.{ANN_GPU_MILLI}"
        text = ann[ANN_GPU_MILLI]
        # What Go's strconv.Atoi (ParseInt(text, 10, 64) on 64-bit) takes: a sign and ASCII digits;
        # int() also takes "5_00", " 500 " and non-ASCII digits.
        if not _GO_INT.fullmatch(text):
            raise _bad(who, where, f"expected an integer 1..{GPU_MILLI} (an optional sign and ASCII decimal digits only, "
                                   f"as Go's strconv.Atoi reads it), got {_shown(text)!r}")
        milli = _go_int(text)
        if milli is None or not 1 <= milli <= GPU_MILLI:
            beyond = " (beyond the 64-bit range Atoi reads)" if milli is None else ""
            raise _bad(who, where, f"must be 1..{GPU_MILLI}, got {_shown(text)}{beyond}")
        if gpus > 1:
            raise _bad(who, where, f"is a share of one card, but the pod requests {gpus} {GPU_RESOURCE}")
        return PodDemand(requests, 1, milli, nonzero)
    return PodDemand(requests, gpus, GPU_MILLI if gpus else 0, nonzero)


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: A parsed node selector requirement: (on metadata.name rather than a label, key, operator, values).
_Requirement = tuple[bool, str, str, tuple[str, ...]]


def _expression_key(expr: Any, who: str, path: str) -> tuple[Mapping[str, Any], str]:
    """A selector requirement at ``path`` (node selector term or label selector) and its required key."""
    expr = _obj(expr, who, path, required=True)
    key = _opt_str(expr, "key", who, path)
    if not key:
        raise _bad(who, f"{path}.key", "required")
    return expr, key


def _expression_values(expr: Mapping[str, Any], operators: tuple[str, ...], who: str, path: str) -> tuple[str, list]:
    """The operator (one of ``operators``) and the string values of the requirement at ``path``."""
    op = expr.get("operator")
    if op not in operators:
        raise _bad(who, f"{path}.operator", f"unknown operator {op!r} ({', '.join(operators)})")
    values = _items(expr.get("values"), who, f"{path}.values")
    for j, v in enumerate(values):
        if not isinstance(v, str):
            raise _bad(who, f"{path}.values[{j}]", f"expected a string, got {json_kind(v)} {v!r}")
    return op, values


def _requirement(expr: Any, on_field: bool, who: str, path: str) -> _Requirement:
    expr, key = _expression_key(expr, who, path)
    if on_field and key != "metadata.name":
        raise _bad(who, f"{path}.key", f"only metadata.name is supported, got {key!r}")
    op, values = _expression_values(expr, _OPERATORS, who, path)
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise _bad(who, f"{path}.values", f"operator {op} needs exactly one value")
        if _go_int(values[0]) is None:
            raise _bad(who, f"{path}.values[0]", f"operator {op} needs an integer value, got {_shown(values[0])!r}")
    return on_field, key, op, tuple(values)


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _go_int(text: str | None) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it (what kube's Gt/Lt use), else
    None. Python's int() also takes ``1_000``, spaces and non-ASCII digits, which kube refuses."""
    if text is None or not _GO_INT.fullmatch(text):
        return None
    sign, digits = ("-", text[1:]) if text[0] == "-" else ("", text.lstrip("+"))
    digits = digits.lstrip("0") or "0"
    if len(digits) > 19:  # past int64 whatever the digits; int() of over 4,300 digits raises ValueError
        return None
    value = int(sign + digits)
    return value if -(2**63) <= value < 2**63 else None


def parse_term(term: Any, who: str, path: str) -> list[_Requirement]:
    """A v1.NodeSelectorTerm, checked whole (at ``path`` in the object ``who``), for :func:`term_matches`."""
    term = _obj(term, who, path, required=True)
    out = [_requirement(e, False, who, f"{path}.matchExpressions[{j}]")
           for j, e in enumerate(_items(term.get("matchExpressions"), who, f"{path}.matchExpressions"))]
    out += [_requirement(e, True, who, f"{path}.matchFields[{j}]")
            for j, e in enumerate(_items(term.get("matchFields"), who, f"{path}.matchFields"))]
    return out


def _matches(req: _Requirement, name: str, labels: Mapping[str, str]) -> bool:
    on_field, key, op, values = req
    value = name if on_field else labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    v, bound = _go_int(value), _go_int(values[0])
    return v is not None and bound is not None and (v > bound if op == "Gt" else v < bound)


def term_matches(term: list[_Requirement], name: str, labels: Mapping[str, str]) -> bool:
    """A parsed node selector term (:func:`parse_term`) against a node: requirements are ANDed;
    an empty term matches nothing."""
    return bool(term) and all(_matches(r, name, labels) for r in term)


def prefilter_node_names(terms: list[list[_Requirement]]) -> set[str] | None:
    """The node names NodeAffinity's PreFilter narrows the pod to (nodeaffinity ``PreFilter``):
    per term the intersection of its ``matchFields`` ``metadata.name In`` values, united over the
    terms; None (every node) when some term has no such requirement, or there are no terms. The
    nodes outside it are never filtered ("didn't satisfy plugin(s) [NodeAffinity]"). An empty set
    is upstream's "pod affinity terms conflict" (the workload selects a
    ``NODE_NAMES_CONFLICT_PREFIX`` key then)."""
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        term_names: set[str] | None = None
        for on_field, key, op, values in term:
            if on_field and key == "metadata.name" and op == "In":
                term_names = set(values) if term_names is None else term_names & set(values)
        if term_names is None:
            return None
        names |= term_names
    return names


def _affinity_key(obj: Any) -> str:
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]
    return AFFINITY_LABEL_PREFIX + digest


#: ``spec.priority`` is an int32 in the API.
_PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def _priority(spec: Mapping[str, Any], who: str) -> int:
    value = spec.get("priority")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(who, "spec.priority", f"expected an integer, got {json_kind(value)} {value!r}")
    if not _PRIORITY_RANGE[0] <= value <= _PRIORITY_RANGE[1]:
        raise _bad(who, "spec.priority", f"must be a 32-bit integer, got {value}")
    return value


def toleration_seconds_error(toleration: Mapping[str, Any]) -> str | None:
    """Why a toleration's ``tolerationSeconds`` is refused (None: absent or an integer). It is not
    read here (NoExecute eviction is the kubelet's), but the API server takes only an int64."""
    seconds = toleration.get("tolerationSeconds")
    if seconds is None or (isinstance(seconds, int) and not isinstance(seconds, bool)):
        return None
    return f"expected an integer (seconds), got {json_kind(seconds)} {seconds!r}"


def _tolerations(spec: Mapping[str, Any], who: str) -> list[dict[str, str]]:
    out = []
    for i, t in enumerate(_items(spec.get("tolerations"), who, "spec.tolerations")):
        tp = f"spec.tolerations[{i}]"
        t = _obj(t, who, tp, required=True)
        key, op, value, effect = (_opt_str(t, k, who, tp) for k in ("key", "operator", "value", "effect"))
        bad_seconds = toleration_seconds_error(t)
        if bad_seconds:
            raise _bad(who, f"{tp}.tolerationSeconds", bad_seconds)
        op = op or "Equal"
        out.append({"key": key or "", "operator": op, "value": "" if op == "Exists" else (value or ""), "effect": effect or ""})
    return out


def workload_doc(pod: Mapping[str, Any], resources: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                 extra_labels: dict[str, set[str]]) -> dict[str, Any]:
    """A problem-file workload from a pending pod.

    ``nodes`` are problem-file node docs (for evaluating affinity); node names that must get a
    synthetic affinity label are added to ``extra_labels[label]``. A field of the wrong type
    raises :class:`PodSpecError` naming its JSON path (``spec.tolerations[0].key``).
    """
    return _workload(pod, resources, nodes, extra_labels)[0]


def _workload(pod: Mapping[str, Any], resources: Sequence[str], nodes: Sequence[Mapping[str, Any]],
              extra_labels: dict[str, set[str]]) -> tuple[dict[str, Any], PodDemand]:
    """:func:`workload_doc` and the pod's :class:`PodDemand` (its non-zero request is not a
    problem-file field)."""
    who = _who(pod)
    demand = pod_demand(pod, resources)  # checks that pod, spec and metadata are objects
    spec = _obj(pod.get("spec"), who, "spec")
    meta = _obj(pod.get("metadata"), who, "metadata")
    for key in ("name", "namespace"):
        _opt_str(meta, key, who, "metadata")
    if not meta.get("name"):
        raise _bad(who, "metadata.name", "required")
    wl: dict[str, Any] = {"name": obj_key(pod), "requests": demand.requests, "priority": _priority(spec, who)}
    if demand.gpu_count:
        wl["gpu"] = {"count": demand.gpu_count, "milli": demand.gpu_milli}
    ann = _str_map(meta.get("annotations"), who, "metadata.annotations")
    models = annotation_list(ann, ANN_GPU_MODELS, who)  # checked without a GPU request too: it is malformed either way
    if models and demand.gpu_count:
        wl["gpu"]["models"] = models
    for key in (ANN_CLASS, ANN_USER_REGION):
        value = annotation_value(ann, key)
        if value is not None:
            wl[_SCALAR_ANNOTATIONS[key]] = value
    latency = annotation_value(ann, ANN_MAX_LATENCY)
    if latency is not None:
        try:
            wl["max_latency_ms"] = annotation_number(latency)
        except ValueError as exc:
            raise _bad(who, f"metadata.annotations.{ANN_MAX_LATENCY}", str(exc)) from None
    domains = annotation_list(ann, ANN_ALLOWED_DOMAINS, who)
    if domains:
        wl["allowed_domains"] = domains
    selector = _str_map(spec.get("nodeSelector"), who, "spec.nodeSelector")
    wl["tolerations"] = _tolerations(spec, who)
    affinity = _obj(_obj(spec.get("affinity"), who, "spec.affinity").get("nodeAffinity"), who, "spec.affinity.nodeAffinity")
    base = "spec.affinity.nodeAffinity"
    req_path = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
    required = _obj(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), who, req_path)
    if required:
        terms = _items(required.get("nodeSelectorTerms"), who, f"{req_path}.nodeSelectorTerms")
        label = _affinity_key(terms)
        digest = label[len(AFFINITY_LABEL_PREFIX):]
        names_label, conflict_label = NODE_NAMES_LABEL_PREFIX + digest, NODE_NAMES_CONFLICT_PREFIX + digest
        if label not in extra_labels:  # the same terms (same JSON) were checked and evaluated already
            parsed = [parse_term(t, who, f"{req_path}.nodeSelectorTerms[{k}]") for k, t in enumerate(terms)]
            extra_labels[label] = {n["name"] for n in nodes if any(term_matches(t, n["name"], n["labels"]) for t in parsed)}
            names = prefilter_node_names(parsed)
            if names == set():  # upstream's PreFilter fails ("pod affinity terms conflict"): no node has it
                extra_labels[conflict_label] = set()
            elif names is not None:
                extra_labels[names_label] = {n["name"] for n in nodes if n["name"] in names}
        selector[label] = "true"
        for key in (names_label, conflict_label):  # NodeAffinity PreFilter's, reported first
            if key in extra_labels:
                selector[key] = "true"
    preferred = []
    pref_path = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, p in enumerate(_items(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), who, pref_path)):
        pp = f"{pref_path}[{i}]"
        p = _obj(p, who, pp, required=True)
        weight = p.get("weight")
        if weight is None:
            weight = 0
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise _bad(who, f"{pp}.weight", f"expected an integer 1..100, got {json_kind(weight)} {weight!r}")
        pref = _obj(p.get("preference"), who, f"{pp}.preference")
        label = _affinity_key(pref)
        if label not in extra_labels:
            parsed = parse_term(pref, who, f"{pp}.preference")
            extra_labels[label] = {n["name"] for n in nodes if term_matches(parsed, n["name"], n["labels"])}
        if weight:
            preferred.append({"weight": weight, "match_labels": {label: "true"}})
    wl["node_selector"] = selector
    if preferred:
        wl["preferred_node_affinity"] = preferred
    return wl, demand


# --- plugins that read the pods on a node (NodePorts, PodTopologySpread, InterPodAffinity) --------
#
# kube-scheduler's NodePorts, PodTopologySpread (whenUnsatisfiable: DoNotSchedule) and InterPodAffinity
# (required terms) filter a node by the pods already there. The snapshot evaluates them per node
# against the bound (and assumed) pods, as the node affinity above, and hands the verdict to the
# model as synthetic node labels the pod selects (feasibility's ``POD_FILTER_PREFIXES``, each with
# its plugin's reason). Pods of one batch do not see each other here: the scheduler checks the
# batch's placements in queue order afterwards (:meth:`ClusterModel.placement_conflict`).

#: A namespace's label that the API server sets to its name: the one namespace label a
#: ``namespaceSelector`` is read against (the scheduler watches no Namespace objects).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``: requirements ANDed; ``nothing`` for an absent selector
    (kube's ``LabelSelectorAsSelector(nil)`` selects nothing, ``{}`` everything)."""

    requirements: tuple[tuple[str, str, frozenset[str]], ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, op, values in self.requirements:
            value = labels.get(key)
            if op == "In":
                if value is None or value not in values:
                    return False
            elif op == "NotIn":
                if value is not None and value in values:
                    return False
            elif (value is None) == (op == "Exists"):
                return False
        return True

    def with_labels(self, extra: Mapping[str, str]) -> LabelSelector:
        """``matchLabelKeys``: the pod's values of those keys added as ``In`` requirements."""
        if self.nothing or not extra:
            return self
        return LabelSelector((*self.requirements, *((k, "In", frozenset((v,))) for k, v in extra.items())))


def label_selector(value: Any, who: str, path: str) -> LabelSelector:
    """A ``metav1.LabelSelector`` at ``path`` (absent: selects nothing)."""
    if value is None:
        return LabelSelector(nothing=True)
    sel = _obj(value, who, path)
    reqs = [(k, "In", frozenset((v,))) for k, v in _str_map(sel.get("matchLabels"), who, f"{path}.matchLabels").items()]
    for i, expr in enumerate(_items(sel.get("matchExpressions"), who, f"{path}.matchExpressions")):
        ep = f"{path}.matchExpressions[{i}]"
        expr, key = _expression_key(expr, who, ep)
        op, values = _expression_values(expr, _SELECTOR_OPERATORS, who, ep)
        if (op in ("In", "NotIn")) != bool(values):
            raise _bad(who, f"{ep}.values", f"operator {op} needs {'at least one value' if op in ('In', 'NotIn') else 'no values'}")
        reqs.append((key, op, frozenset(values)))
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True)
class PodTerm:
    """A required ``PodAffinityTerm``: the pods it selects (labels, in ``namespaces`` or in the
    namespaces ``namespace_selector`` selects) and its topology key."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """kube's ``AffinityTerm.Matches``: the pod's namespace is the term's, and its labels match."""
        in_ns = namespace in self.namespaces or (
            self.namespace_selector is not None and self.namespace_selector.matches({NAMESPACE_NAME_LABEL: namespace}))
        return in_ns and self.selector.matches(labels)


def _pod_terms(affinity: Mapping[str, Any], kind: str, namespace: str, who: str) -> tuple[PodTerm, ...]:
    """The required terms of ``spec.affinity.<kind>`` (``podAffinity`` / ``podAntiAffinity``);
    a term without namespaces and namespaceSelector is about the pod's own namespace."""
    base = f"spec.affinity.{kind}"
    section = _obj(affinity.get(kind), who, base)
    return tuple(_pod_term(term, f"{base}.{_REQUIRED}[{i}]", namespace, who)
                 for i, term in enumerate(_items(section.get(_REQUIRED), who, f"{base}.{_REQUIRED}")))


def _pod_term(term: Any, tp: str, namespace: str, who: str) -> PodTerm:
    """One ``PodAffinityTerm`` at ``tp``."""
    term = _obj(term, who, tp, required=True)
    key = _opt_str(term, "topologyKey", who, tp)
    if not key:
        raise _bad(who, f"{tp}.topologyKey", "required (a node label key)")
    names = _items(term.get("namespaces"), who, f"{tp}.namespaces")
    for j, ns in enumerate(names):
        if not isinstance(ns, str):
            raise _bad(who, f"{tp}.namespaces[{j}]", f"expected a string, got {json_kind(ns)} {ns!r}")
    ns_selector = None
    if term.get("namespaceSelector") is not None:
        ns_selector = label_selector(term["namespaceSelector"], who, f"{tp}.namespaceSelector")
    elif not names:
        names = [namespace]
    return PodTerm(label_selector(term.get("labelSelector"), who, f"{tp}.labelSelector"), frozenset(names), ns_selector, key)


_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _preferred_pod_terms(affinity: Mapping[str, Any], kind: str, namespace: str, who: str) -> tuple[tuple[PodTerm, int], ...]:
    """The preferred terms of ``spec.affinity.<kind>`` with their weights (1..100, as the API server validates)."""
    base = f"spec.affinity.{kind}.{_PREFERRED}"
    section = _obj(affinity.get(kind), who, f"spec.affinity.{kind}")
    out = []
    for i, item in enumerate(_items(section.get(_PREFERRED), who, base)):
        ip = f"{base}[{i}]"
        item = _obj(item, who, ip, required=True)
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise _bad(who, f"{ip}.weight", f"expected an integer 1..100, got {json_kind(weight)} {weight!r}")
        out.append((_pod_term(item.get("podAffinityTerm"), f"{ip}.podAffinityTerm", namespace, who), weight))
    return tuple(out)


@dataclass(frozen=True)
class SpreadConstraint:
    """A ``topologySpreadConstraints`` entry (``whenUnsatisfiable: DoNotSchedule`` for the filter,
    ``ScheduleAnyway`` for scoring)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector  # with matchLabelKeys merged
    min_domains: int | None
    honor_affinity: bool  # nodeAffinityPolicy Honor (the default)
    honor_taints: bool  # nodeTaintsPolicy Honor (default Ignore)


def _positive_int(value: Any, who: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise _bad(who, path, f"expected an integer > 0, got {json_kind(value)} {value!r}")
    return value


def _spread_constraints(spec: Mapping[str, Any], labels: Mapping[str, str], who: str,
                        when_unsatisfiable: str = "DoNotSchedule") -> tuple[SpreadConstraint, ...]:
    """The pod's constraints with ``whenUnsatisfiable`` ``when_unsatisfiable`` (all are checked)."""
    out = []
    for i, c in enumerate(_items(spec.get("topologySpreadConstraints"), who, "spec.topologySpreadConstraints")):
        cp = f"spec.topologySpreadConstraints[{i}]"
        c = _obj(c, who, cp, required=True)
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise _bad(who, f"{cp}.whenUnsatisfiable", f"expected DoNotSchedule or ScheduleAnyway, got {when!r}")
        key = _opt_str(c, "topologyKey", who, cp)
        if not key:
            raise _bad(who, f"{cp}.topologyKey", "required (a node label key)")
        skew = _positive_int(c.get("maxSkew"), who, f"{cp}.maxSkew")
        min_domains = None if c.get("minDomains") is None else _positive_int(c["minDomains"], who, f"{cp}.minDomains")
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = c.get(name)
            if policy is None:
                policy = default
            if policy not in ("Honor", "Ignore"):
                raise _bad(who, f"{cp}.{name}", f"expected Honor or Ignore, got {policy!r}")
            policies.append(policy == "Honor")
        keys = _items(c.get("matchLabelKeys"), who, f"{cp}.matchLabelKeys")
        for j, k in enumerate(keys):
            if not isinstance(k, str):
                raise _bad(who, f"{cp}.matchLabelKeys[{j}]", f"expected a string, got {json_kind(k)} {k!r}")
        selector = label_selector(c.get("labelSelector"), who, f"{cp}.labelSelector")
        if when == when_unsatisfiable:  # DoNotSchedule filters, ScheduleAnyway only scores
            selector = selector.with_labels({k: labels[k] for k in keys if k in labels})
            out.append(SpreadConstraint(skew, key, selector, min_domains, *policies))
    return tuple(out)


#: A host port as kube's ``HostPortInfo`` keys it: (host IP, protocol, port); an empty IP is
#: ``0.0.0.0`` (every address), an empty protocol TCP.
HostPort = tuple[str, str, int]
_ALL_ADDRESSES = "0.0.0.0"


def _host_ports(spec: Mapping[str, Any], who: str) -> tuple[HostPort, ...]:
    """The ports with a ``hostPort`` of the app containers and of the sidecars (init containers
    with ``restartPolicy: Always``): kube's ``GetHostPorts``."""
    out = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_items(spec.get(key), who, f"spec.{key}")):
            cp = f"spec.{key}[{i}]"
            c = _obj(c, who, cp, required=True)
            if key == "initContainers" and c.get("restartPolicy") != "Always":
                continue
            for j, port in enumerate(_items(c.get("ports"), who, f"{cp}.ports")):
                pp = f"{cp}.ports[{j}]"
                port = _obj(port, who, pp, required=True)
                host_port = port.get("hostPort")
                if host_port is None or host_port == 0:
                    continue
                if isinstance(host_port, bool) or not isinstance(host_port, int) or not 0 < host_port < 65536:
                    raise _bad(who, f"{pp}.hostPort", f"expected a port number 1..65535, got {json_kind(host_port)} {host_port!r}")
                out.append((_opt_str(port, "hostIP", who, pp) or _ALL_ADDRESSES, _opt_str(port, "protocol", who, pp) or "TCP",
                            host_port))
    return tuple(out)


def ports_conflict(want: HostPort, used: Iterable[HostPort]) -> bool:
    """kube's ``HostPortInfo.CheckConflict``: the same protocol and port on the same address, or
    on ``0.0.0.0`` on either side."""
    ip, proto, port = want
    return any(p == port and pr == proto and (ip == _ALL_ADDRESSES or i in (ip, _ALL_ADDRESSES)) for i, pr, p in used)


@dataclass(frozen=True)
class PodRules:
    """What the pod-reading plugins read of one pod: its namespace and labels, whether it is being
    deleted, its required pod (anti-)affinity terms, its DoNotSchedule spread constraints and host
    ports; for a pending pod also its node selector, required node affinity terms and tolerations
    (the nodes its spread counts over)."""

    namespace: str
    labels: Mapping[str, str]
    terminating: bool = False
    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    ports: tuple[HostPort, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_terms: tuple[tuple[_Requirement, ...], ...] | None = None  # required node affinity (None: none)
    tolerations: tuple[Toleration, ...] = ()

    @property
    def reads_pods(self) -> bool:
        """Whether a plugin filters this pod's nodes by the pods on them (beyond existing pods'
        anti-affinity, which applies to every pod)."""
        return bool(self.affinity or self.anti_affinity or self.spread or self.ports)

    def placed(self) -> PodRules:
        """A pending pod's rules as ``pod_rules(pod, pending=False)`` reads the same pod on a node:
        its namespace, labels, deletion, anti-affinity and host ports (the rest at the defaults)."""
        return PodRules(self.namespace, self.labels, self.terminating, anti_affinity=self.anti_affinity, ports=self.ports)


def reads_pods(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` has a required pod (anti-)affinity, a DoNotSchedule spread constraint or a
    host port (lenient: a field of the wrong type counts, the full parse reports it). The quick test
    that keeps every other pod off the plugins' path."""
    spec = _spec(pod)
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        for kind in ("podAffinity", "podAntiAffinity"):
            section = affinity.get(kind)
            if isinstance(section, Mapping) and section.get(_REQUIRED):
                return True
            if section is not None and not isinstance(section, Mapping):
                return True
    spread = spec.get("topologySpreadConstraints")
    if spread and (not isinstance(spread, list)
                   or any(not isinstance(c, Mapping) or c.get("whenUnsatisfiable") != "ScheduleAnyway" for c in spread)):
        return True
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else ():
            ports = c.get("ports") if isinstance(c, Mapping) else None
            if ports and (not isinstance(ports, list) or any(not isinstance(p, Mapping) or p.get("hostPort") for p in ports)):
                return True
    return False


def has_anti_affinity(pod: Mapping[str, Any]) -> bool:
    """Whether a bound pod has required anti-affinity terms (which every incoming pod is checked against)."""
    affinity = _spec(pod).get("affinity")
    section = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    return isinstance(section, Mapping) and bool(section.get(_REQUIRED))


#: Pod fields the model never reads that differ between replicas of one template (the service-account
#: token volume and its mounts get a random suffix; StatefulSet pods differ in hostname and claims).
_UNREAD_SPEC = frozenset({"volumes", "hostname", "subdomain"})
#: Container fields nothing in the model reads (pod_demand reads name, resources and restartPolicy;
#: the NodePorts filter ports): left out of the key, else an image tag or an env value gave each
#: replica set its own snapshot, and a 30-container pod an 86 KB key (1.5 ms a request to build).
_UNREAD_CONTAINER = frozenset({
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "readinessProbe",
    "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy",
    "tty", "volumeDevices", "volumeMounts", "workingDir"})
#: What :func:`pod_demand` reads of a container (:func:`_pod_parts`).
_DEMAND_CONTAINER = ("name", "resources", "restartPolicy")


def _resize_status(status: Any) -> Any:
    """What :func:`_status_requests` and :func:`_pod_level_resized` read of a pod's ``status`` (a
    value that is not an object is kept whole: the parse says what is wrong with it)."""
    if status is None:
        status = {}
    if not isinstance(status, Mapping):
        return status
    keep = {k: status.get(k) for k in ("containerStatuses", "initContainerStatuses", "resize", "resources",
                                       "allocatedResources")}
    for key in ("containerStatuses", "initContainerStatuses"):
        if isinstance(keep[key], list):
            keep[key] = [{k: cs.get(k) for k in ("name", "allocatedResources", "resources")}
                         if isinstance(cs, Mapping) else cs for cs in keep[key]]
    conditions = resize_conditions(status.get("conditions"))
    keep["conditions"] = (conditions or None) if isinstance(conditions, list) else conditions
    return keep


def own_annotations(value: Any) -> Any:
    """The ``iro-fed.io/`` annotations of an ``annotations`` value (the only ones read: GPU share
    and cards, the node's ``allocated``); anything but an object is kept whole (its parse says
    what is wrong). The cache's trim (``client.BOUND_POD_FIELDS``) and the pod shape key both use it."""
    if not isinstance(value, Mapping):
        return value
    return {k: v for k, v in value.items() if not isinstance(k, str) or k.startswith(PREFIX)}


def resize_conditions(value: Any) -> Any:
    """The ``PodResizePending`` conditions of a ``status.conditions`` value (an in-place resize's
    verdict; the only condition read); anything but an array is kept whole."""
    if not isinstance(value, list):
        return value
    return [c for c in value if not isinstance(c, Mapping) or c.get("type") == RESIZE_PENDING]


def _own_annotations(meta: Mapping[str, Any]) -> Any:
    """:func:`own_annotations` of ``meta`` (none kept: None, as no annotations read)."""
    ann = own_annotations(meta.get("annotations"))
    return (ann or None) if isinstance(ann, dict) else ann


def pod_shape_key(pod: Mapping[str, Any]) -> str:
    """A text equal for two pending pods that the model reads alike (:meth:`ClusterModel.with_pods`:
    requests, node constraints, the pod-reading plugins' rules), so a snapshot of one serves the
    other. Built by leaving out only what is known to be unread (name, uid, other annotations, the
    fields above, status but for in-place resize): a field read later is in the key already. It holds
    every label (spread and inter-pod terms read them; a selector may read any) and the namespace."""
    if not isinstance(pod, Mapping):
        return json.dumps(pod, sort_keys=True, default=str)
    meta, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(meta, Mapping) or not (spec is None or isinstance(spec, Mapping)):
        return json.dumps([meta, spec, pod.get("status")], sort_keys=True, default=str)  # an error for the parse
    spec = spec or {}
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and not labels:
        labels = None  # read as no labels, as None is
    keep_meta = {"namespace": meta.get("namespace"), "labels": labels, "annotations": _own_annotations(meta),
                 "deleting": bool(meta.get("deletionTimestamp")), "controller": controller_owner(meta)}
    keep_spec = {k: v for k, v in spec.items() if k not in _UNREAD_SPEC}
    for key in ("containers", "initContainers"):
        if isinstance(keep_spec.get(key), list):
            keep_spec[key] = [{k: v for k, v in c.items() if k not in _UNREAD_CONTAINER} if isinstance(c, Mapping) else c
                              for c in keep_spec[key]]
    return json.dumps([keep_meta, keep_spec, _resize_status(pod.get("status"))], sort_keys=True, default=str)


def usage_view(pod: Mapping[str, Any]) -> Any:
    """A small copy of ``pod`` that :func:`apply_usage` counts as it counts ``pod`` (what
    :func:`pod_demand` reads, the ``iro-fed.io/`` annotations, name, namespace and uid), for
    keeping many pods' specs: the whole object of a 30-container pod is ~430 KB parsed, this
    ~30 KB (its containers' resources). Lenient: a part that is not an object is kept whole (its
    parse reports it)."""
    return _view(pod, _DEMAND_CONTAINER)


def _view(pod: Mapping[str, Any], container_fields: tuple[str, ...]) -> Any:
    """:func:`usage_view`, keeping ``container_fields`` of each container."""
    if not isinstance(pod, Mapping):
        return pod
    out: dict[str, Any] = {}
    meta = pod.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid") if k in meta}
        ann = _own_annotations(meta)
        if ann is not None:
            out["metadata"]["annotations"] = ann
    elif "metadata" in pod:
        out["metadata"] = meta
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        out["spec"] = {k: spec[k] for k in ("overhead", "resources", "nodeName") if k in spec}
        for key in ("containers", "initContainers"):
            items = spec.get(key)
            if isinstance(items, list):
                items = [{k: c[k] for k in container_fields if k in c} if isinstance(c, Mapping) else c for c in items]
            if key in spec:
                out["spec"][key] = items
    elif "spec" in pod:
        out["spec"] = spec
    status = pod.get("status")
    if status is not None:
        out["status"] = _resize_status(status)
        if isinstance(status, Mapping) and "phase" in status:
            out["status"]["phase"] = status["phase"]
    return out


#: What :func:`controller_owner` reads of an ownerReference.
_OWNER_FIELDS = ("kind", "name", "uid", "controller")
#: What :func:`bound_view` keeps of a container: :func:`usage_view`'s and the ports (NodePorts).
_BOUND_CONTAINER = (*_DEMAND_CONTAINER, "ports")


def bound_view(pod: Mapping[str, Any]) -> Any:
    """:func:`usage_view` plus what the pod-reading plugins read of a bound pod
    (:func:`pod_rules` with ``pending=False``, :func:`has_anti_affinity`, :func:`score_rules` with
    ``pending=False``): labels, deletion, the controller ownerReference, the pod affinity and
    anti-affinity and the containers' ports. A pod kept in this form counts on its node as the
    whole object does, for usage and for NodePorts, PodTopologySpread and InterPodAffinity (the
    extender's assumed pods). Lenient as :func:`usage_view`."""
    out = _view(pod, _BOUND_CONTAINER)
    if not isinstance(pod, Mapping):
        return out
    meta, spec = pod.get("metadata"), pod.get("spec")
    if isinstance(meta, Mapping):
        out["metadata"].update({k: meta[k] for k in ("labels", "deletionTimestamp") if k in meta})
        refs = meta.get("ownerReferences")  # (the controller: the system default spreading's group)
        if isinstance(refs, list):
            refs = [{k: r[k] for k in _OWNER_FIELDS if k in r} if isinstance(r, Mapping) else r for r in refs]
        if "ownerReferences" in meta:
            out["metadata"]["ownerReferences"] = refs
    if isinstance(spec, Mapping):
        affinity = spec.get("affinity")
        if isinstance(affinity, Mapping):  # (podAffinity: its terms score the pods that come later)
            affinity = {k: affinity[k] for k in ("podAffinity", "podAntiAffinity") if k in affinity}
        if "affinity" in spec:
            out["spec"]["affinity"] = affinity
    return out


def _pod_head(pod: Mapping[str, Any]) -> tuple[str, Mapping, Mapping, str, dict[str, str], Mapping]:
    """What :func:`pod_rules` and :func:`score_rules` both read first: (who, metadata, spec,
    namespace, labels, spec.affinity), each checked for its type."""
    who = _who(pod)
    meta = _obj(pod.get("metadata"), who, "metadata")
    spec = _obj(pod.get("spec"), who, "spec")
    namespace = _opt_str(meta, "namespace", who, "metadata") or "default"
    labels = _str_map(meta.get("labels"), who, "metadata.labels")
    return who, meta, spec, namespace, labels, _obj(spec.get("affinity"), who, "spec.affinity")


def _node_inclusion(spec: Mapping, affinity: Mapping, who: str
                    ) -> tuple[dict[str, str], tuple[tuple[_Requirement, ...], ...] | None, tuple[Toleration, ...]]:
    """The pod's node selector, required node affinity terms (None: none) and tolerations: what a
    spread constraint's node inclusion policies read."""
    selector = _str_map(spec.get("nodeSelector"), who, "spec.nodeSelector")
    node_affinity = _obj(affinity.get("nodeAffinity"), who, "spec.affinity.nodeAffinity")
    required = _obj(node_affinity.get(_REQUIRED), who, f"spec.affinity.nodeAffinity.{_REQUIRED}")
    node_terms = None
    if required:
        tp = f"spec.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms"
        node_terms = tuple(tuple(parse_term(t, who, f"{tp}[{k}]"))
                           for k, t in enumerate(_items(required.get("nodeSelectorTerms"), who, tp)))
    return selector, node_terms, tuple(Toleration(**t) for t in _tolerations(spec, who))


def pod_rules(pod: Mapping[str, Any], pending: bool = True) -> PodRules:
    """A pod's :class:`PodRules`; a field of the wrong type raises :class:`PodSpecError` naming its
    path. ``pending=False`` (a bound pod): only what the plugins read of the pods on a node."""
    who, meta, spec, namespace, labels, affinity = _pod_head(pod)
    anti = _pod_terms(affinity, "podAntiAffinity", namespace, who)
    ports = _host_ports(spec, who)
    if not pending:  # (as PodRules.placed keeps of a pending pod's)
        return PodRules(namespace, labels, bool(meta.get("deletionTimestamp")), anti_affinity=anti, ports=ports)
    spread = _spread_constraints(spec, labels, who)
    node_terms = None
    tolerations: tuple[Toleration, ...] = ()
    selector: dict[str, str] = {}
    if spread:  # the nodes a spread counts over pass the pod's node selector and required node affinity
        selector, node_terms, tolerations = _node_inclusion(spec, affinity, who)
    return PodRules(namespace, labels, bool(meta.get("deletionTimestamp")), _pod_terms(affinity, "podAffinity", namespace, who),
                    anti, spread, ports, selector, node_terms, tolerations)


@dataclass
class PlacedPods:
    """The pods on the nodes as the plugins read them: (node, :class:`PodRules`) by namespace,
    the ones with required anti-affinity and the host ports in use per node; with the counts the
    plugins take over them (pods of one template ask the same), each brought up to date by a pod
    added. The counts are taken over one set of node labels (the model's nodes)."""

    by_namespace: dict[str, list[tuple[str, PodRules]]] = field(default_factory=dict)
    anti: list[tuple[str, PodRules]] = field(default_factory=list)
    ports: dict[str, list[HostPort]] = field(default_factory=dict)
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    def add(self, node: str, rules: PodRules) -> None:
        self.by_namespace.setdefault(rules.namespace, []).append((node, rules))
        if rules.anti_affinity:
            self.anti.append((node, rules))
        if rules.ports:
            self.ports.setdefault(node, []).extend(rules.ports)
        if self._memo:  # a batch's check adds a pod, then asks the same counts: counted again, O(pods) a pod
            self._count_added(node, rules)

    def _count_added(self, node: str, rules: PodRules) -> None:
        """Bring the counts taken (``_memo``) up to date with a pod added on ``node``, as
        :meth:`term_counts`, :meth:`existing_counts` and :meth:`selector_counts` count it."""
        labels = self._memo.get("node-labels", {}).get(node)  # None: a node the counts do not see
        for key, got in self._memo.items():
            if key == "anti-terms":
                if labels is not None:
                    _count_anti_terms(got, rules, labels)
            elif not isinstance(key, tuple):  # "node-labels"
                continue
            elif key[0] == "terms" and labels is not None:
                _count_terms(got, key[1], key[2], rules, labels)
            elif key[0] == "selector":
                _, namespace, selector = key
                if selector.requirements and rules.namespace == namespace and _selected(selector, rules):
                    got[node] += 1

    def pods(self, namespaces: Iterable[str] | None = None) -> Iterable[tuple[str, PodRules]]:
        """The pods in ``namespaces`` (None: in every namespace)."""
        groups = self.by_namespace.values() if namespaces is None else (self.by_namespace.get(ns, ()) for ns in namespaces)
        for group in groups:
            yield from group

    def term_counts(self, terms: tuple[PodTerm, ...], every: bool,
                    node_labels: Mapping[str, Mapping[str, str]]) -> collections.Counter[tuple[str, str]]:
        """Per (topology key, value of the pod's node): the pods matching every term of ``terms``
        (``every``, kube's affinity counts: one per term) or, per term, the pods matching it (its
        anti-affinity counts). Pods on nodes not in ``node_labels`` are not seen (nor by kube)."""
        key = ("terms", terms, every)
        got = self._memo.get(key)
        if got is None:
            got = collections.Counter()
            for node, other in self.pods(_term_namespaces(terms)):
                labels = node_labels.get(node)
                if labels is not None:
                    _count_terms(got, terms, every, other, labels)
            self._memo.setdefault("node-labels", node_labels)
            self._memo[key] = got
        return got

    def existing_counts(self, namespace: str, pod_labels: Mapping[str, str],
                        node_labels: Mapping[str, Mapping[str, str]]) -> collections.Counter[tuple[str, str]]:
        """Per (topology key, value): the pods here whose required anti-affinity terms select a pod
        of ``namespace`` with ``pod_labels`` (kube's existingAntiAffinityCounts)."""
        by_term = self._memo.get("anti-terms")
        if by_term is None:  # the replicas of one workload share their terms: each term is matched once
            by_term = {}
            for node, other in self.anti:
                labels = node_labels.get(node)
                if labels is not None:
                    _count_anti_terms(by_term, other, labels)
            self._memo.setdefault("node-labels", node_labels)
            self._memo["anti-terms"] = by_term  # whole: a model may serve several threads (the webhook's)
        got: collections.Counter[tuple[str, str]] = collections.Counter()
        for t, pairs in by_term.items():
            if t.matches(namespace, pod_labels):
                got.update(pairs)
        return got

    def selector_counts(self, namespace: str, selector: LabelSelector) -> collections.Counter[str]:
        """Per node: the pods of ``namespace`` not being deleted that ``selector`` matches (kube's
        ``countPodsMatchSelector``, which counts nothing for an empty selector)."""
        key = ("selector", namespace, selector)
        got = self._memo.get(key)
        if got is None:
            got = collections.Counter()
            if selector.requirements:
                got.update(node for node, other in self.pods((namespace,)) if _selected(selector, other))
            self._memo[key] = got
        return got


def _count_terms(got: collections.Counter[tuple[str, str]], terms: tuple[PodTerm, ...], every: bool,
                 pod: PodRules, labels: Mapping[str, str]) -> None:
    """Add ``pod`` (on a node with ``labels``) to :meth:`PlacedPods.term_counts`'s counts."""
    if every:
        if all(t.matches(pod.namespace, pod.labels) for t in terms):
            got.update((t.topology_key, labels[t.topology_key]) for t in terms if t.topology_key in labels)
    else:
        got.update((t.topology_key, labels[t.topology_key]) for t in terms
                   if t.topology_key in labels and t.matches(pod.namespace, pod.labels))


def _count_anti_terms(by_term: dict[PodTerm, collections.Counter[tuple[str, str]]], pod: PodRules,
                      labels: Mapping[str, str]) -> None:
    """Add ``pod``'s required anti-affinity terms (on a node with ``labels``) to
    :meth:`PlacedPods.existing_counts`'s per-term counts."""
    for t in pod.anti_affinity:
        if t.topology_key in labels:
            counts = by_term.get(t)
            if counts is None:  # (not setdefault: a Counter made per pod and term cost most of a batch check)
                counts = by_term[t] = collections.Counter()
            counts[(t.topology_key, labels[t.topology_key])] += 1


def _selected(selector: LabelSelector, pod: PodRules) -> bool:
    """Whether :meth:`PlacedPods.selector_counts` counts ``pod`` (of the selector's namespace)."""
    return not pod.terminating and selector.matches(pod.labels)


def placed_pods(by_node: Mapping[str, Sequence[Mapping[str, Any]]], warnings: list[str] | None = None,
                cache: dict[tuple[str, str], PodRules | PodSpecError] | None = None) -> PlacedPods:
    """:class:`PlacedPods` of the bound pods by node; a pod whose fields cannot be read is left
    out (the API server validated it; a note goes to ``warnings``). ``cache``: the pods' parses
    by (uid, resourceVersion), kept by the caller across calls: a pod the API server has not
    changed is not parsed again, and the cache ends with the pods of this call only."""
    placed = PlacedPods()
    fresh: dict[tuple[str, str], PodRules | PodSpecError] = {}
    for node, pods in by_node.items():
        for pod in pods:
            key = _version_key(pod) if cache is not None else None
            rules = cache.get(key) if cache is not None and key is not None else None
            if rules is None:
                try:
                    rules = pod_rules(pod, pending=False)
                except PodSpecError as exc:
                    rules = exc
            if key is not None:
                fresh[key] = rules
            if isinstance(rules, PodSpecError):
                if warnings is not None:
                    message = f"ignored by pod affinity, spread and host ports: {rules}"
                    _usage_warning(warnings, message, (node, message))
            else:
                placed.add(node, rules)
    if cache is not None:  # the pods gone (or changed) leave it
        cache.clear()
        cache.update(fresh)
    return placed


def _version_key(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """A pod's (uid, resourceVersion), which name one content of it (None: either is missing, or the
    metadata is no dict, as no decoded API object has). Per bound pod per batch: plain type tests."""
    meta = pod.get("metadata")
    if type(meta) is not dict:
        return None
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    return (uid, version) if type(uid) is str and uid and type(version) is str and version else None


def _term_namespaces(terms: Sequence[PodTerm]) -> set[str] | None:
    """The namespaces some term of ``terms`` may select pods in (None: any)."""
    out: set[str] = set()
    for t in terms:
        if t.namespace_selector is not None:
            return None
        out |= t.namespaces
    return out


def _interpod_failures(rules: PodRules, groups: Sequence[PlacedPods], node_labels: Mapping[str, Mapping[str, str]],
                       nodes: Iterable[str]) -> dict[str, str]:
    """InterPodAffinity's Filter on each of ``nodes``: node -> the kind of its failure
    (``affinity``, ``anti``, ``existing``), nodes that pass left out. Counts per (topology key,
    value) as kube's PreFilter: existing pods matching every affinity term, existing pods matching
    an anti-affinity term, and existing pods whose own anti-affinity term matches this pod."""
    affinity: collections.Counter[tuple[str, str]] = collections.Counter()
    anti: collections.Counter[tuple[str, str]] = collections.Counter()
    existing: collections.Counter[tuple[str, str]] = collections.Counter()
    for group in groups:
        if rules.affinity:
            affinity.update(group.term_counts(rules.affinity, True, node_labels))
        if rules.anti_affinity:
            anti.update(group.term_counts(rules.anti_affinity, False, node_labels))
        if group.anti:
            existing.update(group.existing_counts(rules.namespace, rules.labels, node_labels))
    # The first of a series of pods with affinity to each other: with no matching pod anywhere, a
    # pod that matches its own terms may go to any node with the topology keys.
    first_of_series = not affinity and all(t.matches(rules.namespace, rules.labels) for t in rules.affinity)
    keys = [t.topology_key for t in rules.affinity]
    # The (key, value) pairs with a pod counted: a node fails when one of its labels is such a pair
    # (one set test per node: a batch check asks this of many nodes per pod).
    anti_pairs = {pair for pair, n in anti.items() if n > 0}
    anti_keys = [t.topology_key for t in rules.anti_affinity] if anti_pairs else []
    existing_pairs = {pair for pair, n in existing.items() if n > 0}
    out: dict[str, str] = {}
    for name in nodes:
        labels = node_labels[name]
        if keys and not (all(k in labels for k in keys)
                         and (first_of_series or all(affinity[(k, labels[k])] > 0 for k in keys))):
            out[name] = "affinity"
        elif anti_pairs and any((k, labels[k]) in anti_pairs for k in anti_keys if k in labels):
            out[name] = "anti"
        elif existing_pairs and not existing_pairs.isdisjoint(labels.items()):
            out[name] = "existing"
    return out


def _untolerated(taints: Sequence[Mapping[str, str]], tolerations: Sequence[Toleration]) -> bool:
    """Whether a NoSchedule / NoExecute taint of a node doc is not tolerated (nodeTaintsPolicy Honor)."""
    return any(t["effect"] in ("NoSchedule", "NoExecute") and not any(tol.tolerates(Taint(t["key"], t["value"], t["effect"]))
                                                                       for tol in tolerations) for t in taints)


def node_included(doc: Mapping[str, Any], node_selector: Iterable[tuple[str, str]],
                  node_terms: Sequence[Sequence[_Requirement]] | None, tolerations: Sequence[Toleration],
                  honor_affinity: bool, honor_taints: bool) -> bool:
    """Upstream's ``matchNodeInclusionPolicies``: whether a node doc counts for a spread constraint.
    The two policies are checked apart: nodeAffinityPolicy Honor reads the pod's node selector and
    required node affinity, nodeTaintsPolicy Honor its tolerations (either without the other).
    The one rule for the Filter (:func:`_spread_eligible`) and the scoring (:class:`_ScoringBuilder`)."""
    if honor_affinity:
        labels = doc["labels"]
        if not all(labels.get(k) == v for k, v in node_selector):
            return False
        if node_terms is not None and not any(term_matches(list(t), doc["name"], labels) for t in node_terms):
            return False
    return not (honor_taints and _untolerated(doc.get("taints", ()), tolerations))


def _spread_eligible(rules: PodRules, node_docs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Per constraint, the nodes its counts are taken over, with their topology value: those with
    every constraint's key that pass its node inclusion policies (:func:`node_included`)."""
    constraints = rules.spread
    keys = [c.topology_key for c in constraints]
    selector = tuple(rules.node_selector.items())
    out: list[dict[str, str]] = [{} for _ in constraints]
    for doc in node_docs:
        labels = doc["labels"]
        if not all(k in labels for k in keys):
            continue
        verdicts: dict[tuple[bool, bool], bool] = {}  # per policy pair, once per node
        for i, c in enumerate(constraints):
            policy = (c.honor_affinity, c.honor_taints)
            ok = verdicts.get(policy)
            if ok is None:
                ok = verdicts[policy] = node_included(doc, selector, rules.node_terms, rules.tolerations, *policy)
            if ok:
                out[i][doc["name"]] = labels[c.topology_key]
    return out


def _spread_failures(rules: PodRules, placed: PlacedPods, earlier: PlacedPods | None, node_docs: Sequence[Mapping[str, Any]],
                     nodes: Iterable[str], memo: dict[Any, Any]) -> dict[str, str]:
    """PodTopologySpread's Filter (DoNotSchedule constraints) on each of ``nodes``: node ->
    ``label`` (no such topology label) or ``skew``, nodes that pass left out. Per constraint the
    matching pods (in the pod's namespace, not being deleted) are counted per topology value over
    the eligible nodes (:func:`_spread_eligible`); a node fails when its domain's count + 1 (if the
    pod matches the selector) - the smallest count (0 while there are fewer domains than
    minDomains) > maxSkew. ``memo`` keeps the eligible nodes and the counts over ``placed``."""
    constraints = rules.spread
    eligible_key = ("eligible", constraints, tuple(sorted(rules.node_selector.items())), rules.node_terms, rules.tolerations)
    eligible = memo.get(eligible_key)
    if eligible is None:
        eligible = memo[eligible_key] = _spread_eligible(rules, node_docs)
    counts: list[dict[str, int]] = []
    for i, c in enumerate(constraints):
        base_key = ("domains", eligible_key, i, rules.namespace)
        base = memo.get(base_key)
        if base is None:
            base = dict.fromkeys(eligible[i].values(), 0)
            for node, n in placed.selector_counts(rules.namespace, c.selector).items():
                if node in eligible[i]:
                    base[eligible[i][node]] += n
            memo[base_key] = base
        domains = base
        if earlier is not None and earlier.by_namespace:
            domains = dict(base)
            for node, n in earlier.selector_counts(rules.namespace, c.selector).items():
                if node in eligible[i]:
                    domains[eligible[i][node]] += n
        counts.append(domains)
    minimum = [0 if c.min_domains is not None and len(counts[i]) < c.min_domains else min(counts[i].values(), default=2**31 - 1)
               for i, c in enumerate(constraints)]
    self_match = [c.selector.matches(rules.labels) for c in constraints]
    by_name = _node_labels(node_docs, memo)
    out: dict[str, str] = {}
    for name in nodes:
        labels = by_name[name]
        for i, c in enumerate(constraints):
            value = labels.get(c.topology_key)
            if value is None:
                out[name] = "label"
                break
            if counts[i].get(value, 0) + self_match[i] - minimum[i] > c.max_skew:
                out[name] = "skew"
                break
    return out


def _ports_failures(rules: PodRules, groups: Sequence[PlacedPods], nodes: Iterable[str]) -> set[str]:
    """NodePorts' Filter: the nodes where a pod already uses one of the pod's host ports."""
    out = set()
    for name in nodes:
        for group in groups:
            used = group.ports.get(name)
            if used and any(ports_conflict(p, used) for p in rules.ports):
                out.add(name)
                break
    return out


#: The synthetic label prefix (feasibility's ``POD_FILTER_PREFIXES``) of each failure kind.
_FAILURE_PREFIX = {
    "ports": "iro-fed.io/host-ports-",
    "label": "iro-fed.io/spread-label-",
    "skew": "iro-fed.io/spread-skew-",
    "affinity": "iro-fed.io/pod-affinity-",
    "anti": "iro-fed.io/pod-anti-affinity-",
    "existing": "iro-fed.io/existing-anti-affinity-",
}
#: kube's reason for each failure kind (as feasibility's, for the scheduler's batch check).
FAILURE_REASONS = {
    "ports": "node(s) didn't have free ports for the requested pod ports",
    "label": "node(s) didn't match pod topology spread constraints (missing required label)",
    "skew": "node(s) didn't match pod topology spread constraints",
    "affinity": "node(s) didn't match pod affinity rules",
    "anti": "node(s) didn't match pod anti-affinity rules",
    "existing": "node(s) didn't satisfy existing pods anti-affinity rules",
}


def pod_filter_failures(rules: PodRules, placed: PlacedPods, node_docs: Sequence[Mapping[str, Any]],
                        nodes: Iterable[str] | None = None, earlier: PlacedPods | None = None,
                        memo: dict[Any, Any] | None = None) -> dict[str, str]:
    """NodePorts, PodTopologySpread and InterPodAffinity on ``nodes`` (names; None: every node of
    ``node_docs``) against the pods of ``placed`` (the bound ones) and ``earlier`` (those placed
    before this pod in its batch): node -> the kind of its first failure (a key of
    :data:`FAILURE_REASONS`, in kube's plugin order), nodes that pass left out. ``memo``: what
    is kept between calls on the same ``placed`` and ``node_docs`` (the caller's)."""
    memo = {} if memo is None else memo
    groups = [placed] if earlier is None else [placed, earlier]
    names = [d["name"] for d in node_docs] if nodes is None else list(nodes)
    out: dict[str, str] = {}
    if rules.ports:
        out.update(dict.fromkeys(_ports_failures(rules, groups, names), "ports"))
        names = [n for n in names if n not in out]
    if rules.spread and names:
        out.update(_spread_failures(rules, placed, earlier, node_docs, names, memo))
        names = [n for n in names if n not in out]
    if names and (rules.affinity or rules.anti_affinity or any(g.anti for g in groups)):
        out.update(_interpod_failures(rules, groups, _node_labels(node_docs, memo), names))
    return out


def _node_labels(node_docs: Sequence[Mapping[str, Any]], memo: dict[Any, Any]) -> dict[str, Mapping[str, str]]:
    """Each node's labels by name, once per ``memo`` (the spread and inter-pod plugins both read them)."""
    got = memo.get("labels")
    if got is None:
        got = memo["labels"] = {doc["name"]: doc["labels"] for doc in node_docs}
    return got


# --- scoring: PodTopologySpread and InterPodAffinity ---------------------------------------

#: At most this many pod groups per snapshot (each an int32 row per node): past it a pod's further
#: scoring terms are left out, with a warning.
MAX_SCORING_GROUPS = 256
HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs.hardPodAffinityWeight's default


@dataclass(frozen=True)
class ScoreRules:
    """What PodTopologySpread and InterPodAffinity score with, of one pod: identity (namespace,
    labels, deletion, controller) and the terms it holds (preferred pod affinity and anti-affinity
    with weights, required pod affinity); for a pending pod also its ScheduleAnyway constraints,
    whether it has any constraint (then no system default applies) and what its node inclusion
    policies read (node selector, required node affinity, tolerations)."""

    namespace: str
    labels: Mapping[str, str]
    terminating: bool
    owner: str | None
    preferred: tuple[tuple[PodTerm, int], ...] = ()
    preferred_anti: tuple[tuple[PodTerm, int], ...] = ()
    required: tuple[PodTerm, ...] = ()
    soft_spread: tuple[SpreadConstraint, ...] = ()
    has_spread: bool = False
    node_selector: tuple[tuple[str, str], ...] = ()
    node_terms: tuple[tuple[_Requirement, ...], ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def held(self) -> Iterable[tuple[str, PodTerm, int]]:
        """The terms this pod holds toward others, as (kind, term, weight): kube's symmetric scoring."""
        for t, weight in self.preferred:
            yield "affinity", t, weight
        for t, weight in self.preferred_anti:
            yield "anti_affinity", t, weight
        for t in self.required:
            yield "affinity", t, HARD_POD_AFFINITY_WEIGHT


def controller_owner(meta: Mapping[str, Any]) -> str | None:
    """The uid (else name) of a pod's controller ownerReference when it is a ReplicaSet,
    StatefulSet or ReplicationController (lenient: a malformed reference is none)."""
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") in SPREAD_CONTROLLER_KINDS:
            ident = ref.get("uid") or ref.get("name")
            return f"{ref['kind']}/{ident}" if isinstance(ident, str) and ident else None
    return None


def score_rules(pod: Mapping[str, Any], pending: bool = True) -> ScoreRules:
    """A pod's :class:`ScoreRules`; a field of the wrong type raises :class:`PodSpecError` naming its path."""
    who, meta, spec, namespace, labels, affinity = _pod_head(pod)
    base = ScoreRules(namespace, labels, bool(meta.get("deletionTimestamp")), controller_owner(meta),
                      _preferred_pod_terms(affinity, "podAffinity", namespace, who),
                      _preferred_pod_terms(affinity, "podAntiAffinity", namespace, who),
                      _pod_terms(affinity, "podAffinity", namespace, who))
    if not pending:
        return base
    soft = _spread_constraints(spec, labels, who, "ScheduleAnyway")
    has_spread = bool(_items(spec.get("topologySpreadConstraints"), who, "spec.topologySpreadConstraints"))
    selector, node_terms, tolerations = _node_inclusion(spec, affinity, who)
    return dc_replace(base, soft_spread=soft, has_spread=has_spread, node_selector=tuple(sorted(selector.items())),
                      node_terms=node_terms, tolerations=tolerations)


def _holds_pod_terms(pod: Mapping[str, Any]) -> bool:
    """Whether a bound pod may hold pod affinity terms (lenient; the parse says what is wrong)."""
    affinity = _spec(pod).get("affinity")
    if not isinstance(affinity, Mapping):
        return affinity is not None
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if section is not None and (not isinstance(section, Mapping) or section.get(_PREFERRED)
                                    or (kind == "podAffinity" and section.get(_REQUIRED))):
            return True
    return False


class BoundScoring:
    """The bound pods as the two scoring plugins count them, per group (memoized: one model, one
    set of bound pods): pods alike (namespace, labels, deletion, controller) are matched once."""

    def __init__(self, by_node: Mapping[str, Sequence[Mapping[str, Any]]], warnings: list[str]) -> None:
        self.alike: dict[tuple, collections.Counter[str]] = {}
        self.held: dict[tuple[str, PodTerm, int], collections.Counter[str]] = {}
        for node, pods in by_node.items():
            for pod in pods:
                meta = _meta(pod)
                labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
                namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) and meta.get("namespace") else "default"
                key = (namespace, tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                       bool(meta.get("deletionTimestamp")), controller_owner(meta))
                self.alike.setdefault(key, collections.Counter())[node] += 1
                if _holds_pod_terms(pod):
                    try:
                        rules = score_rules(pod, pending=False)
                    except PodSpecError as exc:
                        message = f"ignored by pod affinity scoring: {exc}"
                        _usage_warning(warnings, message, (node, message))
                        continue
                    for held in rules.held():
                        self.held.setdefault(held, collections.Counter())[node] += 1
        self._memo: dict[Any, collections.Counter[str]] = {}
        #: :class:`_ScoringBuilder`'s pod-independent topology rows: key -> (row, its domain ids).
        self.plain_rows: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._rows: dict[tuple, np.ndarray] = {}
        self._parts: tuple[BoundScoring, BoundScoring] | None = None  # (:meth:`plus`)
        self._held_order: list[tuple[str, tuple[str, PodTerm, int]]] | None = None  # (:meth:`held_order`)

    def plus(self, extra: BoundScoring) -> BoundScoring:
        """These pods and ``extra``'s (the extender's assumed pods, which the model does not count
        yet), as one set: each group's counts are this one's (kept) plus ``extra``'s; the
        pod-independent rows (one model's nodes) are shared."""
        out = copy.copy(self)
        out.held = dict(self.held)
        for k, v in extra.held.items():
            out.held[k] = self.held.get(k, collections.Counter()) + v
        out._memo, out._rows, out._parts, out._held_order = {}, {}, (self, extra), None
        return out

    def held_order(self) -> list[tuple[str, tuple[str, PodTerm, int]]]:
        """The keys of :attr:`held` as (repr, key), sorted by repr (:func:`pod_scoring`'s stable
        order), kept: the bound pods do not change, and a request adds only its pods' terms. (Two
        requests may both build it: the same list, the last one kept.)"""
        if self._held_order is None:
            if self._parts is not None:  # (the kept order of this one's pods, merged with the extra's)
                kept, extra = self._parts
                self._held_order = _merged_order(kept.held_order(), extra.held, kept.held)
            else:
                self._held_order = _merged_order([], self.held)
        return self._held_order

    def count_row(self, group: tuple, pos: Mapping[str, int]) -> np.ndarray:
        """:meth:`counts` as an int32 row over the nodes of ``pos`` (name -> column; one model's
        nodes: kept per group), read-only."""
        got = self._rows.get(group)
        if got is None or len(got) != len(pos):
            got = np.zeros(len(pos), dtype=np.int32)
            for node, n in self.counts(group).items():
                if node in pos:
                    got[pos[node]] += n
            got.flags.writeable = False
            self._rows[group] = got
        return got

    def counts(self, group: tuple) -> collections.Counter[str]:
        """Per node, the bound pods of ``group`` (a key of :func:`_group_member`)."""
        if group[0] == "holds":
            return self.held.get(group[1:], collections.Counter())
        got = self._memo.get(group)
        if got is None and self._parts is not None:
            got = self._memo[group] = self._parts[0].counts(group) + self._parts[1].counts(group)
        if got is None:
            got = collections.Counter()
            for (namespace, labels, terminating, owner), nodes in self.alike.items():
                if _group_member(group, ScoreRules(namespace, dict(labels), terminating, owner)):
                    got.update(nodes)
            self._memo[group] = got
        return got


def _merged_order(order: list[tuple[str, tuple[str, PodTerm, int]]], more: Iterable[tuple[str, PodTerm, int]],
                  have: Collection[tuple[str, PodTerm, int]] | None = None) -> list[tuple[str, tuple[str, PodTerm, int]]]:
    """``order`` ((repr, held term) sorted by repr) with the terms of ``more`` it lacks, in order:
    the repr of a kept term is not computed again (most of :func:`pod_scoring`'s time on a model
    with thousands of bound pods holding terms). ``have``: the terms of ``order`` where the caller
    holds them (a BoundScoring's ``held``), so that they are not gathered again."""
    have = {h for _, h in order} if have is None else have
    new = sorted(((repr(h), h) for h in set(more) if h not in have), key=operator.itemgetter(0))
    return list(heapq.merge(order, new, key=operator.itemgetter(0))) if new else order


def _group_member(group: tuple, pod: ScoreRules) -> bool:
    """Whether ``pod`` counts in ``group``: ("selector", namespace, selector) spread's
    countPodsMatchSelector (not being deleted, an empty selector matches none); ("owner",
    namespace, controller) the system default's stand-in; ("match", term) a pod affinity term's
    matches (deleted ones too, as kube); ("holds", kind, term, weight) the pods holding that term."""
    kind = group[0]
    if kind == "selector":
        return (pod.namespace == group[1] and not pod.terminating and bool(group[2].requirements)
                and group[2].matches(pod.labels))
    if kind == "owner":
        return pod.namespace == group[1] and not pod.terminating and pod.owner == group[2]
    if kind == "match":
        return group[1].matches(pod.namespace, pod.labels)
    return group[1:] in set(pod.held())


class _ScoringBuilder:
    """Builds ``Problem.pod_scoring`` for a batch of pending pods (:func:`pod_scoring`)."""

    def __init__(self, node_docs: Sequence[Mapping[str, Any]], bound: BoundScoring, warnings: list[str],
                 pending: Sequence[ScoreRules]) -> None:
        self.docs, self.bound, self.warnings, self.pending = node_docs, bound, warnings, pending
        # The pod-independent rows (a key's domains on every node that has it) are kept with the
        # bound pods (one model, one set of nodes): a review does not walk every node again.
        self.plain = bound.plain_rows
        self.groups: dict[tuple, int] = {}
        self._members: dict[tuple, np.ndarray] = {}
        self.rows: dict[tuple, int] = {}
        self.row_ids: list[np.ndarray] = []
        self.row_keys: list[str] = []
        self.values: dict[str, dict[str, int]] = {}  # per key, domain ids of its values
        self.dropped = 0

    def members(self, key: tuple) -> np.ndarray:
        """Which pending pods join group ``key`` (once per key: a term of every pod of a batch asks)."""
        got = self._members.get(key)
        if got is None:
            got = self._members[key] = np.array([_group_member(key, p) for p in self.pending], dtype=bool)
        return got

    def group(self, key: tuple) -> int | None:
        got = self.groups.get(key)
        if got is None:
            if len(self.groups) >= MAX_SCORING_GROUPS:
                self.dropped += 1
                return None
            got = self.groups[key] = len(self.groups)
        return got

    def topology(self, key: str, required: frozenset[str] = frozenset(), rules: ScoreRules | None = None,
                 honor_affinity: bool = False, honor_taints: bool = False) -> int:
        """The row of ``key``: -1 at nodes without it, without one of ``required`` (the pod's
        other keys) or left out by ``rules``' node inclusion policies (:func:`node_included`:
        ``honor_affinity`` its node selector and required node affinity, ``honor_taints`` its
        tolerations; each apart from the other)."""
        honor_affinity = rules is not None and honor_affinity and bool(rules.node_selector or rules.node_terms is not None)
        honor_taints = rules is not None and honor_taints
        affinity = (rules.node_selector, rules.node_terms) if honor_affinity else None  # (none: every node, one row)
        tolerations = rules.tolerations if honor_taints else None
        row_key = (key, required, affinity, tolerations)
        got = self.rows.get(row_key)
        if got is not None:
            return got
        plain = not required and affinity is None and tolerations is None
        cached = self.plain.get(key)
        ids = self.values.get(key)
        if ids is None:  # a key's domain ids as the cached row numbers them
            ids = self.values[key] = dict(cached[1]) if cached is not None else {}
        if plain and cached is not None and len(cached[0]) == len(self.docs):
            return self._add_row(row_key, key, cached[0])
        row = np.full(len(self.docs), -1, dtype=np.int32)
        for i, doc in enumerate(self.docs):
            labels = doc["labels"]
            value = labels.get(key)
            if value is None or not required <= labels.keys():
                continue
            if (honor_affinity or honor_taints) and not node_included(
                    doc, rules.node_selector, rules.node_terms, rules.tolerations, honor_affinity, honor_taints):
                continue
            row[i] = ids.setdefault(value, len(ids))
        if plain:
            row.flags.writeable = False
            self.plain[key] = (row, dict(ids))
        return self._add_row(row_key, key, row)

    def _add_row(self, row_key: tuple, key: str, row: np.ndarray) -> int:
        got = self.rows[row_key] = len(self.row_ids)
        self.row_ids.append(row)
        self.row_keys.append(key)
        return got

    def terms(self, rules: ScoreRules, held: Iterable[tuple[str, PodTerm, int]]) -> list[SoftPodTerm]:
        out: list[SoftPodTerm] = []

        def add(kind: str, group: tuple, row: Callable[[], int], value: int, always: bool = False) -> None:
            # An affinity term whose group has no pod anywhere scores every node alike: left out.
            if not always and group not in self.groups and not self.bound.counts(group) and not self.members(group).any():
                return
            g = self.group(group)
            if g is not None:
                out.append(SoftPodTerm(kind, g, row(), value))

        if rules.has_spread:  # the pod's own constraints: nodes lacking one of their keys are not scored
            keys = frozenset(c.topology_key for c in rules.soft_spread)
            for c in rules.soft_spread:
                add("spread", ("selector", rules.namespace, c.selector),
                    lambda c=c: self.topology(c.topology_key, keys, rules, c.honor_affinity, c.honor_taints),
                    c.max_skew, always=True)
        elif rules.owner is not None:  # the system default constraints (nodeAffinityPolicy Honor)
            for key, skew in SYSTEM_DEFAULT_SPREAD:
                add("default_spread", ("owner", rules.namespace, rules.owner), lambda key=key: self.topology(key, frozenset(), rules, True),
                    skew, always=True)
        for kind, terms in (("affinity", rules.preferred), ("anti_affinity", rules.preferred_anti)):
            for t, weight in terms:
                add(kind, ("match", t), lambda t=t: self.topology(t.topology_key), weight)
        for kind, t, weight in held:  # the other pods' terms that select this pod
            if t.matches(rules.namespace, rules.labels):
                add(kind, ("holds", kind, t, weight), lambda t=t: self.topology(t.topology_key), weight)
        return out


def pod_scoring(pending: Sequence[ScoreRules], node_docs: Sequence[Mapping[str, Any]], bound: BoundScoring,
                warnings: list[str]) -> PodScoring | None:
    """``Problem.pod_scoring`` for ``pending`` (one per workload) on ``node_docs`` against the bound
    pods (``bound``); None when no pod has anything these plugins score."""
    builder = _ScoringBuilder(node_docs, bound, warnings, pending)
    # The bound pods' terms and the pending pods', in a stable order (the groups' and the file's):
    # the bound ones' order is kept with them (built once per model), the pending ones merged in.
    held_list = [h for _, h in _merged_order(bound.held_order(), (h for rules in pending for h in rules.held()),
                                             bound.held)]
    terms = [builder.terms(rules, held_list) for rules in pending]
    if not any(terms):
        return None
    if builder.dropped:
        warnings.append(f"pod scoring: {builder.dropped} term(s) left out past {MAX_SCORING_GROUPS} pod groups "
                        "(PodTopologySpread / InterPodAffinity score them as equal on every node)")
    pos = {doc["name"]: i for i, doc in enumerate(node_docs)}
    groups = list(builder.groups)
    counts = np.zeros((len(groups), len(node_docs)), dtype=np.int32)
    members = np.zeros((len(groups), len(pending)), dtype=bool)
    for g, key in enumerate(groups):
        counts[g] = bound.count_row(key, pos)
        members[g] = builder.members(key)
    names = tuple(f"{key[0]}-{g}" for g, key in enumerate(groups))
    topo = np.array(builder.row_ids, dtype=np.int32).reshape(len(builder.row_ids), len(node_docs))
    topo_names = tuple(f"{key}#{t}" for t, key in enumerate(builder.row_keys))
    return PodScoring(tuple(builder.row_keys), topo, names, counts, members, tuple(tuple(t) for t in terms), topo_names)


# --- usage of bound pods -------------------------------------------------------------------


#: ``iro-fed.io/gpu-cards`` as IRO's scheduler writes it: card indices in ASCII decimal digits,
#: comma-separated, nothing else (``int()`` also took ``"+1"``, ``"1_0"``, ``" 3"``, ``"٣"``).
_CARDS = re.compile(r"[0-9]+(?:,[0-9]+)*")
#: A card index of more digits is on no node (at most MAX_GPUS cards), and is not handed to int()
#: (which refuses over 4,300 digits).
_CARD_DIGITS = 9


def _parse_cards(text: str | None) -> list[int] | None:
    """The card indices of a bound pod's ``iro-fed.io/gpu-cards``; None when absent, empty or
    blank (no annotation: first fit). Anything but comma-separated ASCII decimal digits raises
    ValueError saying why (an empty entry, as in ``"0,,1"``, a sign, a space, an underscore)."""
    if text is None or not text.strip():
        return None
    if not _CARDS.fullmatch(text):
        raise ValueError("not card numbers in ASCII decimal digits separated by ',', as IRO's scheduler writes them")
    parts = text.split(",")
    long = next((p for p in parts if len(p.lstrip("0")) > _CARD_DIGITS), None)
    if long is not None:
        raise ValueError(f"card number {_shown(long)} is past any node's cards (at most {MAX_GPUS})")
    return [int(p) for p in parts]


def _card_problem(chosen: list[int], count: int, cards: list[int], take: int) -> str | None:
    """Why a bound pod's well-formed card list cannot be what it holds on a node of ``cards`` (free
    milli per card), taking ``take`` milli from each of ``count`` cards; None when it can."""
    if len(chosen) != count:
        return f"lists {len(chosen)} card(s), but the pod holds {count}"
    if len(set(chosen)) != len(chosen):
        # A repeated card would pass the free check once per copy and take one card twice
        # (negative free milli, and the whole snapshot refused).
        return f"lists card {next(c for c in chosen if chosen.count(c) > 1)} twice"
    for c in chosen:
        if not 0 <= c < len(cards):
            return f"card {c} is not on the node (it has {len(cards)})"
        if cards[c] < take:
            return f"card {c} has {cards[c]} milli free, the pod takes {take} (another pod holds it)"
    return None


class _OnceLog:
    """Warnings logged once per key (a node and an annotation value), not once per snapshot: the
    cluster model is rebuilt on every change, and a bad annotation stays until someone fixes it.
    Bounded: past ``size`` keys the oldest is forgotten (and may be logged again)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seen: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()

    def first(self, key: tuple[str, str]) -> bool:
        """Whether ``key`` is new (and now remembered)."""
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self.size:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = None
            return True

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


_CARDS_LOGGED = _OnceLog()
#: The model's other usage warnings (a pod left out of usage, GPUs held that are not free, usage
#: clamped to allocatable), logged once per key as the gpu-cards one: they went only into
#: ``warnings``, which no caller logs, so an operator never saw them.
_USAGE_LOGGED = _OnceLog()


def _once_key(text: str) -> str:
    """``text`` as a once-log key: a long one (an annotation may hold 256 KiB) by its digest."""
    return text if len(text) <= 64 else hashlib.sha256(text.encode()).hexdigest()


def _usage_warning(warnings: list[str], message: str, key: tuple[str, str]) -> None:
    """Add ``message`` to the model's ``warnings`` (each build) and log it once per ``key``."""
    warnings.append(message)
    if _USAGE_LOGGED.first((key[0], _once_key(key[1]))):
        log.warning("%s", message)


def _cards_ignored(node: str, pod: Mapping[str, Any], text: str, why: str, warnings: list[str]) -> None:
    """Say that a bound pod's ``iro-fed.io/gpu-cards`` is ignored (its cards counted first fit):
    in the snapshot's ``warnings`` each time, in the log once per node and value."""
    message = (f"node {node}: pod {obj_key(pod)}: annotation {ANN_GPU_CARDS} {_shown(text, 80)!r} ignored ({why}); "
               "its GPUs are counted first fit")
    warnings.append(message)
    # A value may be up to 256 KiB (the annotations' limit): a long one is remembered by its digest.
    if _CARDS_LOGGED.first((node, _once_key(text))):
        log.warning("%s", message)


def apply_usage(node: dict[str, Any], pods: Iterable[Mapping[str, Any]], resources: Sequence[str],
                warnings: list[str]) -> tuple[float, float]:
    """Fill ``allocated`` and ``gpu_free_milli`` of a node doc from the pods bound to it; return
    their summed non-zero (cpu, memory) request, kube's ``NodeInfo.NonZeroRequested`` (not
    clamped to allocatable: kube does not clamp it either)."""
    alloc = dict.fromkeys(resources, 0.0)
    nonzero = [0.0, 0.0]
    cards = [GPU_MILLI] * int(node.get("gpus", 0))
    for pod in pods:
        try:
            d = pod_demand(pod, resources)
        except (PodSpecError, QuantityError) as exc:
            message = f"ignored in usage: {exc}"
            _usage_warning(warnings, message, (node["name"], message))
            continue
        for r in resources:
            alloc[r] += d.requests.get(r, 0.0)
        nonzero[0] += d.nonzero[0]
        nonzero[1] += d.nonzero[1]
        if d.gpu_count and cards:
            take = d.gpu_milli if d.gpu_count == 1 else GPU_MILLI
            text = (_meta(pod).get("annotations") or {}).get(ANN_GPU_CARDS)
            try:
                chosen = _parse_cards(text)
                why = None if chosen is None else _card_problem(chosen, d.gpu_count, cards, take)
            except ValueError as exc:
                chosen, why = None, str(exc)
            if why is not None:
                _cards_ignored(node["name"], pod, str(text), why, warnings)
                chosen = None
            if chosen is None:
                if take < GPU_MILLI:
                    fits = [c for c in range(len(cards)) if cards[c] >= take]
                    chosen = [min(fits, key=lambda c: cards[c])] if fits else []
                else:
                    chosen = [c for c in range(len(cards)) if cards[c] == GPU_MILLI][: d.gpu_count]
                if len(chosen) != d.gpu_count:
                    message = f"node {node['name']}: pod {obj_key(pod)} holds GPUs the node does not have free"
                    _usage_warning(warnings, message, (node["name"], f"gpus held: {obj_key(pod)}"))
                    chosen = []
            for c in chosen:
                cards[c] -= take
    for r in resources:
        cap = node["capacity"][r]
        if alloc[r] > cap:
            # Keyed by node and resource, not by the sum: it changes with every pod bound there.
            message = f"node {node['name']}: {r} requested {alloc[r]:g} exceeds allocatable {cap:g}; clamped"
            _usage_warning(warnings, message, (node["name"], f"over allocatable: {r}"))
            alloc[r] = cap
    node["allocated"] = alloc
    node["gpu_free_milli"] = cards
    return nonzero[0], nonzero[1]


def _wide_columns(docs: Sequence[Mapping[str, Any]], objects: Mapping[str, Mapping[str, Any]],
                  by_node: Mapping[str, Sequence[Mapping[str, Any]]], configured: Sequence[str],
                  warnings: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per resource a node lists beyond ``configured`` (and ``pods``), the capacity and usage
    columns over ``docs`` as a model built for pods asking for it has them (:func:`node_doc`,
    :func:`apply_usage`: MIN_CAPACITY where a node has none, usage clamped to allocatable; ``pods``
    counts the pods on the node). Only the pods on a node that lists such a resource and request
    one are parsed again. Lenient: a bad quantity of one is a warning and none of it there."""
    allocs = []
    names = {"pods"}
    for doc in docs:
        alloc = _allocatable(objects[doc["name"]]) or {}
        allocs.append(alloc)
        names.update(k for k in alloc if isinstance(k, str) and _RESOURCE_NAME.fullmatch(k))
    wide = sorted(names - {*configured, GPU_RESOURCE, "gpu"})
    n = len(docs)
    out = {r: (np.full(n, MIN_CAPACITY), np.zeros(n)) for r in wide}
    for i, (doc, alloc) in enumerate(zip(docs, allocs, strict=True)):
        listed: set[str] = set()
        for r in wide:
            if r not in alloc:
                continue
            try:
                amount = _amount(r, alloc[r], f"node {doc['name']}", f"status.allocatable.{r}")
            except (PodSpecError, QuantityError) as exc:
                message = f"ignored for pods that ask for {r}: {exc}"
                _usage_warning(warnings, message, (doc["name"], message))
                continue
            if amount > 0:
                out[r][0][i] = amount
                listed.add(r)
        pods = by_node.get(doc["name"], ())
        if "pods" in out:
            out["pods"][1][i] = len(pods)
        for pod in pods if listed - {"pods"} else ():
            asked = sorted(requested_names(pod) & listed)
            if not asked:
                continue
            try:
                requests = pod_requests(pod, asked)
            except (PodSpecError, QuantityError):
                continue  # (the usage's warning names it when the model reads that resource)
            for r in asked:
                out[r][1][i] += requests.get(r, 0.0)
    for cap, used in out.values():
        np.minimum(used, cap, out=used)
    return out


def _nonzero_allocated(nonzero: tuple[float, float], resources: Sequence[str]) -> dict[str, float]:
    """A node's summed non-zero request (:func:`apply_usage`) as the problem file's
    ``nonzero_allocated`` (the scored resources the problem has). Kept under the file's largest
    number: a node asked for more than that scores 0 either way (its capacity is below it)."""
    return {r: min(v, MAX_NUMBER) for r, v in zip(NONZERO_RESOURCES, nonzero, strict=True) if r in resources}


def pods_by_node(pods: Iterable[Mapping[str, Any]], warnings: list[str] | None = None) -> dict[str, list[Mapping[str, Any]]]:
    """The pods a node's usage counts (:func:`apply_usage`), by ``spec.nodeName``: finished pods
    (``Succeeded``, ``Failed``) are left out; a ``nodeName`` that is not a string goes to ``warnings``."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        status = pod.get("status") if isinstance(pod, Mapping) else None
        if isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES:
            continue
        node_name = _spec(pod).get("nodeName")
        if isinstance(node_name, str) and node_name:
            by_node.setdefault(node_name, []).append(pod)
        elif node_name and warnings is not None:  # a list would not even hash: say so instead of crashing the model
            message = f"ignored in usage: {_who(pod)}: spec.nodeName: expected a string, got {json_kind(node_name)}"
            _usage_warning(warnings, message, ("", message))
    return by_node


def annotated_usage(node_obj: Mapping[str, Any], node: dict[str, Any], resources: Sequence[str]) -> None:
    """NodeList mode: usage from the ``iro-fed.io/allocated`` node annotation, if any."""
    who = f"node {node['name']}"
    ann = _str_map(_meta(node_obj).get("annotations"), who, "metadata.annotations").get(ANN_NODE_ALLOCATED)
    alloc = dict.fromkeys(resources, 0.0)
    if ann:
        path = f"metadata.annotations.{ANN_NODE_ALLOCATED}"
        try:
            doc = json.loads(ann)
        except json.JSONDecodeError as exc:
            raise _bad(who, path, f"not JSON: {exc}") from None
        if not isinstance(doc, Mapping):
            raise _bad(who, path, f"expected a JSON object of quantities, got {json_kind(doc)}")
        for r in resources:
            if r in doc:
                alloc[r] = min(_amount(r, doc[r], who, f"{path}.{r}"), node["capacity"][r])
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
                 config: ClusterConfig | None = None, doc_cache: dict[tuple, dict[str, Any]] | None = None,
                 keys: Sequence[tuple[str, str, str] | None] | None = None,
                 pending: Sequence[Mapping[str, Any]] | None = None,
                 rules_cache: dict[tuple[str, str], PodRules | PodSpecError] | None = None,
                 refuse_bad_nodes: bool = False, wide: bool = False) -> None:
        """``doc_cache``: parsed node docs by :func:`node_cache_key` (uid, name, resourceVersion), kept by the caller and
        reused by the next model built from the same Node objects (parsing 5,000 nodes' quantities
        is most of a rebuild). ``keys``: ``node_cache_key`` of each of ``nodes``, where the caller
        has them already (the extender keys its models by them). ``pending``: the pods this model
        is built for (the scheduler's batch): the configured resources are widened by the other
        ones they request (and ``pods`` when a node is short of slots, :func:`feasibility_resources`),
        which bound fit only (``Problem.feasibility_only``); ``None``: the configured ones.
        ``rules_cache``: the bound pods' :class:`PodRules` by (uid, resourceVersion), kept by the
        caller for the next model (:func:`placed_pods`): a batch parses only the pods that changed.
        ``refuse_bad_nodes`` (NodeList mode, ``bound_pods`` None): a named node whose document does not
        parse (its ``iro-fed.io/allocated`` annotation, a quantity, a taint) is left out, its error in
        :attr:`refused_nodes`, rather than failing the whole model (one node failed every node of the
        extender's answer). ``wide`` (a model built for no pods, from bound pods: the webhook's
        cache): the capacity and usage of every other resource a node lists, and of ``pods``, are
        kept too (:func:`_wide_columns`), so that :meth:`for_pods` widens the problem by replacing
        its arrays, not by building another model from every object in the request's thread."""
        if keys is not None and len(keys) != len(nodes):
            raise ValueError(f"keys: {len(keys)} for {len(nodes)} nodes")
        config = config or ClusterConfig()
        self.warnings: list[str] = []
        by_node = pods_by_node(bound_pods or (), self.warnings)
        self._widened = pending is not None
        configured = len(config.resources)
        if pending is not None:  # the resource list first, so that the model is built once
            config = dc_replace(config, resources=feasibility_resources(config.resources, nodes, by_node, pending))
        self.config = config
        res = config.resources
        #: The resources added for the pending pods (after the configured ones): fit only, never scored.
        self.feasibility_only: tuple[str, ...] = tuple(res[configured:])
        self.node_objects: dict[str, Mapping[str, Any]] = {}
        #: Nodes left out (``refuse_bad_nodes``): name -> the error naming the field.
        self.refused_nodes: dict[str, str] = {}
        docs = []
        for k, obj in enumerate(nodes):
            # The key is checked before the cache is asked: a non-string resourceVersion is an
            # error, never another node's parse.
            key = node_cache_key(obj) if keys is None else keys[k]
            if key:
                key = (*key, res)  # a doc parsed for other resources has other columns
            base = doc_cache.get(key) if (doc_cache is not None and key) else None
            if base is None:
                try:
                    base = node_doc(obj, res)
                except (PodSpecError, QuantityError) as exc:
                    name = _meta(obj).get("name")
                    if not (refuse_bad_nodes and isinstance(name, str) and name):
                        raise
                    # One node kube-scheduler cannot have meant (a bad quantity, a taint without a
                    # key) fails that node, not every node of the answer. (A nameless one cannot be
                    # named in the reply: the caller refuses it before.)
                    if name not in self.node_objects:
                        self.refused_nodes.setdefault(name, str(exc))
                    continue
                if doc_cache is not None and key:
                    if len(doc_cache) > 50_000:
                        doc_cache.clear()
                    doc_cache[key] = base
            doc = dict(base)  # usage is set on this copy; the cached parse stays as it was
            if doc["name"] in self.node_objects or doc["name"] in self.refused_nodes:
                continue
            if bound_pods is None:
                try:
                    annotated_usage(obj, doc, res)
                except PodSpecError as exc:
                    if not refuse_bad_nodes:
                        raise
                    self.refused_nodes[doc["name"]] = str(exc)
                    continue
                self.node_objects[doc["name"]] = obj
            else:
                self.node_objects[doc["name"]] = obj
                nonzero = apply_usage(doc, by_node.get(doc["name"], ()), res, self.warnings)
                doc["nonzero_allocated"] = _nonzero_allocated(nonzero, res)
            docs.append(doc)
        # The nodes' NonZeroRequested is their docs' nonzero_allocated (none in NodeList mode:
        # the node annotation gives a sum, not pods), so the problem is built once.
        try:
            self._build(docs)
        except ProblemValidationError as exc:
            bad = _refusable_nodes(exc, docs) if refuse_bad_nodes else None
            if not bad:
                raise
            # A node past the model's limits (1Ei of memory): refused alone, as an unreadable one.
            self.refused_nodes.update(bad)
            for name in bad:
                del self.node_objects[name]
            self._build([d for d in docs if d["name"] not in bad])
        if self.feasibility_only:
            self.problem = self.problem.replace(feasibility_only=self.feasibility_only)
        self._node_pos = {d["name"]: i for i, d in enumerate(self.node_docs)}
        # The bound pods by node, for the plugins that read them (None in NodeList mode: no pods);
        # read on first use (:meth:`placed`), and only when some pod needs them.
        self._by_node = by_node if bound_pods is not None else None
        self._placed: PlacedPods | None = None
        self._rules_cache = rules_cache
        self._memo: dict[Any, Any] = {}  # what pod_filter_failures keeps over the bound pods and nodes
        self._bound_anti: bool | None = None
        self._bound_scoring: BoundScoring | None = None
        self._wider: dict[tuple[str, ...], ClusterModel] = {}  # for_pods' models, by resources
        self._wider_lock = threading.Lock()  # (one review builds one, the others wait for it)
        self._short_of_slots: dict[int, bool] = {}
        self._base: ClusterModel | None = None  # a widened view's model: its pods are read there, once
        self._wide: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        if wide and pending is None and bound_pods is not None:
            self._wide = _wide_columns(self.node_docs, self.node_objects, by_node, res, self.warnings)
            self._anti_affinity_bound()  # (a walk over every bound pod: here, not in the first review)
        self._doc_cache, self._bound_pods = doc_cache, bound_pods

    def _build(self, docs: list[dict[str, Any]]) -> None:
        """The node docs, the problem skeleton and the cluster problem of ``docs``."""
        kinds: dict[str, str] = {}
        for doc in docs:
            if doc["labels"].get(DOMAIN_KIND_LABEL):
                kinds.setdefault(doc["domain"], doc["labels"][DOMAIN_KIND_LABEL])
        self.node_docs = docs
        domain_names = list(dict.fromkeys(d["domain"] for d in docs)) or [DEFAULT_DOMAIN]
        self.skeleton = self.config.problem_skeleton(domain_names, docs, kinds)
        self.problem = problem_from_dict(self.skeleton, source="cluster snapshot")

    def pods_on(self, node: str) -> Sequence[Mapping[str, Any]]:
        """The bound pods this model counts on ``node`` (none in NodeList mode)."""
        return (self._by_node or {}).get(node, ())

    def placed(self) -> PlacedPods:
        """The bound pods as NodePorts, PodTopologySpread and InterPodAffinity read them (built once)."""
        if self._base is not None:
            return self._base.placed()
        if self._placed is None:
            self._placed = placed_pods(self._by_node or {}, self.warnings, self._rules_cache)
        return self._placed

    def for_pods(self, pods: Sequence[Mapping[str, Any]]) -> ClusterModel:
        """This model, or where ``pods`` need more resources checked than it has (one they request
        that the config does not list, or ``pods`` while a node is short of slots:
        :func:`feasibility_resources`) the model for them, kept for the next pods that need the
        same: a model built for no pods (the webhook's cached one) put a pod on a full node or on
        one without its extended resource. A ``wide`` model (``client.ClusterCache``'s) widens
        its problem's arrays with the columns it kept (:meth:`_widened_view`, milliseconds);
        another is built from the same objects with ``pending=pods`` (a rebuild). One at a time."""
        if self._widened or self._by_node is None:
            return self
        configured = tuple(self.config.resources)
        res = _widened_resources(configured, pods, self._short_of_slots_for)
        if res == configured:
            return self
        with self._wider_lock:
            got = self._wider.get(res)
            if got is None:
                if len(self._wider) >= 16:
                    self._wider.clear()
                if self._wide is not None:
                    got = self._widened_view(res)
                else:
                    got = ClusterModel(list(self.node_objects.values()), self._bound_pods, self.config,
                                       doc_cache=self._doc_cache, pending=pods)
                self._wider[res] = got
        return got

    def _short_of_slots_for(self, wanted: int) -> bool:
        """:func:`_short_of_pod_slots` over this model's nodes and bound pods, once per model and
        number of pods (a walk over every node: the webhook asks per request)."""
        short = self._short_of_slots.get(wanted)
        if short is None:
            slots = self._wide.get("pods") if self._wide is not None else None
            if slots is not None:  # (the kept pod slots: no walk over the node objects)
                short = bool(np.any(slots[0] - slots[1] < wanted))
            else:
                short = _short_of_pod_slots(list(self.node_objects.values()), self._by_node or {}, wanted)
            self._short_of_slots[wanted] = short
        return short

    def _widened_view(self, res: tuple[str, ...]) -> ClusterModel:
        """This model with the resources ``res`` (the configured ones, then the added ones, which
        bound fit only), its problem widened by replacing the arrays with the kept columns
        (:func:`_wide_columns`; a resource no node lists: none on any node). The bound pods' rules,
        the pod filters' memo and the scoring counts are shared (they do not depend on resources)."""
        assert self._wide is not None
        configured = len(self.config.resources)
        added = res[configured:]
        n = len(self.node_docs)
        none = (np.full(n, MIN_CAPACITY), np.zeros(n))
        cols = [self._wide.get(r, none) for r in added]
        p = self.problem
        view = copy.copy(self)
        view.config = dc_replace(self.config, resources=res)
        view.skeleton = dict(self.skeleton, resources=list(res))
        view.feasibility_only = tuple(added)
        view.problem = p.replace(resources=res, capacity=np.column_stack([p.capacity, *(c for c, _ in cols)]),
                                 allocated=np.column_stack([p.allocated, *(u for _, u in cols)]),
                                 initial_nonzero=p.initial_nonzero, demand=np.zeros((p.num_workloads, len(res))),
                                 nonzero_demand=p.nonzero_demand, feasibility_only=view.feasibility_only)
        view._widened, view._wide, view._wider = True, None, {}
        view._wider_lock = threading.Lock()
        view._base = self
        return view

    def bound_scoring(self) -> BoundScoring:
        """The bound pods as PodTopologySpread and InterPodAffinity score them (built once; none in NodeList mode)."""
        if self._base is not None:
            return self._base.bound_scoring()
        if self._bound_scoring is None:
            self._bound_scoring = BoundScoring(self._by_node or {}, self.warnings)
        return self._bound_scoring

    def _anti_affinity_bound(self) -> bool:
        """Whether some bound pod has required anti-affinity (then every pod is checked against it)."""
        if self._base is not None:
            return self._base._anti_affinity_bound()
        if self._bound_anti is None:
            self._bound_anti = self._by_node is not None and any(
                has_anti_affinity(p) for pods in self._by_node.values() for p in pods)
        return self._bound_anti

    def _needs_pod_filters(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod``'s nodes are filtered by the pods on them: it reads them, or a bound pod's
        anti-affinity may exclude it. False for most pods, which then pay nothing more."""
        return self._by_node is not None and (reads_pods(pod) or self._anti_affinity_bound())

    def _pod_filter_labels(self, pods: Sequence[Mapping[str, Any]], wls: Sequence[dict[str, Any]],
                           extra: dict[str, set[str]]) -> None:
        """Add to each workload of ``wls`` the synthetic labels of the nodes that pass NodePorts,
        PodTopologySpread and InterPodAffinity for its pod (feasibility's ``POD_FILTER_PREFIXES``),
        one per failure kind that some node has; the passing nodes go to ``extra``."""
        done: dict[str, tuple[str, ...]] = {}
        for pod, wl in zip(pods, wls, strict=True):
            if not self._needs_pod_filters(pod):
                if reads_pods(pod):  # (the pods on nodes unknown) a bad term is the pod's error all the same
                    pod_rules(pod)
                continue
            rules = pod_rules(pod)
            if not rules.reads_pods and not self.placed().anti:
                continue
            digest = _affinity_key([rules.namespace, rules.labels, _spec(pod)])
            keys = done.get(digest)
            if keys is None:  # pods of one template (the same labels and spec) are evaluated once
                failures = pod_filter_failures(rules, self.placed(), self.node_docs, memo=self._memo)
                keys = done[digest] = self._failure_labels(failures, extra)
            wl["node_selector"].update(dict.fromkeys(keys, "true"))

    def _failure_labels(self, failures: Mapping[str, str], extra: dict[str, set[str]]) -> tuple[str, ...]:
        """The synthetic label of each failure kind in ``failures`` (node -> kind), named by the
        nodes that fail: pods with the same verdict share one label (a StatefulSet's replicas
        differ in a label, not in where they may go), so the nodes get one label per verdict."""
        keys = []
        for kind in sorted(set(failures.values())):
            failing = sorted(n for n, k in failures.items() if k == kind)
            key = _FAILURE_PREFIX[kind] + hashlib.sha1("\n".join(failing).encode()).hexdigest()[:12]
            if key not in extra:
                extra[key] = self._node_pos.keys() - set(failing)
            keys.append(key)
        return tuple(keys)

    def placement_conflict(self, pod: Mapping[str, Any], node: str, earlier: PlacedPods,
                           rules: PodRules | None = None, memo: dict[Any, Any] | None = None) -> str | None:
        """kube's reason (:data:`FAILURE_REASONS`) when ``pod`` on ``node`` fails NodePorts,
        PodTopologySpread or InterPodAffinity against the bound pods plus ``earlier`` (the pods of
        its batch placed before it), else None. The snapshot's labels saw the bound pods only:
        kube places one pod at a time, so two anti-affine replicas of one batch must not share a
        topology domain. ``rules``: ``pod``'s, parsed already (None: parsed here); ``memo``: the
        counts over the bound pods to keep (a batch's; None: the model's own)."""
        kind = self._conflicts(pod, [node], earlier, rules, memo).get(node)
        return FAILURE_REASONS[kind] if kind else None

    def extra_pod_conflicts(self, pod: Mapping[str, Any], nodes: Iterable[str],
                            extra: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
        """The nodes of ``nodes`` (names; others are skipped) where ``pod`` fails NodePorts,
        PodTopologySpread or InterPodAffinity against the bound pods plus ``extra`` (pods by node
        that this model does not count yet: the extender's assumed pods, read as bound pods are,
        :func:`placed_pods`): node -> failure kind (a key of :data:`FAILURE_REASONS`). The
        snapshot's labels saw the bound pods only. {} in NodeList mode or without ``extra``."""
        if self._by_node is None or not extra:
            return {}
        return self._conflicts(pod, [n for n in nodes if n in self._node_pos], placed_pods(extra))

    def _conflicts(self, pod: Mapping[str, Any], nodes: list[str], earlier: PlacedPods,
                   rules: PodRules | None = None, memo: dict[Any, Any] | None = None) -> dict[str, str]:
        if self._by_node is None or not nodes or not (reads_pods(pod) or earlier.anti):
            return {}  # the earlier pods change nothing: the snapshot's verdict stands
        return pod_filter_failures(pod_rules(pod) if rules is None else rules, self.placed(), self.node_docs, nodes,
                                   earlier, self._memo if memo is None else memo)

    def check_pod(self, pod: Mapping[str, Any]) -> None:
        """Raise the error that :meth:`with_pods` would raise for this pod, without building a problem."""
        res = self.config.resources
        if self._widened:  # its other resources are read too (a bad quantity of one is its error)
            res = feasibility_resources(res, (), {}, [pod])
        wl = workload_doc(pod, res, self.node_docs, {})
        if reads_pods(pod) or self._needs_pod_filters(pod):
            pod_rules(pod)
        score_rules(pod)
        try:
            problem_from_dict(dict(self.skeleton, resources=list(res), nodes=[], workloads=[wl]), source="pending pods")
        except ProblemValidationError as exc:
            raise PodSpecError(_name_pods(exc, [pod])) from None

    def with_pods(self, pods: Sequence[Mapping[str, Any]], scoring: bool = True,
                  assumed: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> Snapshot:
        """A snapshot whose workloads are ``pods`` (pending), in order. ``scoring``: build
        ``Problem.pod_scoring`` (it walks every bound pod once per model, and the pods' terms per
        call): only kube-default reads it (:func:`solvers.reads_pod_scoring`); False leaves it None.
        ``assumed``: pods by node that the model does not count yet (the extender's assumed pods),
        counted by the pod scoring as bound pods (their usage is the caller's: ``set_node_pods``)."""
        extra: dict[str, set[str]] = {}
        parsed = [_workload(p, self.config.resources, self.node_docs, extra) for p in pods]
        wls = [wl for wl, _ in parsed]
        self._pod_filter_labels(pods, wls, extra)
        scoring_rules = [score_rules(p) for p in pods]  # (parsed either way: a bad term is the pod's error)
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
            "nonzero_demand": np.array([d.nonzero for _, d in parsed], dtype=np.float64).reshape(len(pods), 2),
        }
        if extra:
            added: dict[int, dict[str, str]] = {}  # per node its synthetic labels: one copy of a node, not one per label
            for label, names in extra.items():
                for name in names:
                    added.setdefault(self._node_pos[name], {})[label] = "true"
            nodes = list(base.nodes)
            for i, labels in added.items():
                nodes[i] = dc_replace(nodes[i], labels={**nodes[i].labels, **labels})
            changes["nodes"] = nodes
        bound = self.bound_scoring() if scoring else None  # (its notes go to the model's warnings first)
        warnings = list(self.warnings)
        if bound is not None and assumed and self._by_node is not None:
            bound = bound.plus(BoundScoring({n: ps for n, ps in assumed.items() if n in self._node_pos}, warnings))
        changes["pod_scoring"] = pod_scoring(scoring_rules, self.node_docs, bound, warnings) if bound is not None else None
        problem = base.replace(**changes)
        return Snapshot(problem, list(pods), self.node_objects, warnings)


#: The workload fields that pod annotations set, and the annotation each comes from.
_FIELD_ANNOTATIONS = (*((name, key) for key, name in _SCALAR_ANNOTATIONS.items()),
                      ("allowed_domains", ANN_ALLOWED_DOMAINS), ("gpu.models", ANN_GPU_MODELS))


def annotation_path(path: str, msg: str) -> tuple[str, str]:
    """A loader error on a workload field a pod annotation sets, as the annotation's (``user_region``
    -> ``metadata.annotations.iro-fed.io/user-region``, ``allowed_domains[0]`` ->
    ``metadata.annotations.iro-fed.io/allowed-domains[0]``: an item of a list annotation by its
    position): the operator wrote the annotation, not the field. Other paths as they are. The one
    rule for the scheduler, extender, webhook and the edge agent's /recommend."""
    for name, key in _FIELD_ANNOTATIONS:
        if path == name or path.startswith(f"{name}["):
            return f"metadata.annotations.{key}{path[len(name):]}", msg.replace("needs user_region", f"needs {ANN_USER_REGION}")
    return path, msg


_NODE_PATH = re.compile(r"nodes\[([0-9]+)\]\.?(.*)")


def _refusable_nodes(exc: ProblemValidationError, docs: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """Each node an error of the cluster problem is about, with the error (``node b:
    capacity.memory: must be at most ...``); None when an error is about no one node (then
    refusing nodes would not help)."""
    out: dict[str, list[str]] = {}
    for path, msg in exc.errors:
        m = _NODE_PATH.fullmatch(path)
        if m is None or int(m[1]) >= len(docs):
            return None
        field_path = m[2]
        if field_path.startswith("capacity."):  # the model's capacity is the node's allocatable
            field_path = f"status.allocatable.{field_path[len('capacity.'):]}"
        out.setdefault(docs[int(m[1])]["name"], []).append(f"{field_path}: {msg}" if field_path else msg)
    return {name: f"node {name}: " + "; ".join(msgs) + " (the model's limit)" for name, msgs in out.items()}


def _name_pods(exc: ProblemValidationError, pods: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for path, msg in exc.errors:
        if path.startswith("workloads["):
            idx = int(path[len("workloads["):path.index("]")])
            rest = path[path.index("]") + 1:].lstrip(".")
            rest, msg = annotation_path(rest, msg)
            lines.append(f"pod {obj_key(pods[idx])}: {rest}: {msg}")
        else:
            lines.append(f"{path}: {msg}")
    return "; ".join(lines)


def build_snapshot(nodes: Sequence[Mapping[str, Any]], bound_pods: Sequence[Mapping[str, Any]] | None,
                   pending: Sequence[Mapping[str, Any]], config: ClusterConfig | None = None) -> Snapshot:
    """Nodes + bound pods (``None``: usage from node annotations) + pending pods -> snapshot."""
    # pending: the resources they request beyond the configured ones bound fit (an FPGA, a full
    # node's pod slots), as in the scheduler and the extender.
    return ClusterModel(nodes, bound_pods, config, pending=pending).with_pods(pending)


def load_config(path: str | os.PathLike | None) -> ClusterConfig:
    """The cluster config file, or the defaults when no path is given."""
    return ClusterConfig() if path is None else ClusterConfig.load(Path(path))


def assignment_names(snapshot: Snapshot, assignment: np.ndarray) -> dict[str, str | None]:
    """``{namespace/name: node name or None}`` for an assignment over the snapshot's workloads."""
    p = snapshot.problem
    return {w.name: (p.nodes[int(assignment[i])].name if assignment[i] >= 0 else None) for i, w in enumerate(p.workloads)}
