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

Unknown fields are refused, as the API server refuses them with strict field validation
(``kubectl``'s default): in the Pod, its ``metadata``, ``spec``, each container and init container,
their ``resources`` and the pod-level ``spec.resources``, and each toleration (the fields of
Kubernetes 1.37's v1 objects, :data:`POD_FIELDS`); a resource name without a ``/`` in a container's
``requests`` / ``limits`` must be a standard one (``cpu``, ``memory``, ``ephemeral-storage``,
``hugepages-*``); pod-level ``spec.resources`` takes ``cpu``, ``memory`` and ``hugepages-*`` only. A workload object's unknown
fields (:func:`iro_fed.problem_io.unknown_fields`) are refused too. Either was read as absent
before: a misspelt ``resources`` ranked the nodes for a pod that asks for nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from iro_fed.problem_io import DNS_LABEL, DNS_SUBDOMAIN, KNOWN_FIELDS, unknown_fields

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


#: The fields of the v1 objects of a Pod that /recommend reads (Kubernetes 1.37, the names of the
#: kubernetes client's ``attribute_map``; tests/edge_agent/test_y1_strict_fields.py compares them).
#: ``status`` is not checked: the kubelet writes it, not a person.
_CONTAINER_FIELDS = frozenset({
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name", "ports",
    "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules", "securityContext",
    "startupProbe", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty",
    "volumeDevices", "volumeMounts", "workingDir"})
_RESOURCES_FIELDS = frozenset({"claims", "limits", "requests"})
POD_FIELDS: dict[str, frozenset[str]] = {
    "Pod": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
    "ObjectMeta": frozenset({
        "annotations", "creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp", "finalizers",
        "generateName", "generation", "labels", "managedFields", "name", "namespace", "ownerReferences",
        "resourceVersion", "selfLink", "uid"}),
    "PodSpec": frozenset({
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy",
        "enableServiceLinks", "ephemeralContainers", "evictionResponders", "hostAliases", "hostIPC", "hostNetwork",
        "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets", "initContainers", "nodeName",
        "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName", "readinessGates",
        "resourceClaims", "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
        "schedulingGroup", "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
        "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
        "topologySpreadConstraints", "volumes"}),
    "Container": _CONTAINER_FIELDS,
    "ResourceRequirements": _RESOURCES_FIELDS,
    "Toleration": frozenset({"effect", "key", "operator", "tolerationSeconds", "value"}),
}
#: Resource names the API server takes besides hugepages-<size>: in a container (with any
#: extended resource, a name with a '/': ``IsStandardContainerResourceName``) and at the pod
#: level (``IsSupportedPodLevelResource``).
_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_POD_LEVEL_RESOURCES = ("cpu", "memory")


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` with the nearest of ``choices`` when one is close, else ``""``."""
    near = difflib.get_close_matches(name, choices, n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def _unknown(field: str, key: str, known: frozenset[str], what: str) -> tuple[str, str]:
    """(path, message) of an unknown field, with the nearest known name when one is close."""
    return f"{field}.{key}", f"unknown field (not a field of {what}){did_you_mean(key, sorted(known))}"


def _resource_names(obj: Any, field: str, allowed: tuple[str, ...], extended: bool) -> list[tuple[str, str]]:
    """A ``requests`` / ``limits`` object's names the API server refuses (``cpus``): read as not
    asked for, they were a silent zero. ``extended``: names with a '/' are taken (containers)."""
    if not isinstance(obj, Mapping):
        return []
    out = []
    for name in obj:
        name = str(name)
        if name in allowed or name.startswith("hugepages-") or (extended and "/" in name):
            continue
        hint = did_you_mean(name, allowed)
        kinds = ", ".join((*allowed, "hugepages-<size>")) + (", or an extended resource with a '/'" if extended else "")
        where = "containers" if extended else "the pod level"
        out.append((f"{field}.{name}", f"must be a standard resource for {where} ({kinds}){hint}"))
    return out


def _resource_values(obj: Any, field: str, read: Sequence[str]) -> list[tuple[str, str]]:
    """A ``requests`` / ``limits`` object's quantities that the API server refuses (not a quantity,
    or negative), of the names the reader does not read (``read``: it names its own errors): a
    request of ``example.com/foo: "-1"`` was taken, while the webhook refused it."""
    from iro_fed.k8s.quantity import QuantityError, parse_quantity

    if not isinstance(obj, Mapping):
        return []
    out = []
    for name, value in obj.items():
        if str(name) in read:
            continue
        path = f"{field}.{name}"
        try:
            q = parse_quantity(value)
        except QuantityError as exc:
            out.append((path, str(exc)))
            continue
        if q < 0:
            out.append((path, f"invalid quantity {value!r}: must not be negative"))
        elif "/" in str(name) and not str(name).startswith("kubernetes.io/") and q != q.to_integral_value():
            out.append((path, f"invalid quantity {value!r}: an extended resource must be a whole number"))
    return out


def pod_field_errors(pod: Mapping[str, Any], field: str = "pod", read: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(path, message) of each field of ``pod`` that the API server would refuse as unknown, in the
    parts /recommend reads (see the module doc), of each non-standard resource name there, and of
    each bad quantity of a resource the reader does not read (``read``: the names it reads). Values
    of the wrong type are left to the reader, which names them."""
    out: list[tuple[str, str]] = []

    def fields(obj: Any, path: str, kind: str) -> Mapping[str, Any]:
        if not isinstance(obj, Mapping):
            return {}
        known = POD_FIELDS[kind]
        out.extend(_unknown(path, str(k), known, f"a v1 {kind}") for k in obj if k not in known)
        return obj

    def resources(obj: Any, path: str, allowed: tuple[str, ...], extended: bool) -> None:
        res = fields(obj, path, "ResourceRequirements")
        for key in ("requests", "limits"):
            out.extend(_resource_names(res.get(key), f"{path}.{key}", allowed, extended))
            out.extend(_resource_values(res.get(key), f"{path}.{key}", read))

    top = fields(pod, field, "Pod")
    fields(top.get("metadata"), f"{field}.metadata", "ObjectMeta")
    spec = fields(top.get("spec"), f"{field}.spec", "PodSpec")
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for i, c in enumerate(items if isinstance(items, list) else []):
            c = fields(c, f"{field}.spec.{key}[{i}]", "Container")
            resources(c.get("resources"), f"{field}.spec.{key}[{i}].resources", _CONTAINER_RESOURCES, True)
    if spec.get("resources") is not None:
        resources(spec["resources"], f"{field}.spec.resources", _POD_LEVEL_RESOURCES, False)
    tols = spec.get("tolerations")
    for j, t in enumerate(tols if isinstance(tols, list) else []):
        fields(t, f"{field}.spec.tolerations[{j}]", "Toleration")
    return out


#: The objects of a workload that unknown_fields looks into: the workload, its gpu, a toleration,
#: a preferred node affinity term (a key with a dot in it stays in the right object).
_WORKLOAD_PARENT = re.compile(r"\Aworkloads\[0\](\.gpu|\.tolerations\[\d+\]|\.preferred_node_affinity\[\d+\])?\.")


def workload_field_errors(workload: Mapping[str, Any], field: str = "workload") -> list[tuple[str, str]]:
    """(path, message) of each field of a workload object that the problem loader does not know
    (in a file it only notes them, for a format that may gain fields; a request is answered now,
    and a misspelt field was read as absent)."""
    out = []
    for path in unknown_fields({"workloads": [workload]}):
        m = _WORKLOAD_PARENT.match(path)
        if m is None:  # not a path unknown_fields makes
            out.append((path.replace("workloads[0]", field, 1), "unknown field"))
            continue
        sub = m.group(1) or ""
        schema = re.sub(r"\[\d+\]", "[]", sub)  # .tolerations[] (KNOWN_FIELDS' key)
        known = KNOWN_FIELDS.get("workloads[]" + schema, frozenset())
        out.append(_unknown(field + sub, path[m.end():], known, f"workload{schema}" if sub else "a workload"))
    return out


def _refuse(errors: list[tuple[str, str]]) -> None:
    """A :class:`BadRequest` naming the first error's field, the others counted and named."""
    if not errors:
        return
    path, message = errors[0]
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more: {', '.join(p for p, _ in errors[1:])})"
    raise BadRequest(path, message)


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
    _refuse(pod_field_errors(pod, read=(*resources, GPU_RESOURCE)))
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

    from iro_fed.k8s.snapshot import (
        PodSpecError,
        annotation_list,
        annotation_number,
        pod_demand,
        pod_rules,
        score_rules,
        toleration_seconds_error,
    )

    if not _list(spec.get("containers"), "pod.spec.containers"):
        raise BadRequest("pod.spec.containers", "a pod needs at least one container")
    if spec.get("nodeName") is not None and not isinstance(spec["nodeName"], str):
        raise BadRequest("pod.spec.nodeName", f"expected a string, got {type(spec['nodeName']).__name__}")
    try:
        # The snapshot's readers: the same formula, units, GPU share and errors as the scheduler and
        # extender (it also refuses annotation values that are not strings, as the API does), and
        # the same comma lists (an empty entry refused, not dropped).
        demand = pod_demand(pod, resources)
        # What the scheduler reads and this does not (node affinity, pod (anti-)affinity, spread,
        # the scoring terms: a site has no pods to match; the reply warns), checked all the same: a
        # bad operator or a node affinity of 5 was taken (200), which the scheduler refuses.
        unread = {"metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta},
                  "spec": {k: spec[k] for k in ("affinity", "topologySpreadConstraints") if k in spec}}
        pod_rules(unread)  # only these parts: the ones read here keep their own errors, all listed
        score_rules(unread)
        models = annotation_list(annotations, ANNOTATION_PREFIX + "gpu-models")
        allowed = annotation_list(annotations, ANNOTATION_PREFIX + "allowed-domains")
    except PodSpecError as exc:
        raise BadRequest(f"pod.{exc.field}" if exc.field else "pod", exc.reason) from None

    wl: dict[str, Any] = {
        "name": f"{ns}/{name}",
        "requests": {r: demand.requests[r] for r in resources},
    }
    if demand.gpu_count:
        gpu: dict[str, Any] = {"count": demand.gpu_count, "milli": demand.gpu_milli}
        if models:
            gpu["models"] = models
        wl["gpu"] = gpu
    selector = spec.get("nodeSelector")
    if selector is not None:
        wl["node_selector"] = selector
    tols = []
    for j, t in enumerate(_list(spec.get("tolerations"), "pod.spec.tolerations")):
        t = _mapping(t, f"pod.spec.tolerations[{j}]")
        tol = {k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k) is not None}
        bad_seconds = toleration_seconds_error(t)  # the scheduler's rule
        if bad_seconds:
            raise BadRequest(f"pod.spec.tolerations[{j}].tolerationSeconds", bad_seconds)
        tols.append(tol)
    if tols:
        wl["tolerations"] = tols
    if spec.get("priority") is not None:
        wl["priority"] = spec["priority"]
    for ann, key, conv in (
        ("class", "class", str),
        ("user-region", "user_region", str),
        ("max-latency-ms", "max_latency_ms", annotation_number),  # JSON number syntax, as the scheduler reads it
    ):
        value = annotations.get(ANNOTATION_PREFIX + ann)
        if not value or not value.strip():  # absent, empty or blank, as the scheduler reads it (annotation_value)
            continue
        try:
            wl[key] = conv(value.strip())
        except ValueError as exc:  # float() took "1_0" (10), "+5", "nan", "inf"
            raise BadRequest(f"pod.metadata.annotations.{ANNOTATION_PREFIX}{ann}", str(exc)) from None
    if allowed:
        wl["allowed_domains"] = allowed
    return wl


#: The Pod field or annotation that sets each field of the workload made of a Pod
#: (:func:`pod_to_workload`), for naming it in the problem loader's errors; the annotations the
#: scheduler reads too are named by its rule (:func:`iro_fed.k8s.snapshot.annotation_path`).
_ANNOTATIONS = "pod.metadata.annotations." + ANNOTATION_PREFIX
_POD_SOURCES = (
    ("name", "pod.metadata.name"),
    ("requests", "pod.spec.containers[*].resources.requests"),
    ("gpu.milli", _ANNOTATIONS + "gpu-milli"),
    ("gpu", f"pod.spec.containers[*].resources.limits.{GPU_RESOURCE}"),
    ("node_selector", "pod.spec.nodeSelector"),
    ("tolerations", "pod.spec.tolerations"),
    ("priority", "pod.spec.priority"),
)


def pod_error(path: str, msg: str) -> tuple[str, str]:
    """A problem loader's error on the workload made of a Pod, as the Pod's: the field that set
    ``path`` (:func:`pod_source`) and the message, worded for an annotation as the scheduler words it."""
    from iro_fed.k8s.snapshot import annotation_path

    # The scheduler's rule for the annotations it reads: an item of a list annotation by position
    # (``allowed_domains[1]`` -> ``pod.metadata.annotations.iro-fed.io/allowed-domains[1]``).
    named, msg = annotation_path(path, msg)
    if named != path:
        return f"pod.{named}", msg
    return _pod_field(path), msg


def pod_source(path: str) -> str:
    """The Pod field that set the workload field at ``path`` (relative to the workload:
    ``max_latency_ms`` -> ``pod.metadata.annotations.iro-fed.io/max-latency-ms``,
    ``allowed_domains[1]`` -> ``pod.metadata.annotations.iro-fed.io/allowed-domains[1]``,
    ``tolerations[1].operator`` -> ``pod.spec.tolerations[1].operator``)."""
    return pod_error(path, "")[0]


def _pod_field(path: str) -> str:
    """:func:`pod_source` for the fields the scheduler does not read from an annotation. The
    ``gpu-milli`` annotation is named whole (its value is one number)."""
    for field, source in _POD_SOURCES:
        if path == field or path.startswith((field + ".", field + "[")):
            if source.startswith(_ANNOTATIONS) or field == "gpu":  # gpu.count: the whole-card limit
                return source
            return source + path[len(field):]
    return f"pod (as workload).{path}" if path else "pod"


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
        wl = dict(_mapping(body["workload"], "workload", required=True))
        _refuse(workload_field_errors(wl))
        return wl, "workload"
    # A bare Pod or workload may carry the request's k beside its own fields.
    bare = {k: v for k, v in body.items() if k != "k"}
    if is_pod(body):
        return pod_to_workload(bare, resources), "pod"
    _refuse(workload_field_errors(bare))
    return bare, "workload"


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
