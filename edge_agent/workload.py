"""The body of ``POST /recommend``: a workload object of the problem file, or a Kubernetes Pod.

A Pod (``kind: Pod`` or an object with ``spec.containers``) becomes a workload object:

* ``name``: ``namespace/name`` (``metadata.generateName`` when the name is not set yet; the
  namespace ``default`` when not set), checked as the API server checks them: the name (or
  generateName prefix) a DNS-1123 subdomain of at most 253 characters, the namespace a
  DNS-1123 label of at most 63;
* ``requests``: read by :func:`iro_fed.k8s.snapshot.pod_requests`, the reader the scheduler,
  extender and webhook use: summed over ``spec.containers``, then the max with each init
  container (the effective request kube-scheduler uses; sidecars, i.e. init containers with
  ``restartPolicy: Always``, run next to the app) plus ``overhead``, for every resource of the
  problem (0 when not asked for; ``pods`` is 1) and ``nvidia.com/gpu``; a container without
  requests but with limits requests its limits (as the API server defaults it); quantities
  parsed exactly by :mod:`iro_fed.k8s.quantity` (``500m``, ``1.5``, ``512Mi``, ``1G``, ``1e3``)
  in the model's units: CPU in millicores (rounded up as Kubernetes does), ``memory``,
  ``ephemeral-storage`` and hugepages in MiB, extended resources (``vendor/name``) as whole counts;
* GPUs as :func:`iro_fed.k8s.snapshot.pod_demand` reads them for the scheduler: ``nvidia.com/gpu``
  whole cards, or the annotation ``iro-fed.io/gpu-milli`` (a share of one card, with or without
  ``nvidia.com/gpu: 1``); ``iro-fed.io/gpu-models`` (comma list);
* ``nodeSelector``, ``tolerations``, ``priority``; annotations ``iro-fed.io/class``,
  ``iro-fed.io/user-region``, ``iro-fed.io/max-latency-ms``, ``iro-fed.io/allowed-domains``.
  Annotation values are strings (as the API validates them); an empty one reads as absent, as
  the scheduler reads it.

Errors raise :class:`BadRequest` with the field path (``pod.spec.containers[0].resources.requests.cpu``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from iro_fed.problem_io import DNS_LABEL, DNS_SUBDOMAIN

GPU_RESOURCE = "nvidia.com/gpu"
ANNOTATION_PREFIX = "iro-fed.io/"


class BadRequest(ValueError):
    """A request body that cannot be read; ``field`` is the path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


def _check_name(field: str, value: str, pattern: re.Pattern[str], max_len: int, shown: str | None = None) -> str:
    """``value`` if it is a valid object name by ``pattern`` and at most ``max_len`` characters,
    else :class:`BadRequest` naming ``field`` (``shown``: the value to quote, if not ``value``).
    Pods are DNS-1123 subdomains (ValidatePodName), namespaces DNS-1123 labels
    (ValidateNamespaceName); a "/" in a name would make "ns/name" ambiguous."""
    kind = "RFC 1123 label" if pattern is DNS_LABEL else "RFC 1123 subdomain"
    if len(value) > max_len:
        raise BadRequest(field, f"must be no more than {max_len} characters, got {len(value)}")
    if not pattern.fullmatch(value):
        allowed = "'-'" if pattern is DNS_LABEL else "'-' or '.'"
        raise BadRequest(field, f"a lowercase {kind} must consist of lower case alphanumeric characters, {allowed}, "
                                f"and must start and end with an alphanumeric character, got {value if shown is None else shown!r}")
    return value


def is_pod(doc: Mapping[str, Any]) -> bool:
    spec = doc.get("spec")
    return doc.get("kind") == "Pod" or (isinstance(spec, Mapping) and "containers" in spec)


def _mapping(obj: Any, field: str, required: bool = False) -> Mapping[str, Any]:
    if obj is None:
        if required:
            raise BadRequest(field, "required field is missing")
        return {}
    if not isinstance(obj, Mapping):
        raise BadRequest(field, f"expected an object, got {type(obj).__name__}")
    return obj


