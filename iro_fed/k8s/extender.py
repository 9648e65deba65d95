"""kube-scheduler extender: ``POST {prefix}/filter``, ``/prioritize``, ``/bind``, ``/preempt``.

The protocol (``k8s.io/kube-scheduler/extender/v1/types.go``, ``pkg/scheduler/extender.go``): JSON
with the Go field names as keys (no json tags), every reply HTTP 200 unless the request itself is
malformed (then 400 with a message) or cannot be answered yet (503). Keys are matched exactly, as kube-scheduler sends them; one
that differs from a field's name only in case (which Go's decoder would read as that field) is a
400 naming it, never silently ignored.

* filter: ``ExtenderArgs {Pod, Nodes, NodeNames}`` -> ``ExtenderFilterResult {Nodes, NodeNames,
  FailedNodes, FailedAndUnresolvableNodes, Error}`` (an ``Error``, counted in ``errors``, while the
  node cache has not synced; /prioritize answers 503 with ``Retry-After`` then). ``Nodes`` (a NodeList) arrives when the
  extender is configured ``nodeCacheCapable: false`` and is answered with the passing Node
  objects; ``NodeNames`` arrives with ``nodeCacheCapable: true`` and is answered with names
  (never one that was not asked about); the passing Node objects are written as the request's own
  JSON text of them (:func:`spliced_filter_reply`). Each failed node gets kube's reason; a node that fails a
  static constraint (taints, affinity, domain, latency, GPU model or card count) is
  unresolvable (preemption cannot help), a resource shortage is not.
* prioritize: same args -> ``[{"Host": name, "Score": 0..10}]`` (``MaxExtenderPriority``). The
  score mixes the configured solver's ranking (its ``score`` of the candidate nodes, the order
  ``rank`` gives, for online solvers; the node a batch solver picks for the pod) and the objective's marginal change of R
  (:func:`iro_fed.objective.marginal`), each min-max normalized over the feasible candidates.
  If the solver fails, the kube-default ranking is used instead: no error reaches kube.
* bind: ``ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node}`` -> ``{"Error": ""}``; the
  Binding (with the pod's UID as precondition: a wrong UID gets the API server's 409) is created
  once with ``_preload_content=False``, never retried. A node the synced node cache does not
  know gets an ``Error`` and no Binding (the API server would bind to any name). A pod bound here
  (its spec from its latest filter / prioritize request, by UID) counts on its node from its
  Binding until the node cache's model does, as IroScheduler's assumed pods
  (:meth:`Extender._assumed_on`): for resources and GPU cards, and for host ports, topology spread
  and inter-pod (anti-)affinity as the bound pod will (:meth:`Extender._assumed_conflicts`). Else a
  GPU share, an annotation kube's own filters never see, was booked twice, and two pods with one
  hostPort bound back to back both passed on one node, until the watch showed the pod. That narrows double booking to
  kube-scheduler's asynchronous binding cycle, it does not close it: kube-scheduler assumes a pod,
  binds it in a goroutine of its own and goes on to the next pod at once, so a pod filtered
  before the previous pod's /bind arrives can still be offered the same share.
* preempt: ``ExtenderPreemptionArgs {Pod, NodeNameToVictims | NodeNameToMetaVictims}`` ->
  ``ExtenderPreemptionResult {NodeNameToMetaVictims}``: keeps the nodes where the pod passes
  IRO's constraints once the proposed victims are gone (the node's usage recomputed from its
  bound pods minus the victims, GPU cards and kube's NonZeroRequested included:
  :func:`set_node_pods`), with the same victims (an extender may drop nodes; it never invents
  victims here, and kube resolves each UID on that node).

Without a kubeconfig the extender is stateless (NodeList mode): it knows what the Node objects in
the request say (allocatable, labels, taints, the ``iro-fed.io/allocated`` annotation). A node it
cannot read (its annotation, a bad quantity, one past the model's limits, a taint without a key, no
``metadata.name``: asked about as ``Nodes.items[i]``) is refused alone, unresolvable, with the
error naming the field, and scores 0; a value of a type Go's decoder refuses (``status.allocatable``
not an object) is a 400, as any body that is no ExtenderArgs. With one,
it keeps nodes and bound pods from a watch (:class:`~iro_fed.k8s.client.ClusterCache`) and serves
``NodeNames`` requests.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from iro_fed.feasibility import (
    AFTER_FIT_FILTERS,
    EXISTING_ANTI_AFFINITY_FILTER,
    GPU_CARDS_FILTER,
    NODE_PORTS_FILTER,
    POD_ANTI_AFFINITY_FILTER,
    POD_FILTER_PREFIXES,
    SPREAD_FILTER,
    TAINTS_FILTER,
    fit_tolerance,
    insufficient,
    resource_fit,
    static_filter,
    static_reasons,
)
from iro_fed.k8s.httpjson import (
    AnyFamily,
    ArraySpans,
    ByteBudget,
    ConnectionLimit,
    HttpError,
    RequestStats,
    RoutedJsonHandler,
    host_port,
    positive_seconds,
    serve_in_thread,
)
from iro_fed.k8s.snapshot import (
    _FAILURE_PREFIX,
    FAILURE_REASONS,
    TERMINAL_PHASES,
    ClusterConfig,
    ClusterModel,
    PodSpecError,
    Snapshot,
    _nonzero_allocated,
    apply_usage,
    bound_view,
    metadata_error,
    node_cache_key,
    obj_key,
    obj_uid,
    pod_shape_key,
    pods_by_node,
)
from iro_fed.model import GPU_MILLI, NONZERO_RESOURCES, ClusterState
from iro_fed.objective import marginal
from iro_fed.problem_io import json_kind

log = logging.getLogger("iro_fed.k8s.extender")

MAX_EXTENDER_PRIORITY = 10
MAX_BODY_BYTES = 256 * 1024 * 1024
#: The bytes of request bodies read, parsed and answered at once
#: (:class:`~iro_fed.k8s.httpjson.ByteBudget`, charged as they are read): kube-scheduler calls
#: the extender from one scheduling cycle at a time, so its largest NodeList never waits for
#: another, while 256 connections can no longer hold 256 MiB each (64 GiB) at once.
MAX_PARSE_BYTES = MAX_BODY_BYTES
#: What one body may take once parsed, reckoned before parsing
#: (:func:`~iro_fed.k8s.httpjson.parse_estimate`, else 413): a NodeList-mode ExtenderArgs of 5,000
#: kubelet Nodes (50 images each, managedFields: 87 MiB, 2.70 M values) is reckoned at 330 MiB
#: (246 MiB measured) and passes; 256 MiB of ``[{},...]`` (~6 GB once parsed) does not. The
#: deployment's limit is 1 GiB.
MAX_PARSE_MEMORY = 512 * 1024 * 1024
#: How long kube-scheduler waits for an extender call: the extender's ``httpTimeout`` in the
#: KubeSchedulerConfiguration (5s in deploy/base/kube-scheduler-config.yaml, and kube's default,
#: DefaultExtenderTimeout), the http.Client timeout that covers sending the body and reading the
#: answer. The server's body and header deadlines (:class:`ExtenderServer`) are this: past it no one
#: waits for the answer. tests/k8s/test_v3_caller_deadline.py checks that deploy/ says the same.
HTTP_TIMEOUT_S = 5.0
#: NodeList-mode models kept (their node lists as kube-scheduler last sent them).
NODELIST_MODELS = 4
#: Snapshots (one per pod shape) kept per model, each with its ClusterState. They live as long as
#: their model and no longer: a snapshot holds the model's Node objects (the whole parsed NodeList),
#: so 512 snapshots kept apart from the models pinned up to 512 old node lists (2.3 GB at 1,000 nodes).
SNAPSHOTS_PER_MODEL = 64
#: Pods of the latest filter / prioritize / preempt requests kept (by UID) for /bind: the pod it
#: binds is counted on its node from them (:meth:`Extender.bind`). Each is kept as
#: :func:`~iro_fed.k8s.snapshot.bound_view` trims it (a few KB, not the whole object).
RECENT_PODS = 1024
#: How long a pod bound through /bind counts on its node with no evidence either way: the
#: scheduler's ASSUME_TTL_S (a last resort well past the longest silence of a bound-pods watch).
ASSUME_TTL_S = 600.0


class NotReady(PodSpecError):
    """The node cache has not synced yet: no answer can be given (503 with Retry-After, or a filter
    Error; counted as the extender's error, not the request's)."""


@dataclass
class _Assumed:
    """A pod bound through /bind that the model may not count yet (see :meth:`Extender.bind`)."""

    pod: dict[str, Any]  # the pod as bound (nodeName set), the watch's copy once it shows one
    node: str
    uid: str
    since: float  # time.monotonic() when its Binding succeeded
    lists: int  # bound-pods lists started by then: a list started after it holds the pod if it exists
    counted_since: float | None = None  # when a model was first seen counting it


class BadRequest(ValueError):
    """A malformed request: HTTP 400; ``field`` is the JSON path at fault."""

    def __init__(self, field: str, message: str, *, text: str | None = None) -> None:
        super().__init__(text or f"{field}: {message}")
        self.field = field

    @classmethod
    def wrap(cls, exc: ValueError, where: str, inside: bool = True) -> BadRequest:
        """A snapshot's error (its message names the object and the field) as a 400 about ``where``;
        ``inside``: the error's ``field`` is a path inside ``where``."""
        sub = getattr(exc, "field", "") if inside else ""
        return cls(f"{where}.{sub}" if sub else where, "", text=str(exc))


