"""The Kubernetes API through the official ``kubernetes`` Python client.

Objects are handled as the API's JSON (plain dicts): calls use ``_preload_content=False`` and
parse the body once, which is faster than the client's models and immune to its deserialization
problems (kubernetes-client/python #547, #825: ``create_namespaced_pod_binding`` gets a
``v1.Status`` back and fails to read it as a ``V1Binding`` although the bind happened).

:class:`Reflector` keeps a local copy of a list of objects from a list + watch, relisting when
the watch reports 410 Gone, as client-go's reflector does; like it, it asks for watch bookmarks,
so that a watch of a quiet kind resumes from a recent version instead of relisting. Lists come in
pages (``limit`` / ``continue``, :func:`list_all`), as client-go's pager reads them, each page
trimmed before the next is read.

Every call waits a bounded time (the client's default is to wait for ever): a connection that an
API server or a proxy in between stopped answering without closing it would otherwise stall a
list, or a watch, for good, and the cache would silently stop changing. The server-side
``timeoutSeconds`` of a watch cannot help there: it ends a watch on a live connection only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from iro_fed.k8s.httpjson import positive_seconds
from iro_fed.k8s.snapshot import own_annotations, resize_conditions

log = logging.getLogger("iro_fed.k8s")

#: How long a read (a list; a watch past its ``timeoutSeconds``) waits for the API server's next
#: bytes: kube-apiserver answers a request it has not served in its ``--request-timeout`` (1 min
#: by default) with 504 itself, so a longer silence means no answer will come. urllib3 retries a
#: GET that timed out up to 3 times, on a new connection (which gets past a dropped one).
READ_TIMEOUT_S = 60.0
#: How much longer than ``watch_timeout_s`` a watch may last, at random: client-go's reflector asks
#: each watch for ``minWatchTimeout * (rand.Float64() + 1.0)`` seconds (reflector.go), uniform in
#: [min, 2 * min), so that replicas which relisted together (after an API server restart, or a
#: timeout they all saw) do not renew their watches together ever after.
WATCH_JITTER = 1.0
#: How long opening a connection may take (client-go's dialer allows 30 s; a reachable API server
#: accepts in milliseconds).
CONNECT_TIMEOUT_S = 10.0
#: Objects per page of a list (its ``limit``; client-go's pager asks for 500): a relist of the
#: whole collection in one answer held it all parsed at once (tens of MB per 1,000 pods) before
#: the caches trimmed it. 0: the whole list in one answer.
LIST_PAGE_SIZE = 500
#: Expired paged lists before the list is read in one answer: a paged list whose ``continue``
#: token expired (410: its version was compacted, after about 5 minutes on etcd) starts again from
#: the first page; after this many expired lists it is read whole, which cannot expire (client-go's
#: pager falls back to a full list after the first; a second paged try keeps the memory bound).
LIST_RESTARTS = 2


def read_timeout(read_s: float) -> tuple[float, float]:
    """The client's ``_request_timeout`` of a read that waits at most ``read_s`` for each answer."""
    return (min(CONNECT_TIMEOUT_S, read_s), read_s)


