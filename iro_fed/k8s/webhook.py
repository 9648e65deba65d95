"""Mutating admission webhook (``admission.k8s.io/v1`` ``AdmissionReview``), HTTPS only.

For a pod CREATE that is selected (its labels match ``selector``, or its namespace is in
``namespaces``; with neither set every pod is), the webhook either

* ``mode="scheduler-name"``: sets ``spec.schedulerName`` to IRO's scheduler (unless the pod chose
  a scheduler other than ``default-scheduler``: left unchanged, with a warning), or
* ``mode="affinity"``: adds one *preferred* node-affinity term per recommended node (the top-K
  of the configured solver's ranking on the current cluster, weight 100 for the best, down to 1
  by the normalized score), so kube-scheduler keeps the final say; a node the pod already
  prefers by the same ``matchFields`` term is not added twice (reinvocation is idempotent).

The patch only adds under ``/spec`` (parents created as needed, the pod's own terms kept), so no
path is built from label or annotation keys. The webhook has no side effects (``sideEffects:
None``): a ``dryRun`` review gets the same answer.

Only a core (``""`` group) ``Pod`` is changed. The certificate and key files are loaded again
for new connections when they change (a renewed Secret). The bytes of request bodies read, parsed
and answered at once are bounded (``MAX_PARSE_BYTES``, counted as they arrive, a body still being
sent included), and so is what their parses are reckoned to take (``MAX_PARSE_MEMORY``); past
either a request waits up to ``budget_wait_s`` (1 s), then gets 503 with ``Retry-After: 1``, so
memory does not grow with the number of connections; such a pod is admitted unchanged
(``failurePolicy: Ignore``), and counted (``stats["budget_refused"]``; Prometheus:
:class:`WebhookCollector`'s ``iro_webhook_budget_refused_total``).

The reply is HTTP 200 with an ``AdmissionReview`` of the same version, ``response.uid`` equal to
the request's, ``allowed: true`` and, when something changes, ``patchType: JSONPatch`` with the
base64 RFC 6902 patch. The webhook always answers within ``budget_s`` (keep it below the
configuration's ``timeoutSeconds``): a recommendation that is late, or any internal error,
admits the pod unchanged with a ``warnings`` entry (``failurePolicy: Ignore`` covers the webhook
being down). A request that is not an ``AdmissionReview`` gets HTTP 400 naming the field; a
review whose pod cannot be read is admitted unchanged (as ``failurePolicy: Ignore`` would) with
the field named in ``warnings`` and ``status``.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import logging
import os
import re
import ssl
import threading
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np

from iro_fed.k8s.httpjson import (
    AnyFamily,
    ByteBudget,
    ConnectionLimit,
    HttpError,
    RequestStats,
    RoutedJsonHandler,
    host_port,
    positive_seconds,
    serve_in_thread,
)
from iro_fed.k8s.snapshot import ClusterConfig, metadata_error
from iro_fed.model import ClusterState
from iro_fed.problem_io import DNS_SUBDOMAIN as _DNS_SUBDOMAIN
from iro_fed.problem_io import json_kind

log = logging.getLogger("iro_fed.k8s.webhook")
MODES = ("scheduler-name", "affinity")
#: An AdmissionReview of a pod is well under this (the API server takes 3 MiB a request, etcd stores
#: 1.5 MiB an object). A parsed body takes up to ~30 times its size ("[{},{},...]": 440 MB for
#: 16 MiB, past the deployment's 512 MiB limit from one request of any pod that reaches the Service).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: The bytes of bodies read, parsed and answered at once (:class:`~iro_fed.k8s.httpjson.ByteBudget`),
#: charged as they are read: about 250 MB of parsed JSON at worst, however many connections send
#: (without it, 256 connections could each hold an 8 MiB body being sent).
MAX_PARSE_BYTES = 8 * 1024 * 1024
#: What one body may take once parsed, reckoned before parsing
#: (:func:`~iro_fed.k8s.httpjson.parse_estimate`, else 413): a 3 MiB pod with a value every 10
#: bytes is reckoned at about 40 MiB; 8 MiB of ``[{},...]`` (~200 MB once parsed) is refused.
MAX_PARSE_MEMORY = 64 * 1024 * 1024
#: How long the API server waits for the webhook: the configuration's ``timeoutSeconds`` (5 in
#: deploy/base/webhook.yaml; 1..30, 10 by default), the whole call, the review sent and the answer
#: read included. The server's body and header deadlines (:class:`WebhookServer`) are this.
#: tests/k8s/test_v3_caller_deadline.py checks that deploy/ says the same.
TIMEOUT_SECONDS = 5.0


class BadReview(ValueError):
    """Not an AdmissionReview: HTTP 400; ``field`` is the JSON path at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BadPod(ValueError):
    """A well-formed review whose pod the webhook cannot read: admitted (failurePolicy: Ignore), with why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _check_envelope(doc: Any) -> Mapping[str, Any]:
    """The AdmissionReview's request, or :class:`BadReview` naming the field (the body is not a review)."""
    if not isinstance(doc, dict):
        raise BadReview(f"body: expected an AdmissionReview object, got {json_kind(doc)}", "body")
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(f"kind: expected AdmissionReview, got {doc.get('kind')!r}", "kind")
    if doc.get("apiVersion") != "admission.k8s.io/v1":
        raise BadReview(f"apiVersion: expected admission.k8s.io/v1, got {doc.get('apiVersion')!r}", "apiVersion")
    request = doc.get("request")
    if request is None:
        raise BadReview("request: required (an AdmissionRequest object)", "request")
    if not isinstance(request, dict):
        raise BadReview(f"request: expected an AdmissionRequest object, got {json_kind(request)}", "request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        got = "nothing" if uid is None else '""' if uid == "" else json_kind(uid)
        raise BadReview(f"request.uid: required, a non-empty string, got {got}", "request.uid")
    for k in ("kind", "resource"):  # GroupVersionKind / GroupVersionResource
        v = request.get(k)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise BadReview(f"request.{k}: expected an object, got {json_kind(v)}", f"request.{k}")
        for f in ("group", "version", k):
            if v.get(f) is not None and not isinstance(v[f], str):
                raise BadReview(f"request.{k}.{f}: expected a string, got {json_kind(v[f])}", f"request.{k}.{f}")
    for k in ("operation", "namespace", "subResource", "name"):
        if request.get(k) is not None and not isinstance(request[k], str):
            raise BadReview(f"request.{k}: expected a string, got {json_kind(request[k])}", f"request.{k}")
    return request


def _check_pod(pod: Any, mode: str) -> Mapping[str, Any]:
    """The fields of ``request.object`` this webhook reads have their v1.Pod types, or :class:`BadPod`."""
    where = "request.object"
    if not isinstance(pod, dict):
        raise BadPod(where, f"expected a v1.Pod object, got {json_kind(pod)}")
    meta = pod.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            raise BadPod(f"{where}.metadata", f"expected an object, got {json_kind(meta)}")
        err = metadata_error(meta, ("name", "generateName", "namespace"))
        if err:
            raise BadPod(f"{where}.metadata.{err[0]}", err[1])
    spec = pod.get("spec")
    if not isinstance(spec, dict):  # the patches add under /spec: without it they would not apply
        raise BadPod(f"{where}.spec", f"expected an object, got {json_kind(spec)}")
    if spec.get("schedulerName") is not None and not isinstance(spec["schedulerName"], str):
        raise BadPod(f"{where}.spec.schedulerName", f"expected a string, got {json_kind(spec['schedulerName'])}")
    if mode == "affinity":
        node = spec
        for k in ("affinity", "nodeAffinity"):
            node = node.get(k)
            if node is None:
                break
            if not isinstance(node, dict):
                path = "affinity" if k == "affinity" else "affinity.nodeAffinity"
                raise BadPod(f"{where}.spec.{path}", f"expected an object, got {json_kind(node)}")
        else:
            pref = node.get("preferredDuringSchedulingIgnoredDuringExecution")
            if pref is not None and not isinstance(pref, list):
                raise BadPod(f"{where}.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                             f"expected an array, got {json_kind(pref)}")
    return pod


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _label_key_error(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain (lower case, at most 253 characters)"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (f"label key {key!r}: the name must be 1-63 characters of [A-Za-z0-9-_.], "
                "starting and ending with a letter or digit")
    return None


def parse_selector(text: str | None) -> dict[str, str]:
    """``a=b,c==d`` -> {"a": "b", "c": "d"}: an equality-based label selector (a matchLabels).

    ``k=v`` and ``k==v`` mean the same, as in kubectl; ``!=``, ``in``/``notin`` and bare keys
    (existence) are refused rather than read as a key or value with ``=``/``!`` in it, which
    would never match; keys and values must be valid label keys and values. An empty term
    (``app=x,``, ``a=1,,b=2``, ``,a=1``) is refused, as kubectl refuses it ("found '',
    expected: identifier after ','"): dropping it hid a term lost in an edit. An empty or blank
    ``text`` is no selector, as in kubectl.
    """
    out: dict[str, str] = {}
    if text is None or not text.strip():
        return out
    parts = [p.strip() for p in text.split(",")]
    for i, part in enumerate(parts, start=1):
        if not part:
            raise ValueError(f"empty term at position {i} of {len(parts)} in {text!r}: each ',' must "
                             "separate two key=value terms")
        if "!=" in part:
            raise ValueError(f"{part!r}: only equality (key=value) is supported, not !=")
        key, sep, value = part.partition("=")
        if value.startswith("="):
            value = value[1:]  # k==v
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"expected key=value, got {part!r} (set-based and existence selectors are not supported)")
        err = _label_key_error(key)
        if err:
            raise ValueError(err)
        if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
            raise ValueError(f"label value {value!r} of {key!r}: at most 63 characters of [A-Za-z0-9-_.], "
                             "starting and ending with a letter or digit")
        if key in out and out[key] != value:
            raise ValueError(f"label key {key!r} is given twice with different values ({out[key]!r}, {value!r}): no pod would match")
        out[key] = value
    return out


def _node_of_term(term: Any) -> str | None:
    """The node of a preferred term that is exactly ``matchFields metadata.name In [node]`` (ours), else None."""
    if not isinstance(term, dict) or not isinstance(term.get("preference"), dict):
        return None
    pref = term["preference"]
    fields = pref.get("matchFields")
    if pref.get("matchExpressions") or not isinstance(fields, list) or len(fields) != 1 or not isinstance(fields[0], dict):
        return None
    f = fields[0]
    values = f.get("values")
    if f.get("key") != "metadata.name" or f.get("operator") != "In" or not isinstance(values, list) or len(values) != 1:
        return None
    return values[0] if isinstance(values[0], str) else None


#: What spec.schedulerName says when the pod did not choose a scheduler (the API server's default).
DEFAULT_SCHEDULER = "default-scheduler"

#: The webhook's counters (``stats``, on ``/healthz``), each also the Prometheus counter
#: ``iro_webhook_<key>_total`` of :class:`WebhookCollector`, with its help text.
STAT_HELP = {
    "reviews": "AdmissionReviews answered (mutated, skipped, or with a warning)",
    "mutated": "Reviews answered with a patch",
    "skipped": "Reviews answered without a patch (the pod admitted unchanged)",
    "warnings": "Reviews answered with a warning (no recommendation in time, an unreadable pod, an error)",
    "bad_requests": "Requests refused for the client's input (4xx but 404 and 405)",
    "errors": "Requests answered with a 5xx (the budget refusals included)",
    "budget_refused": "Reviews answered 503 because the body or parse budget had no room within budget_wait_s; "
                      "the API server admits such a pod unchanged (failurePolicy: Ignore)",
}


class Webhook(RequestStats):
    """The admission logic, independent of HTTP."""

    def __init__(self, mode: str = "scheduler-name", scheduler_name: str = "iro", selector: Mapping[str, str] | None = None,
                 namespaces: list[str] | None = None, cache: Any = None, solver: str = "greedy-objective",
                 solver_params: dict[str, Any] | None = None, top_k: int = 3, budget_s: float = 2.0,
                 config: ClusterConfig | None = None) -> None:
        import solvers

        if mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        if top_k < 1:
            raise ValueError(f"top_k: must be >= 1, got {top_k}")
        if budget_s <= 0:
            raise ValueError(f"budget_s: must be > 0, got {budget_s}")
        self.mode = mode
        self.scheduler_name = scheduler_name
        self.selector = dict(selector or {})
        self.namespaces = set(namespaces or [])
        self.cache = cache
        self.solver = solvers.make(solver, **(solver_params or {})) if mode == "affinity" else None
        self.solver_name = solver
        # Pod scoring (it walks the bound pods) only for a solver that reads it: kube-default.
        self._scoring = solvers.reads_pod_scoring(self.solver)
        if cache is not None and self._scoring:
            cache.scoring = True  # each model's pod-scoring counts built with it, not in the first review after it
        self.top_k = top_k
        self.budget_s = budget_s
        self.config = config or ClusterConfig()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="iro-webhook")
        self._solver_lock = threading.Lock()
        # budget_refused: the reviews answered 503 because the body or parse budget had no room in
        # time (a burst of large pods); the API server then admits each unchanged (failurePolicy Ignore).
        super().__init__(*STAT_HELP)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- selection and patches ---------------------------------------------------------------

    def selected(self, pod: Mapping[str, Any], namespace: str) -> bool:
        if not self.selector and not self.namespaces:
            return True
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if self.selector and all(labels.get(k) == v for k, v in self.selector.items()):
            return True
        return namespace in self.namespaces

    def scheduler_patch(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        if (pod.get("spec") or {}).get("schedulerName") == self.scheduler_name:
            return []
        return [{"op": "add", "path": "/spec/schedulerName", "value": self.scheduler_name}]

    def recommend(self, pod: Mapping[str, Any], namespace: str) -> list[tuple[str, float]]:
        """Top-K (node, normalized score in [0, 1]) for the pod on the current cluster."""
        from solvers import OnlineSolver

        if self.cache is None:
            raise RuntimeError("affinity mode needs a cluster view: start the webhook with --kubeconfig")
        if not self.cache.synced:
            raise RuntimeError("the webhook's cluster cache has not synced yet")
        # Only the metadata is changed (a namespace and name for the model; the snapshot reads the
        # rest): a shallow copy of the pod and its metadata. A deep copy of the whole request object
        # (unknown fields included) ran here in the pool, outside the parse budget and past budget_s.
        pod = dict(pod)
        meta = pod["metadata"] = dict(pod.get("metadata") or {})
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            meta["name"] = (meta.get("generateName") or "pod-") + "(new)"
        # for_pods: the resources the pod requests beyond the config, and pod slots, bound fit (build_snapshot's rule)
        snap = self.cache.model().for_pods([pod]).with_pods([pod], scoring=self._scoring)
        state = ClusterState(snap.problem)
        with self._solver_lock:
            if isinstance(self.solver, OnlineSolver):
                ranked = self.solver.rank(state, 0, k=self.top_k)
            else:
                placement = self.solver.solve(snap.problem)
                n = int(placement.assignment[0])
                ranked = [(n, 1.0)] if n >= 0 else []
        if not ranked:
            return []
        scores = np.array([s for _, s in ranked], dtype=np.float64)
        lo, hi = float(scores.min()), float(scores.max())
        norm = np.ones_like(scores) if hi - lo <= 1e-12 else (scores - lo) / (hi - lo)
        return [(snap.problem.nodes[n].name, float(v)) for (n, _), v in zip(ranked, norm, strict=True)]

    def affinity_patch(self, pod: Mapping[str, Any], recommended: list[tuple[str, float]]) -> list[dict[str, Any]]:
        terms = [{"weight": max(1, int(round(1 + 99 * score))),
                  "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}}
                 for node, score in recommended]
        spec = pod.get("spec") or {}
        # A node the pod already prefers by the same term (a reinvocation after another webhook
        # changed the pod, or a pod spec copied from one we mutated) is not added again: a second
        # term would double that node's weight.
        existing = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []
        have = {_node_of_term(t) for t in existing} - {None}
        terms = [t for t in terms if t["preference"]["matchFields"][0]["values"][0] not in have]
        if not terms:
            return []
        affinity = spec.get("affinity")
        if not affinity:
            return [{"op": "add", "path": "/spec/affinity",
                     "value": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}}]
        node_aff = affinity.get("nodeAffinity")
        if not node_aff:
            return [{"op": "add", "path": "/spec/affinity/nodeAffinity",
                     "value": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}]
        if not node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"):
            return [{"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
                     "value": terms}]
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-",
                 "value": t} for t in terms]

    # --- review --------------------------------------------------------------------------------

    def review(self, doc: Any) -> dict[str, Any]:
        """The AdmissionReview reply for a request document (raises :class:`BadReview`).

        A body that is not an AdmissionReview (its envelope: kind, apiVersion, request, uid and
        the request's own fields) is a :class:`BadReview` (HTTP 400): there is no uid to answer.
        A review whose pod cannot be read gets a review back: allowed, as the deployment's
        ``failurePolicy: Ignore`` would for a webhook that is down, with the field named in a
        warning (what kubectl shows) and in ``status``.
        """
        request = _check_envelope(doc)
        self.count("reviews")
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        reply = {"apiVersion": doc["apiVersion"], "kind": "AdmissionReview", "response": response}
        try:
            patch, warnings = self._decide(request)
        except BadPod as exc:
            patch, warnings = [], [f"iro-fed webhook: {exc}; pod admitted unchanged"]
            response["status"] = {"code": 400, "reason": "BadRequest", "message": str(exc)}
        except Exception as exc:  # admit unchanged, say why
            log.exception("admission of %s failed", request.get("uid"))
            patch, warnings = [], [f"iro-fed webhook: internal error ({type(exc).__name__}: {exc}); pod admitted unchanged"]
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
            self.count("mutated")
        else:
            self.count("skipped")
        if warnings:
            response["warnings"] = warnings
            self.count("warnings")
        return reply

    def _decide(self, request: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        gvk = request.get("kind") or {}
        # A core v1 Pod only: a custom resource of kind "Pod" in another group (a configuration
        # with apiGroups ["*"]) has no spec.schedulerName or node affinity to set.
        if gvk.get("kind") != "Pod" or gvk.get("group") or request.get("operation") != "CREATE" \
                or request.get("subResource"):
            return [], []
        pod = _check_pod(request.get("object"), self.mode)
        namespace = request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "default"
        if not self.selected(pod, namespace):
            return [], []
        if self.mode == "scheduler-name":
            chosen = (pod.get("spec") or {}).get("schedulerName")
            if chosen and chosen not in (DEFAULT_SCHEDULER, self.scheduler_name):
                # The pod chose another scheduler (gang scheduling, a batch system...): taking it
                # over would break what that scheduler provides.
                return [], [f"iro-fed webhook: the pod asks for scheduler {chosen!r}; schedulerName left unchanged"]
            return self.scheduler_patch(pod), []
        future = self._pool.submit(self.recommend, pod, namespace)
        try:
            recommended = future.result(timeout=self.budget_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return [], [f"iro-fed webhook: no node recommendation within {self.budget_s:g} s; pod admitted unchanged"]
        except Exception as exc:
            return [], [f"iro-fed webhook: no node recommendation ({type(exc).__name__}: {exc}); pod admitted unchanged"]
        if not recommended:
            return [], ["iro-fed webhook: no node can run this pod now; pod admitted unchanged"]
        return self.affinity_patch(pod, recommended), []


class WebhookCollector:
    """The webhook's ``stats`` as Prometheus counters, read at each scrape (as the scheduler's
    ``QueueCollector``): ``iro_webhook_<key>_total`` for each key of :data:`STAT_HELP`, among them
    ``iro_webhook_budget_refused_total``, the pods admitted unchanged because the webhook had no
    room to parse their review. Register it in a ``prometheus_client`` ``CollectorRegistry``."""

    PREFIX = "iro_webhook_"

    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook

    def describe(self) -> list[Any]:
        return list(self._families(dict.fromkeys(STAT_HELP, 0)))

    def collect(self) -> list[Any]:
        return list(self._families(self.webhook.stats_snapshot()))

    def _families(self, stats: Mapping[str, int]) -> Any:
        from prometheus_client.core import CounterMetricFamily

        for key, text in STAT_HELP.items():
            yield CounterMetricFamily(self.PREFIX + key, text + ".", value=stats.get(key, 0))


def _tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # No password: OpenSSL would otherwise ask for an encrypted key's pass phrase on the terminal,
    # and a server started from one would hang at start-up (a renewal, on its reload).
    ctx.load_cert_chain(cert_file, key_file, password=_no_password)
    return ctx


def _no_password() -> bytes:
    return b""


class WebhookServer(ConnectionLimit, AnyFamily, ThreadingHTTPServer):
    """HTTPS server for a :class:`Webhook` (``POST /mutate``, ``GET /healthz``); at most
    ``max_connections`` open at once (more are closed at once, see :meth:`refuse_connection`)."""

    daemon_threads = True
    allow_reuse_address = True
    max_body_bytes = MAX_BODY_BYTES  # the API server caps an object at about 3 MiB
    max_parse_bytes = MAX_PARSE_BYTES
    max_parse_memory = MAX_PARSE_MEMORY
    max_parse_total: int | None = None  # what all requests parse at once (None: max_parse_memory)
    #: How long a body waits for room in the body or parse budget before its 503. The API server
    #: gives up on the call after timeoutSeconds (5 s in deploy/), and a review that waited (for
    #: body and parse room, 1 s in all) still has its parse and up to budget_s (2 s in deploy/) to
    #: go: 3 s and the parse. Waiting longer answers no one, while the body
    #: keeps its bytes of the budget and the bodies behind it wait too (until the body deadline,
    #: which was 10 s). A 503 admits the pod unchanged (failurePolicy: Ignore) as that
    #: timeout would, at once. Two 3 MiB pods with a value every 10 bytes (~40 MiB reckoned each,
    #: 64 MiB of parse budget) are parsed one after the other: the second waits out the first.
    budget_wait_s: float | None = 1.0
    #: The whole body must arrive within this of its start (else 408 and close), and each
    #: request's line and headers within this of its first byte: the API server's timeoutSeconds
    #: (:data:`TIMEOUT_SECONDS`; the constructor's ``timeout_seconds``), after which it has given up
    #: on the call, so a stalled sender held its connection and its body's share for nothing (it was 10 s).
    body_timeout_s = TIMEOUT_SECONDS
    header_timeout_s = TIMEOUT_SECONDS
    max_connections = 256  # one thread each

    def __init__(self, webhook: Webhook, cert_file: str, key_file: str, host: str = "0.0.0.0", port: int = 8443,
                 timeout_seconds: float | None = None) -> None:
        """``timeout_seconds``: the webhook configuration's timeoutSeconds, when not
        :data:`TIMEOUT_SECONDS`; the body and header deadlines are set to it."""
        if timeout_seconds is not None:
            self.body_timeout_s = self.header_timeout_s = positive_seconds("timeout_seconds", timeout_seconds)
        self.webhook = webhook
        self.body_budget = ByteBudget(self.max_parse_bytes)
        # Made with the server, so it exists (and can be read) before any request arrives.
        self.parse_budget = ByteBudget(self.max_parse_total or self.max_parse_memory)
        self._tls_files = (cert_file, key_file)
        self._tls_lock = threading.Lock()
        self._tls_stamp = self._tls_files_stamp()
        self._tls_bad_stamp: tuple | None = None
        self.tls_context = _tls_context(cert_file, key_file)
        super().__init__((host, port), _WebhookHandler)
        # The TLS handshake runs in the request's thread (see _WebhookHandler.setup), so a slow
        # or plain-HTTP client never blocks accept().
        self.socket = self.tls_context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def _tls_files_stamp(self) -> tuple:
        return tuple((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) for st in map(os.stat, self._tls_files))

    def current_tls_context(self) -> ssl.SSLContext:
        """The TLS context for a new connection, loaded again when the certificate or key file has
        changed: cert-manager renews the Secret and the kubelet swaps the mounted files, and the
        certificate loaded at start would be served until it expired (every call failing then,
        and failurePolicy: Ignore admitting every pod unchanged). A pair that does not load (a
        key that does not match its certificate) keeps the current context, with a warning."""
        try:
            stamp = self._tls_files_stamp()
        except OSError:
            return self.tls_context
        if stamp == self._tls_stamp or stamp == self._tls_bad_stamp:
            return self.tls_context
        with self._tls_lock:
            if stamp not in (self._tls_stamp, self._tls_bad_stamp):
                try:
                    self.tls_context = _tls_context(*self._tls_files)
                    self._tls_stamp = stamp
                    log.info("TLS certificate %s reloaded", self._tls_files[0])
                except (OSError, ssl.SSLError) as exc:
                    self._tls_bad_stamp = stamp
                    log.warning("TLS certificate %s changed but does not load (%s): still serving the previous one",
                                self._tls_files[0], exc)
        return self.tls_context

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"https://{host_port(host, port)}"

    def serve_in_thread(self) -> threading.Thread:
        return serve_in_thread(self, "iro-webhook")

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)

    def refuse_connection(self, request: Any) -> None:
        """Over the cap: closed without a reply. A reply needs the TLS handshake first, which
        would block the accepting thread or take the thread the cap is there to save; the API
        server treats the failed call as the webhook being down (``failurePolicy``)."""
        log.debug("over max_connections (%d): connection closed", self.max_connections)
        self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self.webhook.close()


class _WebhookHandler(RoutedJsonHandler):
    server: WebhookServer
    error_key = "message"
    timeout = 10  # idle keep-alive, each write, and the TLS handshake

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        self.request.context = self.server.current_tls_context()  # a renewed certificate from the next connection on
        self.request.do_handshake()  # CPython bounds the whole handshake by the timeout, not each read
        super().setup()

    def routes(self) -> dict[str, dict[str, Any]]:
        return {"/mutate": {"POST": self._mutate}, "/": {"POST": self._mutate},
                "/healthz": {"GET": self._health}, "/readyz": {"GET": self._ready}}

    def not_found(self, path: str) -> str:
        return f"unknown path {path} (POST /mutate, GET /healthz, GET /readyz)"

    def on_error(self, code: int) -> None:
        self.server.webhook.count_error(code)  # as the extender counts

    def send_json_error(self, code: int, message: str, field: str | None = None,
                        retry_after_s: float | None = None) -> None:
        if code == 503 and field == "body":  # the body or parse budget had no room in time (read_json)
            self.server.webhook.count("budget_refused")
        super().send_json_error(code, message, field, retry_after_s)

    def _health(self) -> None:
        self._send(200, {"ok": True, "stats": self.server.webhook.stats_snapshot()})

    def _ready(self) -> None:
        """503 until the affinity mode's cluster cache has synced: a replica that is not ready yet
        stays out of the Service, where it admitted every pod without a recommendation."""
        webhook = self.server.webhook
        if webhook.cache is not None and not webhook.cache.synced:
            self._send(503, {"ok": False, "message": "the cluster cache has not synced yet"})
            return
        self._health()

    def _mutate(self) -> None:
        doc = self.read_json()
        try:
            reply = self.server.webhook.review(doc)
        except BadReview as exc:
            raise HttpError(400, str(exc), exc.field) from None
        self._send(200, reply)