# The fields of the protocol's Go structs (no json tags: the keys are the field names).
_EXTENDER_ARGS = ("Pod", "Nodes", "NodeNames")
_BINDING_ARGS = ("PodName", "PodNamespace", "PodUID", "Node")
_PREEMPTION_ARGS = ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims")
_VICTIMS = ("Pods", "NumPDBViolations")


def _go_fields(obj: Mapping[str, Any], fields: tuple[str, ...], where: str = "") -> None:
    """Refuse a key that is one of ``fields`` in another case (``pod``, ``nodeNames``, ``uid``).
    Go's encoding/json would read it as that field (and, beside the exact key, whichever came
    last); read here by exact name only, it was ignored: a MetaPod ``{"uid": ...}`` became a
    victim with an empty UID. kube-scheduler sends the exact names, so only another client hits this."""
    folded = {f.casefold(): f for f in fields}
    for key in obj:
        name = folded.get(key.casefold())
        if name is not None and name != key:
            raise BadRequest(f"{where}.{key}" if where else key,
                             f"not a field: the keys are Go's field names, case-sensitive (use {name!r})")


def _check_meta(meta: Mapping[str, Any], where: str) -> None:
    """The metadata fields the extender reads (cache keys, the pod's shape key) have their kube types."""
    err = metadata_error(meta, ("namespace", "uid", "resourceVersion", "generateName"))
    if err:
        raise BadRequest(f"{where}.metadata.{err[0]}", err[1])


def _pod(args: Mapping[str, Any]) -> dict[str, Any]:
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("Pod", f"expected a v1.Pod object, got {json_kind(pod)}")
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise BadRequest("Pod.metadata", f"expected an object, got {json_kind(meta)}")
    if not isinstance((meta or {}).get("name"), str) or not meta["name"]:
        raise BadRequest("Pod.metadata.name", "required (a non-empty string)")
    _check_meta(meta, "Pod")
    if not isinstance(pod.get("spec", {}), dict):
        raise BadRequest("Pod.spec", f"expected an object, got {json_kind(pod.get('spec'))}")
    return pod


def _node_args(args: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, list[str], dict[str, str]]:
    """``(Node objects or None, the node names asked about, the nodes refused)`` of an ExtenderArgs.
    A value of a type Go's decoder refuses is a :class:`BadRequest`; a Node without a name is
    refused alone (as a node whose document the model cannot read, :meth:`Extender._model`): it is
    asked about as ``Nodes.items[i]`` (no node name has brackets) and the reason names the field."""
    nodes = args.get("Nodes")
    names = args.get("NodeNames")
    if nodes is not None:
        if not isinstance(nodes, dict):
            raise BadRequest("Nodes", f"expected a v1.NodeList object with items, got {json_kind(nodes)}")
        items = nodes.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise BadRequest("Nodes.items", f"expected an array of v1.Node, got {json_kind(items)}")
        seen: set[str] = set()
        asked: list[str] = []
        refused: dict[str, str] = {}
        for i, n in enumerate(items):
            where = f"Nodes.items[{i}]"
            if not isinstance(n, dict):
                raise BadRequest(where, f"expected a v1.Node object, got {json_kind(n)}")
            meta = n.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                raise BadRequest(f"{where}.metadata.name", f"required: expected a v1.Node with metadata.name, "
                                                           f"metadata is {json_kind(meta)}")
            meta = meta or {}
            name = meta.get("name")
            if name is not None and not isinstance(name, str):
                raise BadRequest(f"{where}.metadata.name", f"expected a string, got {json_kind(name)}")
            _check_meta(meta, where)
            _check_node_types(n, where)
            if not name:
                asked.append(where)
                refused[where] = f"{where}: metadata.name: required (a v1.Node has a name): node refused"
                continue
            if name in seen:  # the reply names nodes: two with one name cannot both be answered
                raise BadRequest(f"{where}.metadata.name", f"duplicate node {name!r}")
            seen.add(name)
            asked.append(name)
        return items, asked, refused
    if names is not None:
        if not isinstance(names, list):
            raise BadRequest("NodeNames", f"expected an array of node names, got {json_kind(names)}")
        for i, x in enumerate(names):
            if type(x) is not str:
                raise BadRequest(f"NodeNames[{i}]", f"expected a node name (string), got {json_kind(x)}")
        return None, list(names), {}
    raise BadRequest("Nodes", "one of Nodes (nodeCacheCapable: false) or NodeNames (nodeCacheCapable: true) is required")