def check_page_size(name: str, value: Any) -> int:
    """``value`` if it is a whole number >= 0 (a list's page size; 0: no pages), else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: must be a whole number >= 0 (objects per list page; 0: the whole list in one "
                         f"answer), got {value!r}")
    return value


def list_all(list_func: Callable[..., Any], page_size: int, request_timeout: Any,
             keep_fields: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """Every object ``list_func`` (a client list call; ``kwargs``: its selectors) lists, and the
    list's ``resourceVersion``, read ``page_size`` objects at a time (0: in one answer), each page
    trimmed to ``keep_fields`` (None: whole) before the next is read, so the untrimmed objects
    of one page at most are held at once. The pages are one consistent read: the API server
    serves each at the first page's version, which the last page's ``metadata.resourceVersion``
    carries. A ``continue`` token that expired (410) restarts the list from the first page
    (:data:`LIST_RESTARTS` times, then it is read in one answer); other errors propagate."""
    check_page_size("page_size", page_size)
    restarts = 0
    while True:
        limit = page_size if restarts < LIST_RESTARTS else 0
        items: list[dict[str, Any]] = []
        token = ""
        try:
            while True:
                page_args = dict(kwargs, limit=limit) if limit else dict(kwargs)
                if token:
                    page_args["_continue"] = token  # no resourceVersion with it: the token holds the version
                doc = _read(list_func(_preload_content=False, _request_timeout=request_timeout, **page_args))
                page = doc.get("items") or []
                items.extend(page if keep_fields is None else (trim_object(o, keep_fields) for o in page))
                meta = doc.get("metadata") or {}
                del doc, page  # the whole objects of this page can go before the next one comes
                token = meta.get("continue") or ""
                if not token:
                    return items, str(meta.get("resourceVersion", ""))
        except Exception as exc:
            if not token or getattr(exc, "status", None) != 410:
                raise
            restarts += 1
            log.info("list: continue token expired (%s), listing again from the start%s", getattr(exc, "reason", exc),
                     "" if restarts < LIST_RESTARTS else " in one answer")


def check_kubeconfig(path: str | os.PathLike[str]) -> None:
    """Raise ValueError unless each file of ``path`` (``:``-separated, as the kubernetes client
    merges them) that exists parses as a YAML mapping: the client indexes the parsed document
    and a plain-text file (``/etc/hostname``) failed with "'str' object does not support item
    assignment". A missing or empty file is left to the client, whose message names it."""
    import yaml

    for part in str(path).split(os.pathsep):
        if not part or not os.path.isfile(part):
            continue
        try:
            with open(part, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"not a kubeconfig: {part}: {exc}") from None
        if doc is not None and not isinstance(doc, dict):
            kind = {"str": "a string", "list": "a list"}.get(type(doc).__name__, type(doc).__name__)
            raise ValueError(f"not a kubeconfig: expected a YAML mapping, got {kind} ({part})")


def api_client(kubeconfig: str | None = None, user_agent: str | None = None) -> Any:
    """An ``ApiClient`` from a kubeconfig file, or the in-cluster service account when None; its
    connections use TCP keepalive with client-go's timings, so a proxy or load balancer does not
    drop an idle watch's connection silently, and a peer gone for good is noticed."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        check_kubeconfig(kubeconfig)
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.keep_alive = True  # read when the ApiClient makes its connection pool
    api = client.ApiClient(cfg)
    if user_agent:
        api.user_agent = user_agent
    return api


@dataclass(frozen=True)
class CallResult:
    """Outcome of a write: ``ok``, the HTTP status and the server's message."""

    ok: bool
    status: int
    message: str = ""
    body: Any = None


def _read(resp: Any) -> Any:
    data = resp.data if hasattr(resp, "data") else resp.read()
    return json.loads(data) if data else None


def _exception_result(exc: Exception) -> CallResult:
    """An API error (its status and message), or status 0 for a connection that failed, was
    dropped or timed out (urllib3's errors): the write may or may not have happened."""
    if not hasattr(exc, "status"):
        return CallResult(False, 0, f"{type(exc).__name__}: {exc}")
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    message = str(getattr(exc, "reason", "") or exc)
    if body:
        try:
            doc = json.loads(body)
            message = doc.get("message") or message
        except (ValueError, TypeError, AttributeError):
            pass
    return CallResult(False, status, message)