def _list(obj: Any, field: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise BadRequest(field, f"expected a list, got {type(obj).__name__}")
    return obj


def pod_to_workload(pod: Mapping[str, Any], resources: tuple[str, ...]) -> dict[str, Any]:
    """A Kubernetes Pod JSON as a workload object of the problem file (see the module doc)."""
    meta = _mapping(pod.get("metadata"), "pod.metadata")
    spec = _mapping(pod.get("spec"), "pod.spec", required=True)
    for key in ("name", "generateName", "namespace"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise BadRequest(f"pod.metadata.{key}", f"expected a string, got {type(meta[key]).__name__}")
    if meta.get("name"):
        name = _check_name("pod.metadata.name", meta["name"], DNS_SUBDOMAIN, 253)
    elif meta.get("generateName"):
        # A prefix: the API server validates it with a trailing '-' allowed (maskTrailingDash).
        prefix = meta["generateName"]
        masked = prefix[:-1] + "a" if prefix.endswith("-") else prefix
        _check_name("pod.metadata.generateName", masked, DNS_SUBDOMAIN, 253, shown=prefix)
        name = prefix
    else:
        raise BadRequest("pod.metadata.name", "required: a name (or generateName)")
    ns = meta.get("namespace") or "default"
    _check_name("pod.metadata.namespace", ns, DNS_LABEL, 63)
    annotations = _mapping(meta.get("annotations"), "pod.metadata.annotations")

    from iro_fed.k8s.snapshot import PodSpecError, pod_demand

    if not _list(spec.get("containers"), "pod.spec.containers"):
        raise BadRequest("pod.spec.containers", "a pod needs at least one container")
    try:
        # The snapshot's reader: the same formula, units, GPU share and errors as the scheduler and
        # extender (it also refuses annotation values that are not strings, as the API does).
        demand = pod_demand(pod, resources)
    except PodSpecError as exc:
        raise BadRequest(f"pod.{exc.field}" if exc.field else "pod", exc.reason) from None

    wl: dict[str, Any] = {
        "name": f"{ns}/{name}",
        "requests": {r: demand.requests[r] for r in resources},
    }
    if demand.gpu_count:
        gpu: dict[str, Any] = {"count": demand.gpu_count, "milli": demand.gpu_milli}
        models = annotations.get(ANNOTATION_PREFIX + "gpu-models")
        if models:
            gpu["models"] = [m.strip() for m in models.split(",") if m.strip()]
        wl["gpu"] = gpu
    selector = spec.get("nodeSelector")
    if selector is not None:
        wl["node_selector"] = selector
    tols = []
    for j, t in enumerate(_list(spec.get("tolerations"), "pod.spec.tolerations")):
        t = _mapping(t, f"pod.spec.tolerations[{j}]")
        tol = {k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k) is not None}
        tols.append(tol)
    if tols:
        wl["tolerations"] = tols
    if spec.get("priority") is not None:
        wl["priority"] = spec["priority"]
    for ann, key, conv in (
        ("class", "class", str),
        ("user-region", "user_region", str),
        ("max-latency-ms", "max_latency_ms", float),
    ):
        value = annotations.get(ANNOTATION_PREFIX + ann)
        if not value:  # absent or empty, as the scheduler reads it
            continue
        try:
            wl[key] = conv(value)
        except (TypeError, ValueError):
            raise BadRequest(f"pod.metadata.annotations.{ANNOTATION_PREFIX}{ann}", f"cannot read {value!r}") from None
    allowed = annotations.get(ANNOTATION_PREFIX + "allowed-domains")
    if allowed:
        wl["allowed_domains"] = [d.strip() for d in allowed.split(",") if d.strip()]
    return wl


def request_to_workload(body: Any, resources: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """The workload object of a request body and its kind (``workload`` or ``pod``).

    Accepts the workload object itself, a Pod, or ``{"workload": {...}}`` / ``{"pod": {...}}``
    (the wrapper may also carry ``k``, read by the caller, and nothing else: another field, or
    both ``pod`` and ``workload``, is a :class:`BadRequest` naming it).
    """
    if not isinstance(body, Mapping):
        raise BadRequest("body", f"expected a JSON object, got {type(body).__name__}")
    if "pod" in body or "workload" in body:
        # The wrapper's fields are its own: one not known (a typo of k) or both objects would be
        # ignored silently otherwise (the pod won over the workload).
        if "pod" in body and "workload" in body:
            raise BadRequest("workload", "give either pod or workload, not both")
        unknown = [str(key) for key in body if key not in ("pod", "workload", "k")]
        if unknown:
            raise BadRequest(unknown[0], "unknown field of the request (known: pod or workload, and k)")
    if "pod" in body:
        pod = _mapping(body["pod"], "pod", required=True)
        return pod_to_workload(pod, resources), "pod"
    if "workload" in body:
        return dict(_mapping(body["workload"], "workload", required=True)), "workload"
    if is_pod(body):
        return pod_to_workload(body, resources), "pod"
    wl = {k: v for k, v in body.items() if k != "k"}
    return wl, "workload"


#: Pod scheduling constraints that /recommend does not evaluate (a reply warns about them).
_NOT_EVALUATED = (
    (("affinity", "nodeAffinity"), "spec.affinity.nodeAffinity (node affinity terms are not evaluated; nodeSelector is)"),
    (("affinity", "podAffinity"), "spec.affinity.podAffinity (inter-pod affinity is not evaluated)"),
    (("affinity", "podAntiAffinity"), "spec.affinity.podAntiAffinity (inter-pod anti-affinity is not evaluated)"),
    (("topologySpreadConstraints",), "spec.topologySpreadConstraints (not evaluated)"),
)


def pod_warnings(body: Any) -> list[str]:
    """What a Pod in ``body`` asks for that the ranking does not take into account."""
    if not isinstance(body, Mapping):
        return []
    pod = body.get("pod") if isinstance(body.get("pod"), Mapping) else (body if is_pod(body) else None)
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    out = []
    for path, message in _NOT_EVALUATED:
        node: Any = spec
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node:
            out.append(message)
    return out