def _check_node_types(node: Mapping[str, Any], where: str) -> None:
    """The parts of a Node the model reads have the JSON types Go's decoder needs (else the body is
    no ExtenderArgs: a 400); what they hold (a quantity, a taint's key) is the model's to read, and
    a node it cannot read is refused alone (:meth:`Extender._model`)."""
    for k in ("spec", "status"):
        if node.get(k) is not None and not isinstance(node[k], dict):
            raise BadRequest(f"{where}.{k}", f"expected an object, got {json_kind(node[k])}")
    status, spec = node.get("status") or {}, node.get("spec") or {}
    for k in ("allocatable", "capacity"):
        if status.get(k) is not None and not isinstance(status[k], dict):
            raise BadRequest(f"{where}.status.{k}", f"expected an object of quantities, got {json_kind(status[k])}")
    taints = spec.get("taints")
    if taints is not None and not isinstance(taints, list):
        raise BadRequest(f"{where}.spec.taints", f"expected an array of taints, got {json_kind(taints)}")
    for j, t in enumerate(taints or ()):
        if not isinstance(t, dict):
            raise BadRequest(f"{where}.spec.taints[{j}]", f"expected an object, got {json_kind(t)}")


#: Static filters whose kube status is Unschedulable (a preemption may resolve them), not
#: UnschedulableAndUnresolvable: the plugins that read the pods on a node, but affinity / missing label.
_RESOLVABLE = frozenset({NODE_PORTS_FILTER, SPREAD_FILTER, POD_ANTI_AFFINITY_FILTER, EXISTING_ANTI_AFFINITY_FILTER})


def node_reasons(state: ClusterState, w: int, nodes: np.ndarray) -> dict[int, tuple[str, bool]]:
    """For each of ``nodes`` (indices) where workload ``w`` does not fit: (kube's reason,
    unresolvable). Static constraints are unresolvable; resource shortages are not."""
    p = state.problem
    sf = static_filter(p, w)
    fit = resource_fit(state, w, nodes)
    tol = fit_tolerance(p)  # the shortage test of resource_fit and explain(): free + tol < demand
    out: dict[int, tuple[str, bool]] = {}
    reasons = static_reasons(p, w)  # kube's words, shared with explain() (feasibility.py)
    first = sf.first_fail[nodes]
    for j in np.flatnonzero((first >= 0) | ~fit):  # only the failing nodes are visited in Python
        n = int(nodes[j])
        code = int(first[j])
        if code == TAINTS_FILTER:
            out[n] = (sf.taint_messages[int(sf.taint_reason[n])], True)
        elif code >= 0 and code != GPU_CARDS_FILTER and not (code in AFTER_FIT_FILTERS and not fit[j]):
            # kube's Unschedulable (preemption may help) for NodePorts, spread skew and anti-affinity;
            # UnschedulableAndUnresolvable for the others. A node short of a resource that fails only a
            # plugin kube runs after NodeResourcesFit is reported for the resource (below).
            out[n] = (reasons[code], code not in _RESOLVABLE)
        else:
            # NodeResourcesFit lists every shortage of the node, cards included.
            parts = [insufficient(p.resources[r]) for r in np.flatnonzero(p.demand[w] > 0)
                     if state.free[n, r] + tol[n, r] < p.demand[w, r]]
            count = int(p.wl_gpu_count[w])
            if code == GPU_CARDS_FILTER:  # fewer cards than the pod asks for: no preemption can help
                out[n] = (", ".join([*parts, reasons[GPU_CARDS_FILTER]]), True)
                continue
            if count:
                short = (state.gpu_max_free[n] < p.wl_gpu_milli[w]) if (count == 1 and p.wl_gpu_milli[w] < GPU_MILLI) \
                    else (state.gpu_full[n] < count)
                if short:
                    parts.append(insufficient("gpu"))
            out[n] = (", ".join(parts) or "Insufficient resources", False)
    return out