class Kube:
    """The few API calls IRO makes, with plain-dict objects.

    Writes never raise: an API error, a dropped connection or a timeout is a :class:`CallResult`
    (status 0 when no answer came), so one failed call cannot abort a batch; each waits at most
    ``write_timeout_s`` for the answer (the client's default is to wait for ever).
    """

    write_timeout_s: float = 30.0
    #: Reads (:meth:`list_nodes`, :meth:`list_pods`, :meth:`node_metrics`, the lists and watches
    #: of a :class:`ClusterCache`) wait at most this for the API server's next bytes.
    read_timeout_s: float = READ_TIMEOUT_S
    #: Objects per page of every list (:data:`LIST_PAGE_SIZE`; 0: each list in one answer).
    list_page_size: int = LIST_PAGE_SIZE

    def __init__(self, api: Any) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None, user_agent: str | None = None) -> Kube:
        return cls(api_client(kubeconfig, user_agent))

    def ensure_pool_size(self, size: int) -> None:
        """Keep at least ``size`` connections to the API server in the client's pool. The client's
        default is 5 per CPU (10 on 2 CPUs); a caller with more threads calling at once (the
        scheduler's Binding workers, its Lease, its watches) made urllib3 discard the extra
        connections with "Connection pool is full" as they came back. Pools opened already are
        dropped (their idle connections closed), so every later one gets the new size."""
        cfg = getattr(self.api, "configuration", None)
        if cfg is None or (cfg.connection_pool_maxsize or 0) >= size:
            return
        cfg.connection_pool_maxsize = size
        manager = getattr(getattr(self.api, "rest_client", None), "pool_manager", None)
        if manager is not None:
            manager.connection_pool_kw["maxsize"] = size
            manager.clear()

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return list_all(self.core.list_node, self.list_page_size, read_timeout(self.read_timeout_s))

    def list_pods(self, field_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        kwargs = {"field_selector": field_selector} if field_selector else {}
        return list_all(self.core.list_pod_for_all_namespaces, self.list_page_size, read_timeout(self.read_timeout_s),
                        **kwargs)

    def node_metrics(self) -> list[dict[str, Any]]:
        """metrics-server's NodeMetrics (``metrics.k8s.io/v1beta1``): actual usage per node."""
        from kubernetes import client

        api = client.CustomObjectsApi(self.api)
        doc = _read(api.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes", _preload_content=False,
                                                   _request_timeout=read_timeout(self.read_timeout_s)))
        return doc.get("items") or []

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
             annotations: dict[str, str] | None = None) -> CallResult:
        """POST the Binding once. ``_preload_content=False``: the API server answers with a
        ``v1.Status`` that the client cannot read as a ``V1Binding`` (the bind has happened by
        then), so the status code decides. Never retried: a retry after the POST would get 409."""
        from kubernetes import client

        meta = client.V1ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=annotations or None)
        body = client.V1Binding(metadata=meta, target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
        try:
            resp = self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False,
                                                           _request_timeout=self.write_timeout_s)
        except Exception as exc:  # ApiException, or no answer (the bind may have happened): never retried here
            return _exception_result(exc)
        status = int(getattr(resp, "status", 0) or 0)
        resp_body = None
        try:
            resp_body = _read(resp)
        except Exception:  # the status decided; an unreadable Status body changes nothing
            pass
        return CallResult(status in (200, 201), status, "" if status in (200, 201) else str(resp_body), resp_body)

    def create_event(self, namespace: str, event: dict[str, Any]) -> CallResult:
        return self._write(self.core.create_namespaced_event, namespace, event)

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> CallResult:
        """Strategic-merge patch of ``pods/status`` (conditions merge by ``type``)."""
        return self._write(self.core.patch_namespaced_pod_status, name, namespace, patch,
                           _content_type="application/strategic-merge-patch+json")

    def _write(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> CallResult:
        """``call`` (a client write) waiting at most ``write_timeout_s``, its JSON answer as the body."""
        try:
            resp = call(*args, _preload_content=False, _request_timeout=self.write_timeout_s, **kwargs)
            return CallResult(True, int(resp.status), "", _read(resp))
        except Exception as exc:  # ApiException, a dropped connection, a timeout, an unreadable body
            return _exception_result(exc)


def _raw_watch() -> Any:
    from kubernetes import watch

    class RawWatch(watch.Watch):
        """Yields the raw JSON objects (``raw_object``) without building client models."""

        def get_return_type(self, func: Callable) -> None:
            return None

    return RawWatch()


def resource_version_of(obj: Any) -> Any:
    """``obj``'s ``metadata.resourceVersion`` (None when it, or its metadata, is not an object)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta.get("resourceVersion") if isinstance(meta, Mapping) else None


def _versions(store: Mapping[str, Any]) -> dict[str, Any] | None:
    """Each object's ``metadata.resourceVersion`` by key, or None when one has none (then a
    relist cannot be told unchanged)."""
    out = {}
    for key, obj in store.items():
        rv = resource_version_of(obj)
        if not rv:
            return None
        out[key] = rv
    return out


_CONTAINER = {"name": True, "resources": True, "restartPolicy": True, "ports": True}
_CONTAINER_STATUS = {"name": True, "allocatedResources": True, "resources": True}

#: What a :class:`ClusterCache` keeps of each bound pod and node (:func:`trim_object`; ``True``: the
#: value whole, ``[fields]``: an array of objects trimmed so, a function: what it returns). A pod
#: as the API sends it is mostly what nothing here reads (managedFields, container statuses,
#: env, volumes, probes, other annotations such as last-applied-configuration): 30-40 MB per
#: 1,000 bound pods held whole, about 5 MB trimmed; a kubelet's Node (images, conditions,
#: managedFields) ~50 KB parsed, ~5 KB trimmed. Kept is what the readers of the cached objects read:
#: the reflector (namespace, name, resourceVersion), the model (snapshot's ``pods_by_node``,
#: ``apply_usage`` / ``pod_demand`` with in-place resize, ``placed_pods`` / ``pod_rules(pending=False)``,
#: ``has_anti_affinity``, ``score_rules(pending=False)``: labels, the controller ownerReference (the
#: system default spreading's group) and pod (anti-)affinity, ``node_doc``, ``node_cache_key``; its rules cache keys pods by uid and
#: resourceVersion), the extender (uids, usage of the pods on a node) and the scheduler's
#: change hints (``_frees_room``, ``_adds_a_pod``, ``_node_fields``). Of a bound pod's affinity
#: podAffinity and podAntiAffinity are read, preferred and required (the filters' existing
#: anti-affinity, the scoring's existing pods' terms); ``affinity`` is kept whole (small, and
#: rare). Its other scheduling fields (tolerations, node selector, spread constraints, priority)
#: are read of pending pods only, which no trimmed reflector holds. Reading a new field of a cached object means adding it here
#: (tests/k8s/test_m2_trimmed_cache.py checks that the model is unchanged).
BOUND_POD_FIELDS: dict[str, Any] = {
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True, "labels": True,
                 "deletionTimestamp": True, "annotations": own_annotations,
                 "ownerReferences": [{"kind": True, "name": True, "uid": True, "controller": True}]},
    "spec": {"nodeName": True, "containers": [_CONTAINER], "initContainers": [_CONTAINER], "overhead": True,
             "resources": True, "affinity": True},
    "status": {"phase": True, "containerStatuses": [_CONTAINER_STATUS], "initContainerStatuses": [_CONTAINER_STATUS],
               "resources": True, "allocatedResources": True, "resize": True, "conditions": resize_conditions},
}
NODE_FIELDS: dict[str, Any] = {
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "labels": True, "annotations": own_annotations},
    "spec": {"taints": True, "unschedulable": True},
    "status": {"allocatable": True, "capacity": True},
}


def trim_object(value: Any, fields: Any) -> Any:
    """``value`` with only ``fields`` (as :data:`BOUND_POD_FIELDS`) kept. Lenient: a value that is
    not the object or array ``fields`` expects is kept whole, so the model's parse reports it as
    it would on the whole object."""
    if fields is True:
        return value
    if callable(fields):
        return fields(value)
    if isinstance(fields, list):
        return [trim_object(v, fields[0]) for v in value] if isinstance(value, list) else value
    if not isinstance(value, Mapping):
        return value
    return {k: trim_object(value[k], sub) for k, sub in fields.items() if k in value}


class Reflector:
    """A local copy of nodes or pods kept current by list + watch (client-go's reflector).

    ``store`` maps ``namespace/name`` to the object; ``version`` counts changes; ``synced`` is
    set after the first list. ``on_event(type, obj)`` is called for every change (``SYNC`` for
    each object of a (re)list). ``on_change(old, new)`` is called, after the store holds ``new``,
    for each object that changed, with its previous version (None: added) and its new one (None:
    deleted); a relist reports only the objects whose ``resourceVersion`` differs, deletions
    included (client-go's ``DeltaFIFO.Replace`` does the same), so a consumer can judge each
    change by what changed. ``resource_version`` is the version the next watch starts from.

    Watches ask for bookmarks (``allowWatchBookmarks=true``; ``bookmarks=False`` does not): a
    BOOKMARK event only moves ``resource_version`` (its object carries nothing else; it is no
    change and ``on_event`` does not see it). Without them a watch on a kind that rarely changes
    restarts, after ``watch_timeout_s``, from the version of its last change, which the API
    server may have compacted since (changes of other kinds move the version too): 410 Gone and
    a full relist, each time. ``lists`` counts the lists made.

    Each watch asks for a ``timeoutSeconds`` drawn uniformly from [``watch_timeout_s``,
    ``watch_timeout_s * (1 + watch_jitter)``), whole seconds (:meth:`next_watch_timeout`, as
    client-go's reflector: :data:`WATCH_JITTER`); ``watch_jitter=0`` asks for ``watch_timeout_s``
    exactly. ``rng`` draws them (a seeded ``random.Random`` makes them repeatable; by default one
    seeded by the OS, so that replicas differ).

    A list waits at most ``read_timeout_s`` for the API server's next bytes, a watch at most
    its ``timeoutSeconds + read_timeout_s`` (a quiet watch may be silent until its server-side end):
    past that the connection is taken for dead, and the reflector counts an error in ``errors``,
    logs it, and lists and watches again, as after any other failure.

    ``keep_fields`` (as :data:`BOUND_POD_FIELDS`; None: whole objects): each object, listed or
    watched, is trimmed to these fields before it is stored or handed to ``on_event`` /
    ``on_change`` (they must read nothing else); ``resourceVersion`` must be among them.

    Each (re)list reads ``page_size`` objects at a time (:func:`list_all`; 0: the whole list in
    one answer), trimming each page as it comes; the watch starts from the list's version.
    """

    def __init__(self, list_func: Callable[..., Any], name: str, field_selector: str | None = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None, watch_timeout_s: int = 60,
                 bookmarks: bool = True,
                 on_change: Callable[[dict[str, Any] | None, dict[str, Any] | None], None] | None = None,
                 read_timeout_s: float = READ_TIMEOUT_S, watch_jitter: float = WATCH_JITTER,
                 rng: random.Random | None = None, keep_fields: Mapping[str, Any] | None = None,
                 page_size: int = LIST_PAGE_SIZE) -> None:
        self.read_timeout_s = positive_seconds("read_timeout_s", read_timeout_s)
        self.page_size = check_page_size("page_size", page_size)
        if not (math.isfinite(watch_jitter) and watch_jitter >= 0):
            raise ValueError(f"watch_jitter: must be a finite number >= 0, got {watch_jitter}")
        self.list_func = list_func
        self.name = name
        self.field_selector = field_selector
        self.on_event = on_event
        self.on_change = on_change
        self.keep_fields = keep_fields
        self.watch_timeout_s = watch_timeout_s
        self.watch_jitter = float(watch_jitter)
        self._rng = rng or random.Random()
        self.last_watch_timeout_s = watch_timeout_s  # the timeoutSeconds of the latest watch
        self.bookmarks = bookmarks
        self.resource_version = ""
        self.lists = 0
        # Lists begun, and the number of the latest begun one whose result is in the store: a list
        # begun after a write is a consistent read that holds it (unless deleted meanwhile).
        self.lists_started = 0
        self.lists_applied = 0
        self._list_count = threading.Lock()
        self.store: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.synced = threading.Event()
        self.changed = threading.Condition()
        self.errors = 0
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace")
        return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))

    def next_watch_timeout(self) -> int:
        """The next watch's ``timeoutSeconds``: ``watch_timeout_s`` times 1 plus up to ``watch_jitter``
        at random, truncated to whole seconds as client-go does (so 60 gives 60..119)."""
        return int(self.watch_timeout_s * (1.0 + self.watch_jitter * self._rng.random()))

    def start(self) -> Reflector:
        self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        # watch.Watch.stop() unblocks a read only once the response has arrived (and stream()
        # clears its flag when it starts): a watch being opened right now would go on for up
        # to watch_timeout_s, so stop whichever watch is current until the thread ends.
        deadline = time.monotonic() + 5.0
        while True:
            w = self._watch
            if w is not None:
                w.stop()
            if self._thread is None or not self._thread.is_alive() or time.monotonic() >= deadline:
                break
            self._thread.join(timeout=0.05)

    def items(self) -> list[dict[str, Any]]:
        with self.changed:
            return list(self.store.values())

    def _bump(self) -> None:
        with self.changed:
            self.version += 1
            self.changed.notify_all()

    def _list(self) -> str:
        with self._list_count:
            self.lists_started += 1
            started = self.lists_started
        kwargs = {"field_selector": self.field_selector} if self.field_selector else {}
        items, resource_version = list_all(self.list_func, self.page_size, read_timeout(self.read_timeout_s),
                                           self.keep_fields, **kwargs)
        self.lists += 1
        with self.changed:
            store = {self.key(o): o for o in items}
            # A relist (after a 410 or a lost connection) that finds every object as it was is
            # no change: the version stays, so nothing waiting on a change wakes or rebuilds.
            before, after = _versions(self.store), _versions(store)
            unchanged = self.synced.is_set() and after is not None and before == after
            old, self.store = self.store, store
        for o in items:
            if self.on_event:
                self.on_event("SYNC", o)
        if self.on_change and not unchanged:
            for key in {**old, **store}:
                was, now = old.get(key), store.get(key)
                rv = resource_version_of(was) if was is not None else None
                if was is None or now is None or rv != resource_version_of(now) or (not rv and was != now):
                    self.on_change(was, now)
        if not unchanged:
            self._bump()
        with self._list_count:
            self.lists_applied = max(self.lists_applied, started)
        self.synced.set()
        return resource_version

    def _run(self) -> None:
        from kubernetes.client.rest import ApiException

        backoff = 0.2
        while not self._stop.is_set():
            try:
                self.resource_version = self._list()
                backoff = 0.2
                while not self._stop.is_set():
                    self._watch = _raw_watch()
                    # The server ends the watch at timeoutSeconds; a silence past that plus a read's
                    # wait is a dead connection (no client-side timeout: a read for ever).
                    timeout = self.last_watch_timeout_s = self.next_watch_timeout()
                    kwargs: dict[str, Any] = {"resource_version": self.resource_version,
                                              "timeout_seconds": timeout,
                                              "_request_timeout": read_timeout(timeout + self.read_timeout_s)}
                    if self.field_selector:
                        kwargs["field_selector"] = self.field_selector
                    if self.bookmarks:
                        kwargs["allow_watch_bookmarks"] = True
                    for event in self._watch.stream(self.list_func, **kwargs):
                        obj = event["raw_object"]
                        rv = resource_version_of(obj)
                        if rv:
                            self.resource_version = str(rv)
                        etype = event["type"]
                        if etype == "BOOKMARK":
                            continue  # only the version moves (client-go's reflector does the same)
                        if self.keep_fields is not None:
                            obj = trim_object(obj, self.keep_fields)
                        with self.changed:
                            if etype == "DELETED":
                                was = self.store.pop(self.key(obj), None)
                            else:
                                was = self.store.get(self.key(obj))
                                self.store[self.key(obj)] = obj
                        if self.on_event:
                            self.on_event(etype, obj)
                        if self.on_change and etype != "DELETED":
                            self.on_change(was, obj)
                        elif self.on_change and was is not None:
                            # The version the store held is the one the consumer counted.
                            self.on_change(was, None)
                        self._bump()
                        if self._stop.is_set():
                            break
            except ApiException as exc:
                if exc.status == 410:
                    log.info("%s: watch expired, relisting", self.name)
                    continue
                self.errors += 1
                log.warning("%s: API error %s, retrying", self.name, exc.status)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # connection errors, no answer in time: back off and relist
                if self._stop.is_set():
                    break
                self.errors += 1
                if _refused(exc):
                    log.warning("%s: cannot connect to the API server: %s, retrying", self.name, exc)
                elif _timed_out(exc):
                    log.warning("%s: no answer from the API server in time (lists wait %g s, watches %g s): "
                                "%s, relisting", self.name, self.read_timeout_s, self.last_watch_timeout_s + self.read_timeout_s, exc)
                else:
                    log.warning("%s: %s: %s, retrying", self.name, type(exc).__name__, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)


def child_rng(rng: random.Random | None) -> random.Random | None:
    """A generator of its own for one reflector (each runs in its thread: one shared generator
    would give each the draws in whatever order the threads came), seeded from ``rng``; None
    (the reflector's own, from the OS) when ``rng`` is None."""
    return None if rng is None else random.Random(rng.getrandbits(64))


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is urllib3's timeout (also as the reason of its MaxRetryError)."""
    from urllib3.exceptions import MaxRetryError, TimeoutError

    return isinstance(exc, TimeoutError) or (isinstance(exc, MaxRetryError) and isinstance(exc.reason, TimeoutError))


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection that could not be made (refused, no route): urllib3 wraps it
    in a MaxRetryError whose reason is a NewConnectionError, which is not a timeout."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    return isinstance(exc, MaxRetryError) and isinstance(exc.reason, NewConnectionError)


class ClusterCache:
    """Nodes and bound pods from two reflectors, and the cluster model built from them.

    Building the model is O(nodes + pods) (about 0.3 s at 5,000 nodes), too slow to redo for
    every request while pods churn. After the first build a background thread rebuilds it at most
    every ``refresh_s`` when something changed, and :meth:`model` returns the latest one without
    waiting: extender and webhook answers see the cluster at most ``refresh_s`` plus one build
    late (kube-scheduler's own filters still check resources against its up-to-date cache).
    ``refresh_s=0`` rebuilds in the caller whenever the cache changed.
    """

    def __init__(self, kube: Kube, config: Any = None, watch_timeout_s: int = 60, refresh_s: float = 0.5,
                 watch_jitter: float = WATCH_JITTER, rng: random.Random | None = None, trim: bool = True,
                 wide: bool = True) -> None:
        """``watch_timeout_s``, ``watch_jitter``: the watches' timeouts (:class:`Reflector`); ``rng``
        seeds one generator per watch (repeatable in tests), else each has its own from the OS.
        ``trim``: the stores keep only what the model and its callers read of each object
        (:data:`BOUND_POD_FIELDS`, :data:`NODE_FIELDS`); False: whole objects. ``wide``: each model
        keeps every resource the nodes list and their pod slots (``ClusterModel(wide=True)``), so
        that the webhook's ``for_pods`` widens it without a rebuild in the review.

        :attr:`scoring` (False; the webhook and the extender set it when their solver reads pod
        scoring): each model builds its bound pods' pod-scoring counts
        (:meth:`~iro_fed.k8s.snapshot.ClusterModel.bound_scoring`, a walk over every bound pod,
        ~0.6 s at 50k pods) as it is built, in the refresh thread, not in the first review after it."""
        from iro_fed.k8s.snapshot import ClusterConfig

        self.kube = kube
        self.config = config or ClusterConfig()
        self.refresh_s = refresh_s
        self.wide = wide
        read = getattr(kube, "read_timeout_s", READ_TIMEOUT_S)
        watches = {"watch_timeout_s": watch_timeout_s, "read_timeout_s": read, "watch_jitter": watch_jitter,
                   "page_size": getattr(kube, "list_page_size", LIST_PAGE_SIZE)}
        self.nodes = Reflector(kube.core.list_node, "nodes", rng=child_rng(rng),
                               keep_fields=NODE_FIELDS if trim else None, **watches)
        self.pods = Reflector(kube.core.list_pod_for_all_namespaces, "bound-pods", field_selector="spec.nodeName!=",
                              rng=child_rng(rng), keep_fields=BOUND_POD_FIELDS if trim else None, **watches)
        self._model: Any = None
        self._model_version: tuple[int, int] = (-1, -1)
        self._lock = threading.Lock()
        self._built = threading.Condition()
        self._stop = threading.Event()
        self._builder: threading.Thread | None = None
        self._node_docs: dict[tuple, dict[str, Any]] = {}
        self.builds = 0
        self.scoring = False

    def start(self) -> ClusterCache:
        self.nodes.start()
        self.pods.start()
        if self.refresh_s > 0:
            self._builder = threading.Thread(target=self._refresh_loop, name="cluster-model", daemon=True)
            self._builder.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.nodes.stop()
        self.pods.stop()
        if self._builder is not None:
            self._builder.join(timeout=5)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        return self.nodes.synced.wait(timeout) and self.pods.synced.wait(max(deadline - time.monotonic(), 0.0))

    @property
    def synced(self) -> bool:
        return self.nodes.synced.is_set() and self.pods.synced.is_set()

    def version(self) -> tuple[int, int]:
        return (self.nodes.version, self.pods.version)

    def _build(self) -> None:
        from iro_fed.k8s.snapshot import ClusterModel

        version = self.version()  # read before the items: a change during the build triggers another
        model = ClusterModel(self.nodes.items(), self.pods.items(), self.config, doc_cache=self._node_docs, wide=self.wide)
        if self.scoring:
            model.bound_scoring()  # (kept by the model)
        with self._built:
            if version >= self._model_version:
                self._model, self._model_version = model, version
                self.builds += 1
            self._built.notify_all()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            if self._model is not None and self.version() != self._model_version:
                try:
                    self._build()
                except Exception as exc:  # keep serving the last good model
                    log.warning("cluster model rebuild failed: %s: %s", type(exc).__name__, exc)

    def model(self) -> Any:
        """The latest :class:`~iro_fed.k8s.snapshot.ClusterModel` (built now if there is none yet)."""
        with self._lock:
            if self._model is None or (self.refresh_s <= 0 and self.version() != self._model_version):
                self._build()
            return self._model

    def wait_fresh(self, timeout: float = 10.0) -> bool:
        """Wait until the model reflects everything the watches have delivered (tests, tools)."""
        deadline = time.monotonic() + timeout
        self.model()
        with self._built:
            while self._model_version != self.version():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if self.refresh_s <= 0:
                    self._built.release()
                    try:
                        self.model()
                    finally:
                        self._built.acquire()
                else:
                    self._built.wait(min(left, 0.1))
            return True