def normalize(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1]; all equal -> all 1 (no preference among them)."""
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 1e-12:
        return np.ones_like(values, dtype=np.float64)
    return (values - lo) / (hi - lo)


class Extender(RequestStats):
    """The extender's logic, independent of HTTP (the server and the tests call it)."""

    def __init__(self, solver: str = "greedy-objective", solver_params: dict[str, Any] | None = None,
                 cache: Any = None, kube: Any = None, config: ClusterConfig | None = None,
                 solver_weight: float = 0.5, fallback_solver: str = "kube-default") -> None:
        import solvers

        if not 0.0 <= solver_weight <= 1.0:
            raise ValueError(f"solver_weight: must be in [0, 1], got {solver_weight}")
        self.solver_name = solver
        self.solver = solvers.make(solver, **(solver_params or {}))
        self.fallback = solvers.make(fallback_solver)
        # Pod scoring (it walks every bound pod per model) only where the solver or the fallback reads it.
        self._scoring = solvers.reads_pod_scoring(self.solver, self.fallback)
        if cache is not None and self._scoring:
            cache.scoring = True  # each model's pod-scoring counts built with it, not in the first request after it
        self.cache = cache
        self.kube = kube
        self.config = config or ClusterConfig()
        self.solver_weight = solver_weight
        self._solver_lock = threading.Lock()
        self._sessions: dict[int, Any] = {}
        self._node_docs: dict[tuple, dict[str, Any]] = {}
        self._snap_lock = threading.Lock()
        # Each model's snapshots by pod shape, dropped with the model (weak keys): a live model is in
        # _nodelist_models, is the cache's current one, or is serving a request.
        self._snapshots: weakref.WeakKeyDictionary[ClusterModel, OrderedDict[str, Snapshot]] = weakref.WeakKeyDictionary()
        # Each cached snapshot's state by id(snapshot), removed when the snapshot is freed (so an
        # id is never that of another, later snapshot).
        self._states: dict[int, ClusterState] = {}
        self._nodelist_models: OrderedDict[tuple, ClusterModel] = OrderedDict()
        # Pods bound through /bind, counted on their node until the model does (see bind()), and the
        # pods of the latest requests by UID, which bind() takes the bound pod's spec from.
        self._assume_lock = threading.Lock()
        self._assumed: dict[str, _Assumed] = {}
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._watch_bound_pods()
        super().__init__("filter", "prioritize", "bind", "preempt", "solver_fallbacks", "bad_requests", "errors")

    # --- snapshots -------------------------------------------------------------------------

    def _model(self, nodes: list[dict[str, Any]] | None) -> ClusterModel:
        """The cluster a request is answered on: the node cache's model, or the NodeList's (a node
        whose document does not parse, its ``iro-fed.io/allocated`` annotation included, is in
        ``refused_nodes``; one without a name is left out: :func:`_node_args` refuses it)."""
        if nodes is not None and self.cache is not None and self.cache.synced:
            # NodeList requests to an extender that watches: its cache knows the usage too.
            return self.cache.model()
        if nodes is None:
            if self.cache is None:
                raise PodSpecError("NodeNames given but this extender has no node cache (started without --kubeconfig): "
                                   "configure it with nodeCacheCapable: false")
            if not self.cache.synced:
                raise NotReady("the extender's node cache has not synced with the API server yet: retry")
            return self.cache.model()
        nodes = [n for n in nodes if (n.get("metadata") or {}).get("name")]
        key = tuple(node_cache_key(n) for n in nodes)
        cacheable = None not in key  # every node has a resourceVersion
        if cacheable:
            with self._snap_lock:
                model = self._nodelist_models.get(key)
                if model is not None:
                    self._nodelist_models.move_to_end(key)
                    return model
        model = ClusterModel(nodes, None, self.config, doc_cache=self._node_docs, keys=key, refuse_bad_nodes=True)
        if cacheable:
            with self._snap_lock:
                self._nodelist_models[key] = model
                while len(self._nodelist_models) > NODELIST_MODELS:
                    self._nodelist_models.popitem(last=False)
        return model

    def snapshot(self, pod: dict[str, Any], nodes: list[dict[str, Any]] | None) -> Snapshot:
        """The pod as the one workload on the cluster (cached per cluster version and pod shape)."""
        return self._snapshot_on(self._model(nodes), pod)

    def _checked_model(self, nodes: list[dict[str, Any]] | None) -> ClusterModel:
        """:meth:`_model`, its errors as :class:`BadRequest` naming the nodes (but :class:`NotReady`)."""
        try:
            return self._model(nodes)
        except NotReady:
            raise
        except ValueError as exc:  # PodSpecError, QuantityError, ProblemValidationError; the message names the node
            raise BadRequest.wrap(exc, "Nodes" if nodes is not None else "NodeNames", inside=False) from exc

    def _snapshot_on(self, model: ClusterModel, pod: dict[str, Any]) -> Snapshot:
        shape = pod_shape_key(pod)  # what the model reads of it: pods share a snapshot only where every answer is the same
        with self._snap_lock:
            shapes = self._snapshots.get(model)
            snap = shapes.get(shape) if shapes is not None else None
            if snap is not None:
                shapes.move_to_end(shape)
                return snap
        snap = model.with_pods([pod], scoring=self._scoring)
        # Cached for every pod of this shape: not the first one's whole document (a 30-container pod
        # is ~430 KB parsed, 64 shapes a model). Nothing here reads a snapshot's pods; the view
        # names the pod and holds what its usage and its rules read (:func:`bound_view`).
        snap.pods = [bound_view(pod)]
        with self._snap_lock:
            shapes = self._snapshots.setdefault(model, OrderedDict())
            shapes[shape] = snap
            while len(shapes) > SNAPSHOTS_PER_MODEL:
                shapes.popitem(last=False)
        return snap

    def state(self, snap: Snapshot) -> ClusterState:
        """The snapshot's cluster state, built once per snapshot while it lives. Filter and prioritize
        only read it (feasibility, marginal, solver scores); anything that places pods copies it."""
        key = id(snap)
        with self._snap_lock:
            state = self._states.get(key)
            if state is not None and state.problem is snap.problem:
                return state
            state = ClusterState(snap.problem)
            # Runs as the snapshot is freed, before its id can be another object's. No lock: the
            # last reference may go in a thread that holds it (an eviction); dict.pop is atomic.
            weakref.finalize(snap, self._states.pop, key, None)
            self._states[key] = state
            return state

    # --- pods bound here ----------------------------------------------------------------------

    def _watch_bound_pods(self) -> None:
        """Follow the bound-pods watch (chained after any ``on_change`` it has) to end an assumed
        pod's count when the watch shows it deleted or finished; weakly, so that an extender
        dropped does not live on in the cache's reflector."""
        reflector = getattr(self.cache, "pods", None)
        if reflector is None or not hasattr(reflector, "on_change"):
            return
        before = reflector.on_change
        ref = weakref.WeakMethod(self._bound_pod_changed)

        def on_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            if before is not None:
                before(old, new)
            method = ref()
            if method is not None:
                try:
                    method(old, new)
                except Exception:  # never end the reflector's watch over one odd object
                    log.debug("bound pod change not read", exc_info=True)

        reflector.on_change = on_change

    def _bound_pod_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        obj = new if new is not None else old
        if not isinstance(obj, Mapping):
            return
        key = obj_key(obj)
        with self._assume_lock:
            a = self._assumed.get(key)
            if a is None or a.uid != obj_uid(obj):
                return
            status = new.get("status") if new is not None else None
            if new is None or (isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES):
                self._assumed.pop(key)  # deleted or finished: it holds nothing on the node
            else:
                a.pod = dict(new)  # the watch's copy (the GPU cards annotation, a resize) from now on

    def _remember(self, pod: dict[str, Any]) -> None:
        """Keep the pod of a request by UID, for :meth:`bind` (only where bind can count it): what
        the usage accounting and the pod-reading plugins read of a bound pod (:func:`bound_view`:
        requests, labels, anti-affinity, host ports), not the whole object (a 30-container pod is
        ~430 KB parsed: 1,024 of them were ~420 MiB)."""
        uid = obj_uid(pod)
        if self.cache is None or self.kube is None or not uid:
            return
        kept = bound_view(pod)
        with self._assume_lock:
            self._recent[uid] = kept
            self._recent.move_to_end(uid)
            while len(self._recent) > RECENT_PODS:
                self._recent.popitem(last=False)

    def _assume(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        """Count the pod just bound to ``node`` there until the model does (see :meth:`bind`)."""
        lists = getattr(getattr(self.cache, "pods", None), "lists_started", None)
        if lists is None or not uid:
            return
        with self._assume_lock:
            pod = self._recent.get(uid)
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("name") != name or (meta.get("namespace") or "default") != namespace:
            log.debug("bound %s/%s (uid %s) without a filter or prioritize request for it: not counted until the "
                      "watch shows it", namespace, name, uid)
            return
        bound = dict(pod, spec=dict(pod.get("spec") or {}, nodeName=node))
        a = _Assumed(bound, node, uid, time.monotonic(), lists)
        with self._assume_lock:
            self._assumed[f"{namespace}/{name}"] = a

    def _assumed_on(self, model: ClusterModel) -> dict[str, list[dict[str, Any]]]:
        """The pods bound here that ``model`` (the node cache's) does not count, by node. One stops
        counting only on evidence, as IroScheduler's assumed pods: a model counts it (dropped once
        that was seen :data:`HTTP_TIMEOUT_S` ago, so that a request still on an older model counts
        it too), the watch shows it deleted or finished, a bound-pods list started after its
        Binding lacks it, or the safety TTL :data:`ASSUME_TTL_S` has passed."""
        if self.cache is None or not self.cache.synced:
            return {}
        with self._assume_lock:
            if not self._assumed:
                return {}
            items = list(self._assumed.items())
        reflector = self.cache.pods
        listed = reflector.lists_applied  # read before the store: it holds this list's result at least
        with reflector.changed:
            uids = {key: obj_uid(reflector.store[key]) for key, _ in items if key in reflector.store}
        now = time.monotonic()
        out: dict[str, list[dict[str, Any]]] = {}
        done: list[tuple[str, _Assumed]] = []
        for key, a in items:
            if any(obj_uid(q) == a.uid for q in model.pods_on(a.node)):
                if a.counted_since is None:
                    a.counted_since = now
                elif now - a.counted_since > HTTP_TIMEOUT_S:
                    done.append((key, a))
            elif (listed > a.lists and uids.get(key) != a.uid) or now - a.since > ASSUME_TTL_S:
                if listed <= a.lists or uids.get(key) == a.uid:
                    log.warning("%s: bound to %s %.0f s ago and never counted by the node cache: no longer counted "
                                "(safety TTL)", key, a.node, now - a.since)
                done.append((key, a))
            else:
                out.setdefault(a.node, []).append(a.pod)
        if done:
            with self._assume_lock:
                for key, a in done:
                    if self._assumed.get(key) is a:
                        self._assumed.pop(key)
        return out

    def _request_state(self, snap: Snapshot, model: ClusterModel,
                       extra: Mapping[str, list[dict[str, Any]]]) -> ClusterState:
        """:meth:`state`, with ``extra`` (:meth:`_assumed_on`: the pods bound here that ``model``
        does not count yet) on their nodes (a copy; the cached state stays the model's)."""
        state = self.state(snap)
        if not extra:
            return state
        state = state.copy()
        for node, pods in extra.items():
            i = snap.problem.node_index.get(node)
            if i is not None:
                set_node_pods(state, model, i, [*model.pods_on(node), *pods])
        return state

    @staticmethod
    def _assumed_conflicts(model: ClusterModel, pod: Mapping[str, Any], names: Iterable[str],
                           extra: Mapping[str, list[dict[str, Any]]]) -> dict[str, tuple[str, bool]]:
        """The nodes of ``names`` where ``pod`` fails NodePorts, PodTopologySpread or InterPodAffinity
        once the pods bound here that ``model`` does not count yet (``extra``) are counted, as
        bound pods are (:meth:`ClusterModel.extra_pod_conflicts`): node -> (kube's reason,
        unresolvable), as :func:`node_reasons` words them. Else two pods with one host port, bound
        back to back, both passed on one node (the snapshot's verdict saw the model's pods only)."""
        out: dict[str, tuple[str, bool]] = {}
        for name, kind in model.extra_pod_conflicts(pod, names, extra).items():
            code = POD_FILTER_PREFIXES[_FAILURE_PREFIX[kind]]
            out[name] = (FAILURE_REASONS[kind], code not in _RESOLVABLE)
        return out

    # --- verbs -------------------------------------------------------------------------------

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.count("filter")
        _go_fields(args, _EXTENDER_ARGS)
        pod = _pod(args)
        nodes, asked, refused = _node_args(args)
        self._remember(pod)
        try:
            model = self._model(nodes)
            snap = self._snapshot_on(model, pod)
            p = snap.problem
            at = [p.node_index.get(n, -1) for n in asked]  # Python ints: the loops below read them
            extra = self._assumed_on(model)
            state = self._request_state(snap, model, extra)
            reasons = node_reasons(state, 0, np.array([i for i in at if i >= 0], dtype=np.int64))
            if extra:
                passing = [name for name, i in zip(asked, at, strict=True) if i >= 0 and i not in reasons]
                for name, r in self._assumed_conflicts(model, pod, passing, extra).items():
                    reasons[p.node_index[name]] = r
        except ValueError as exc:  # PodSpecError, QuantityError, ProblemValidationError: the pod cannot be placed
            if isinstance(exc, NotReady):
                self.count("errors")  # the extender's, not the request's
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": str(exc)}
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passed: list[int] = []
        for j, (name, i) in enumerate(zip(asked, at, strict=True)):
            if i < 0:
                why = refused.get(name) or model.refused_nodes.get(name)
                if why is not None:  # its document says nothing usable: no preemption fixes that
                    unresolvable[name] = why
                    continue
                failed[name] = "node is not in the extender's node cache (added since its last sync, or no such node)"
                continue
            r = reasons.get(i)
            if r is None:
                passed.append(j)
            elif r[1]:
                unresolvable[name] = r[0]
            else:
                failed[name] = r[0]
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if nodes is not None:
            result["Nodes"] = {"metadata": {}, "items": [nodes[j] for j in passed]}
        else:
            result["NodeNames"] = [asked[j] for j in passed]
        return result

    def scores(self, snap: Snapshot, names: list[str], state: ClusterState | None = None,
               blocked: Iterable[str] = ()) -> tuple[dict[str, int], str | None]:
        """0..10 per asked node name (0 for one the snapshot lacks), and the fallback reason when the
        solver failed. ``state``: the snapshot's state to score on (default :meth:`state`);
        ``blocked``: nodes that fail a filter the snapshot does not see (scored 0, as unfit ones)."""
        p = snap.problem
        state = self.state(snap) if state is None else state
        idx = np.array([p.node_index.get(n, -1) for n in names], dtype=np.int64)
        known = idx >= 0
        ok = known.copy()
        # The pass/fail mask only: the reasons node_reasons would spell out are not needed here.
        ok[known] = static_filter(p, 0).mask[idx[known]] & resource_fit(state, 0, idx[known])
        blocked = set(blocked)
        if blocked:
            ok &= np.array([n not in blocked for n in names], dtype=bool)
        cand = idx[ok]
        if cand.size == 0:
            return dict.fromkeys(names, 0), None
        fallback_reason = None
        try:
            solver_scores = self._solver_scores(state, cand, self.solver)
        except Exception as exc:  # a failing solver must not fail scheduling
            fallback_reason = f"{self.solver_name} failed: {type(exc).__name__}: {exc}"
            self.count("solver_fallbacks")
            log.warning("prioritize: %s; using the kube-default ranking", fallback_reason)
            solver_scores = self._solver_scores(state, cand, self.fallback)
        delta = marginal(p, state, 0, cand)
        a = 1.0 if fallback_reason else self.solver_weight
        mixed = a * normalize(solver_scores) + (1.0 - a) * normalize(delta)
        final = np.zeros(len(names), dtype=np.int64)
        final[ok] = np.rint(MAX_EXTENDER_PRIORITY * mixed).astype(np.int64)
        return dict(zip(names, final.tolist(), strict=True)), fallback_reason

    def _solver_scores(self, state: ClusterState, cand: np.ndarray, solver: Any) -> np.ndarray:
        """The solver's ranking scores of the candidate nodes (higher is better).

        An online solver's ``rank`` sorts its ``score`` over the feasible nodes; here only the
        nodes kube-scheduler asked about are scored (what ``rank`` would order among them), which
        keeps a request O(candidates) on large clusters. A batch solver places the pod; its node
        scores 1, the others 0.
        """
        from solvers import OnlineSolver

        problem = state.problem
        with self._solver_lock:
            if isinstance(solver, OnlineSolver):
                if self._sessions.get(id(solver)) is not problem:
                    solver.reset(problem)  # once per problem: per-run caches stay warm across requests
                    self._sessions[id(solver)] = problem
                return np.asarray(solver.score(state, 0, cand), dtype=np.float64)
            placement = solver.solve(problem)
            chosen = int(placement.assignment[0])
            return (cand == chosen).astype(np.float64)

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.count("prioritize")
        _go_fields(args, _EXTENDER_ARGS)
        pod = _pod(args)
        nodes, asked, _ = _node_args(args)
        self._remember(pod)
        model = self._checked_model(nodes)
        extra = self._assumed_on(model)
        try:
            if extra and self._scoring:
                # The pods bound here that the model does not count yet count for PodTopologySpread and
                # InterPodAffinity too (kube-scheduler assumes each pod it binds): a snapshot of its own.
                snap = model.with_pods([pod], assumed=extra)
            else:
                snap = self._snapshot_on(model, pod)
            blocked = model.extra_pod_conflicts(pod, asked, extra)  # only which nodes: they score 0
        except ValueError as exc:
            raise BadRequest.wrap(exc, "Pod") from exc
        scores, _ = self.scores(snap, asked, self._request_state(snap, model, extra), blocked)
        return [{"Host": n, "Score": scores[n]} for n in asked]

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        self.count("bind")
        _go_fields(args, _BINDING_ARGS)
        for k in ("PodName", "PodNamespace", "Node", "PodUID"):
            if args.get(k) is not None and not isinstance(args[k], str):
                raise BadRequest(k, f"expected a string, got {json_kind(args[k])}")
        missing = [k for k in ("PodName", "PodNamespace", "Node") if not args.get(k)]
        if missing:
            raise BadRequest(missing[0], f"required (ExtenderBindingArgs: {', '.join(missing)} missing)")
        if self.kube is None:
            return {"Error": "this extender cannot bind: it was started without --kubeconfig"}
        node = args["Node"]
        if self.cache is not None and self.cache.synced and node not in self.cache.nodes.store:
            # The API server binds to any name, even a node that does not exist: the pod would
            # then sit on a phantom node until the pod GC deletes it. Refuse; kube retries the pod.
            return {"Error": f"binding {args['PodNamespace']}/{args['PodName']}: node {node!r} is not in the "
                             "extender's node cache (no such node, or not seen yet): no Binding created"}
        # The UID goes into the Binding: the API server then refuses (409) a pod recreated under the same name.
        uid = args.get("PodUID") or None
        result = self.kube.bind(args["PodNamespace"], args["PodName"], args["Node"], uid=uid)
        if result.ok:
            # kube-scheduler goes on to the next pod at once, and the model counts this one only once
            # the watch shows it and the model is rebuilt: until then it is counted here, or a GPU
            # share (an annotation, which kube's own filters do not see) would be booked twice.
            self._assume(args["PodNamespace"], args["PodName"], uid, node)
            return {"Error": ""}
        return {"Error": f"binding {args['PodNamespace']}/{args['PodName']} to {args['Node']} failed "
                         f"(HTTP {result.status}): {result.message}"}

    def preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.count("preempt")
        _go_fields(args, _PREEMPTION_ARGS)
        pod = _pod(args)
        self._remember(pod)
        key = "NodeNameToVictims" if args.get("NodeNameToVictims") is not None else "NodeNameToMetaVictims"
        proposals = args.get(key)
        if proposals is None:
            raise BadRequest(key, "one of NodeNameToVictims or NodeNameToMetaVictims is required")
        if not isinstance(proposals, dict):
            raise BadRequest(key, f"expected an object node -> victims, got {json_kind(proposals)}")
        # Every proposal is checked before any is used: a bad one is a 400, not a half-read answer.
        checked = {node: _meta_victims(victims, f"{key}.{node}") for node, victims in proposals.items()}
        if self.cache is None or not self.cache.synced:
            # Without a cache the extender cannot tell what the victims free: keep kube's proposal.
            return {"NodeNameToMetaVictims": checked}
        model = self.cache.model()
        try:
            base = model.with_pods([pod], scoring=False)
        except ValueError as exc:  # PodSpecError, QuantityError, ProblemValidationError
            raise BadRequest.wrap(exc, "Pod") from exc
        problem = base.problem
        # Each proposed node's usage is recomputed from the pods bound to it minus the victims,
        # the way the model counted it (GPU cards included, finished pods excluded): a victim
        # frees only what it holds on that node.
        on_node = pods_by_node(self.cache.pods.items())
        for node, pods in self._assumed_on(model).items():  # bound here, not in the store yet
            have = {obj_uid(q) for q in on_node.get(node, ())}
            on_node.setdefault(node, []).extend(q for q in pods if obj_uid(q) not in have)
        keep: dict[str, Any] = {}
        state = ClusterState(problem)  # built once; each proposal sets its node's row, then puts it back
        for node, victims in checked.items():
            i = problem.node_index.get(node)
            if i is None:
                continue
            gone = {v["UID"] for v in victims["Pods"] if v["UID"]}
            left = [p for p in on_node.get(node, ()) if (p.get("metadata") or {}).get("uid") not in gone]
            set_node_pods(state, model, i, left)
            if not node_reasons(state, 0, np.array([i])):
                keep[node] = victims
            state.set_node_usage(i, problem.allocated[i], problem.gpu_free[i])
        return {"NodeNameToMetaVictims": keep}


def set_node_pods(state: ClusterState, model: ClusterModel, i: int, pods: Iterable[Mapping[str, Any]]) -> None:
    """Give node ``i`` of ``state`` (a state of ``model``'s problem) the usage of exactly these bound
    ``pods``, counted as ``model`` counts a node's pods (:func:`~iro_fed.k8s.snapshot.apply_usage`):
    requests, GPU cards and kube's NonZeroRequested, so that the node is filtered and scored as in
    a fresh snapshot of those pods. The preempt check's what-if: the node without its victims."""
    problem = state.problem
    doc = dict(model.node_docs[i])  # the model's node docs are the problem's nodes, in order
    res = model.config.resources
    # The remaining pods' summed non-zero requests, as the snapshot sets a node's nonzero_allocated:
    # left out, set_node_usage would take the usage itself (a best-effort pod then counts 0, not 100m).
    nonzero = _nonzero_allocated(apply_usage(doc, pods, res, []), res)
    allocated = problem.allocated[i].copy()
    for r, amount in doc["allocated"].items():
        ri = problem.resource_index.get(r)
        if ri is not None:
            allocated[ri] = amount
    state.set_node_usage(i, allocated, np.array(doc["gpu_free_milli"], dtype=problem.gpu_free.dtype),
                         nonzero=np.array([nonzero.get(r, 0.0) for r in NONZERO_RESOURCES]))


def _meta_victims(victims: Any, where: str) -> dict[str, Any]:
    """kube's ``Victims`` (``Pods``: v1.Pod objects) or ``MetaVictims`` (``Pods``: ``{UID}``) as MetaVictims."""
    if not isinstance(victims, dict):
        raise BadRequest(where, f"expected an object with Pods and NumPDBViolations, got {json_kind(victims)}")
    _go_fields(victims, _VICTIMS, where)
    items = victims.get("Pods")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise BadRequest(f"{where}.Pods", f"expected an array, got {json_kind(items)}")
    pods = []
    for j, v in enumerate(items):
        at = f"{where}.Pods[{j}]"
        if not isinstance(v, dict):
            raise BadRequest(at, f"expected an object, got {json_kind(v)}")
        if "metadata" in v:
            meta = v["metadata"]
            if not isinstance(meta, dict):
                raise BadRequest(f"{at}.metadata", f"expected an object, got {json_kind(meta)}")
            uid, at = meta.get("uid"), f"{at}.metadata.uid"
        else:
            _go_fields(v, ("UID",), at)
            uid, at = v.get("UID"), f"{at}.UID"
        if uid is not None and not isinstance(uid, str):
            raise BadRequest(at, f"expected a string, got {json_kind(uid)}")
        pods.append({"UID": uid or ""})
    pdb = victims.get("NumPDBViolations")
    if pdb is None:
        pdb = 0
    if type(pdb) is not int or pdb < 0:  # Go's int64: 1.5, "2", true are decode errors there
        raise BadRequest(f"{where}.NumPDBViolations", f"expected a non-negative integer, got {json.dumps(pdb)[:40]}")
    return {"Pods": pods, "NumPDBViolations": pdb}


# --- HTTP -----------------------------------------------------------------------------------------


_ARGS = {"filter": "ExtenderArgs", "prioritize": "ExtenderArgs", "bind": "ExtenderBindingArgs",
         "preempt": "ExtenderPreemptionArgs"}


class ExtenderServer(ConnectionLimit, AnyFamily, ThreadingHTTPServer):
    """``ThreadingHTTPServer`` serving an :class:`Extender` under ``url_prefix``; at most
    ``max_connections`` open at once (more get 503 with ``Retry-After: 1``)."""

    daemon_threads = True
    allow_reuse_address = True
    #: NodeList mode sends every Node object: about 100 MB at 5000 nodes with their image lists.
    max_body_bytes = MAX_BODY_BYTES
    #: The whole body must arrive within this of its start (else 408 and close), and the request
    #: line and headers within this of the request's first byte: kube-scheduler's httpTimeout
    #: (:data:`HTTP_TIMEOUT_S`; the constructor's ``http_timeout_s``). By then the caller has given
    #: up, and a stalled sender would hold its connection and its share of the body budget for
    #: nothing (it was 30 s). An 87 MiB NodeList of 5,000 nodes arrives over loopback in well under 1 s.
    body_timeout_s = HTTP_TIMEOUT_S
    header_timeout_s = HTTP_TIMEOUT_S
    max_connections = 256  # one thread each
    max_parse_bytes = MAX_PARSE_BYTES
    max_parse_memory = MAX_PARSE_MEMORY
    max_parse_total: int | None = None  # what all requests parse at once (None: max_parse_memory)
    #: How long a request waits, in all, for room in the body and the parse budget before its 503
    #: (None waited until the body deadline, which was 30 s). kube-scheduler gives up on the call after
    #: httpTimeout (5 s in deploy/, 5 s by default: DefaultExtenderTimeout), sending the body
    #: included. After 1.5 s of waiting its work takes under 0.1 s (NodeNames, p99) or about 0.4 s
    #: (a 500-node NodeList), so the 503 or the answer arrives with 3 s to spare. Waiting longer answers no
    #: one, while the body keeps its share and the bodies behind it wait too. To kube-scheduler a
    #: 503 is the error a timeout would be, only sooner, and it schedules one pod at a time: a
    #: filter error fails this pod's cycle (ignorable: false in deploy/; the pod is retried) or,
    #: ignorable, skips the extender; a prioritize error is ignored (kube's scores decide); a bind
    #: error has the pod retried, and a 503 makes no Binding after kube-scheduler stopped waiting.
    budget_wait_s: float | None = 1.5
    busy_error_key = "Error"
    busy_message = "too many connections to the extender: retry"

    def __init__(self, extender: Extender, host: str = "127.0.0.1", port: int = 0, url_prefix: str = "",
                 http_timeout_s: float | None = None) -> None:
        """``http_timeout_s``: the deployment's httpTimeout, when not :data:`HTTP_TIMEOUT_S`; the
        body and header deadlines are set to it."""
        if http_timeout_s is not None:
            self.body_timeout_s = self.header_timeout_s = positive_seconds("http_timeout_s", http_timeout_s)
        self.extender = extender
        self.body_budget = ByteBudget(self.max_parse_bytes)  # past it: 503 (kube-scheduler retries the pod)
        # Made with the server, so it exists (and can be read) before any request arrives.
        self.parse_budget = ByteBudget(self.max_parse_total or self.max_parse_memory)
        self.url_prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
        super().__init__((host, port), _ExtenderHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host_port(host, port)}{self.url_prefix}"

    def serve_in_thread(self) -> threading.Thread:
        return serve_in_thread(self, "iro-extender")

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client gone mid-reply; anything a request can cause is answered by the handler.
        log.debug("connection from %s failed", client_address, exc_info=True)


class _ExtenderHandler(RoutedJsonHandler):
    server: ExtenderServer
    error_key = "Error"

    def routes(self) -> dict[str, dict[str, Any]]:
        prefix = self.server.url_prefix
        out: dict[str, dict[str, Any]] = {"/healthz": {"GET": self._health}, "/readyz": {"GET": self._health}}
        for verb in _ARGS:
            out[f"{prefix}/{verb}"] = {"POST": functools.partial(self._verb, verb)}
        return out

    def not_found(self, path: str) -> str:
        prefix = self.server.url_prefix
        return f"unknown verb {path!r} (expected POST {prefix}/filter, /prioritize, /bind, /preempt or GET /healthz, /readyz)"

    def on_error(self, code: int) -> None:
        self.server.extender.count_error(code)

    def _health(self) -> None:
        ext = self.server.extender
        ready = urlsplit(self.path).path == "/healthz" or ext.cache is None or ext.cache.synced
        self._send(200 if ready else 503, {"ok": ready, "stats": ext.stats_snapshot()})

    def _verb(self, verb: str) -> None:
        ext = self.server.extender
        # A filter's NodeList reply repeats the passing Node objects: their JSON text is kept.
        args = self.read_json(spans_at=_NODE_ITEMS if verb == "filter" else None)
        if not isinstance(args, dict):
            raise HttpError(400, f"body: must be a JSON object ({_ARGS[verb]}), got {json_kind(args)}", "body")
        start = time.perf_counter()
        try:
            result = getattr(ext, verb)(args)
        except BadRequest as exc:
            raise HttpError(400, str(exc), exc.field) from None
        except NotReady as exc:  # not the request's fault: kube-scheduler retries (a prioritize error is ignored)
            raise HttpError(503, str(exc), retry_after_s=1) from None
        except Exception as exc:  # never let one request take the server down
            log.exception("%s failed", verb)
            message = f"internal error in {verb}: {type(exc).__name__}: {exc}"
            if verb != "filter":
                raise HttpError(500, message) from None
            ext.count("errors")
            return self._send(200, {"Nodes": None, "NodeNames": None, "FailedNodes": {},
                                    "FailedAndUnresolvableNodes": {}, "Error": message})
        log.debug("%s %s in %.2f ms", verb, obj_key(args["Pod"]) if isinstance(args.get("Pod"), dict) else "",
                  1000 * (time.perf_counter() - start))
        if self.json_spans is not None:
            data = spliced_filter_reply(result, self.json_spans)
        elif verb == "prioritize":
            data = host_priority_list_json(result)
        else:
            data = None
        if data is not None:
            return self.send_body(200, data)
        self._send(200, result)


# '{"Host": <name>, "Score": ' by node name, as json.dumps writes it (see host_priority_list_json);
# cleared when it grows past _HOST_TEXT_MAX (names of nodes long gone).
_HOST_TEXT: dict[str, str] = {}
_HOST_TEXT_MAX = 1 << 16
_SCORE_TEXT = [f"{s}}}" for s in range(MAX_EXTENDER_PRIORITY + 1)]


def host_priority_list_json(result: Any) -> bytes | None:
    """``json.dumps(result)`` of a prioritize result (a list of ``{"Host": str, "Score": int}``),
    byte for byte where each item's keys come in that order (else the same document), from each
    host's text kept between requests: for 500 hosts 0.08 ms where json.dumps took 0.25 (a
    sixth of the server's time per prioritize). None where ``result`` is not such a list."""
    if type(result) is not list:
        return None
    texts = _HOST_TEXT
    if len(texts) > _HOST_TEXT_MAX:
        texts.clear()
    parts = []
    for item in result:
        if type(item) is not dict or len(item) != 2:
            return None
        host, score = item.get("Host"), item.get("Score")
        if type(host) is not str or type(score) is not int:
            return None
        head = texts.get(host)
        if head is None:
            head = texts[host] = '{"Host": ' + encode_basestring_ascii(host) + ', "Score": '
        parts.append(head + (_SCORE_TEXT[score] if 0 <= score <= MAX_EXTENDER_PRIORITY else f"{score}}}"))
    return ("[" + ", ".join(parts) + "]").encode()


_NODE_ITEMS = ("Nodes", "items")


def spliced_filter_reply(result: Mapping[str, Any], spans: ArraySpans) -> bytes | None:
    """``json.dumps(result)`` of a NodeList-mode filter result, its ``Nodes.items`` (objects of the
    request, ``spans.items``) written as the request's own JSON text of them: re-encoding 5,000
    kubelet Nodes took 0.6 s of kube-scheduler's 5 s. The rest is json.dumps's, piece by piece, so
    the reply is json.dumps's bytes where the request's items were written as json.dumps writes
    them, and parses to the same document in any case. None where an item is not one of the request's."""
    nodes = result.get("Nodes")
    if type(nodes) is not dict or list(nodes) != ["metadata", "items"]:
        return None
    where = {id(item): k for k, item in enumerate(spans.items)}
    picked = [where.get(id(item)) for item in nodes["items"]]
    if None in picked or len(where) != len(spans.items):  # (the items are distinct objects: Node dicts)
        return None
    out: list[bytes | memoryview] = []
    for key, value in result.items():
        out.append(b"{" if not out else b", ")
        out.append(json.dumps(key).encode() + b": ")
        if key == "Nodes":
            out += [b'{"metadata": ', json.dumps(nodes["metadata"]).encode(), b', "items": [']
            for n, k in enumerate(picked):  # one list, joined once: the reply is copied once
                if n:
                    out.append(b", ")
                out.append(spans.text(k))
            out.append(b"]}")
        else:
            out.append(json.dumps(value, check_circular=False).encode())
    out.append(b"}" if out else b"{}")
    return b"".join(out)
