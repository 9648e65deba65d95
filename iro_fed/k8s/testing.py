"""A loopback Kubernetes API server for tests, demos and the extender benchmark.

No real API server can run on the machines this project is tested on, so the Kubernetes code is
tested against this one: a real HTTP/1.1 server on 127.0.0.1 that speaks the API's JSON for what
IRO uses, and the real ``kubernetes`` Python client talks to it through a kubeconfig
(:meth:`FakeApiServer.write_kubeconfig`). It implements:

* ``/api/v1/nodes`` and ``/api/v1/pods`` (and namespaced pods): list, in the order the objects
  were created (etcd's is key order), whole or in pages (``limit`` and ``continue``: each page's
  ``metadata.continue`` names the next one, ``metadata.remainingItemCount`` counts what is left
  when no selector is given, and every page is of the list as it was at the first page, whose
  ``resourceVersion`` each carries; a ``continue`` token whose version was compacted away, or
  one of the oldest of more than ``MAX_PAGED_LISTS`` lists still open, gets 410 ``Expired``, as
  from etcd; :attr:`FakeApiServer.list_hook` sees each list request first), and watch (chunked
  ``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": ...}`` lines,
  ``resourceVersion``, ``timeoutSeconds``, ``fieldSelector`` with ``=``, ``==``, ``!=`` on
  ``spec.nodeName``, ``spec.schedulerName``, ``metadata.name``, ``metadata.namespace``,
  ``status.phase``, and ``labelSelector`` equality; objects entering or leaving a field selector
  are sent as ADDED / DELETED as the API server does; a too old ``resourceVersion`` (older than
  :meth:`FakeApiServer.compact`, or than the last ``history_limit`` events) gets a 410
  ``Expired`` ERROR; with ``allowWatchBookmarks=true`` a BOOKMARK carrying the current
  ``resourceVersion`` every ``bookmark_interval_s`` and before the watch ends);
* ``pods/binding`` POST: 201 with a ``v1.Status`` body (as the API server answers), 409 when the
  pod already has a node, binding annotations copied onto the pod;
* ``pods/status`` PATCH (strategic merge, with ``status.conditions`` merged by ``type``; JSON
  merge patch; JSON patch, RFC 6902, strict and atomic: a patch that does not apply gets the
  API server's 422 ``Invalid`` Status; a patch may not rename the pod);
* core ``events`` and ``events.k8s.io/v1`` events POST / GET;
* ``metrics.k8s.io/v1beta1`` NodeMetrics list (usage set by the test in ``node_metrics``, or
  with its ``timestamp`` by :meth:`FakeApiServer.set_node_metrics`; else stamped now);
* ``coordination.k8s.io/v1`` leases GET / POST / PUT with optimistic concurrency: a PUT whose
  ``metadata.resourceVersion`` is stale gets 409 Conflict, a POST of an existing lease 409
  AlreadyExists;
* a hung API server or proxy (:meth:`FakeApiServer.stall` / :meth:`FakeApiServer.resume`):
  requests whose path matches get no answer at all, and open watches stop sending.

It is not a conformant API server (no admission, no validation beyond what is listed, no
authentication); every request is logged in :attr:`FakeApiServer.requests` for assertions.

Also here: :class:`HTTPExtenderClient` and :func:`schedule_with_extenders`, kube-scheduler's side
of the extender protocol (``pkg/scheduler/extender.go``, ``schedule_one.go``) for replaying its
extender tests; :func:`make_node` / :func:`make_pod` builders; :func:`self_signed_cert` for the
webhook; ``python -m iro_fed.k8s.testing`` runs the server with demo nodes for local trials.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from iro_fed.k8s.httpjson import JsonHandler, serve_in_thread
from iro_fed.problem_io import json_kind
from iro_fed.signal_event import SignalEvent

_PATHS = [
    ("nodes", re.compile(r"^/api/v1/nodes$"), None),
    ("node", re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), None),
    ("pods", re.compile(r"^/api/v1/pods$"), None),
    ("pods", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$"), None),
    ("pod", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$"), None),
    ("binding", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/binding$"), None),
    ("binding", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/bindings$"), None),
    ("podstatus", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/status$"), None),
    ("events", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$"), "v1"),
    ("events", re.compile(r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events$"), "events.k8s.io/v1"),
    ("leases", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases$"), None),
    ("lease", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases/(?P<name>[^/]+)$"), None),
    ("nodemetrics", re.compile(r"^/apis/metrics\.k8s\.io/v1beta1/nodes$"), None),
]


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success" if code < 400 else "Failure", "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def _get_field(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return "" if cur is None else str(cur)


def parse_field_selector(text: str) -> list[tuple[str, str, str]]:
    """``a=b,c!=d`` -> [(field, op, value)] (ops ``=`` and ``!=``)."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.match(r"^([A-Za-z.]+)\s*(==|!=|=)\s*(.*)$", part)
        if m is None:
            raise ValueError(f"invalid field selector {part!r}")
        out.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return out


def _matches(obj: Mapping[str, Any] | None, fields: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    if obj is None:
        return False
    for f, op, v in fields:
        actual = _get_field(obj, f)
        if (actual == v) != (op == "="):
            return False
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(obj_labels.get(k) == v for k, v in labels.items())


def strategic_merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A small strategic merge: maps merge recursively, ``null`` deletes, ``conditions`` lists
    merge by ``type`` (their patch merge key), other lists are replaced."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif k == "conditions" and isinstance(v, list) and isinstance(target.get(k), list):
            merged = {c.get("type"): c for c in target[k]}
            for c in v:
                merged[c.get("type")] = {**merged.get(c.get("type"), {}), **c}
            target[k] = list(merged.values())
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            strategic_merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


class JsonPatchError(ValueError):
    """A JSON patch that RFC 6902 refuses; the message names the operation (``patch[i]``) and its field."""


_PATCH_OPS = ("add", "remove", "replace", "move", "copy", "test")
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")  # RFC 6901: no sign, no leading zero
_BAD_ESCAPE = re.compile(r"~(?![01])")


def _pointer_text(tokens: list[str]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens) or "the document root"


def _pointer(value: Any, field: str) -> list[str]:
    """RFC 6901 reference tokens: "" is the whole document; ``~1`` is "/" and ``~0`` is "~" (in that order)."""
    if not isinstance(value, str):
        raise JsonPatchError(f"{field}: expected a JSON pointer string, got {json_kind(value)}")
    if value == "":
        return []
    if not value.startswith("/"):
        raise JsonPatchError(f"{field} {value!r}: a JSON pointer is empty or starts with '/'")
    if _BAD_ESCAPE.search(value):
        raise JsonPatchError(f"{field} {value!r}: '~' must be escaped as '~0' ('/' as '~1')")
    return [t.replace("~1", "/").replace("~0", "~") for t in value[1:].split("/")]


def _array_index(array: list[Any], token: str, field: str, *, add: bool) -> int:
    # '-' (past the last element) and index == len name a new element: only add may use them.
    if token == "-":
        if add:
            return len(array)
        raise JsonPatchError(f"{field}: '-' (past the last element) names no element; only add may use it")
    if not _ARRAY_INDEX.fullmatch(token):
        raise JsonPatchError(f"{field}: {token!r} is not an array index (decimal digits without a sign or a leading zero)")
    i = int(token)
    if i > len(array) or (i == len(array) and not add):
        raise JsonPatchError(f"{field}: index {i} is out of range for an array of {len(array)}")
    return i


def _resolve(doc: Any, tokens: list[str], field: str) -> Any:
    """The value at ``tokens``: every step must exist."""
    cur = doc
    for n, token in enumerate(tokens):
        if isinstance(cur, dict):
            if token not in cur:
                raise JsonPatchError(f"{field}: {_pointer_text(tokens[:n + 1])} does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_array_index(cur, token, field, add=False)]
        else:
            raise JsonPatchError(f"{field}: {_pointer_text(tokens[:n])} is {json_kind(cur)}, not an object or an array")
    return cur


def _parent(doc: Any, tokens: list[str], field: str) -> dict[str, Any] | list[Any]:
    parent = _resolve(doc, tokens[:-1], field)
    if not isinstance(parent, dict | list):
        raise JsonPatchError(f"{field}: {_pointer_text(tokens[:-1])} is {json_kind(parent)}, not an object or an array")
    return parent


def _add(doc: Any, tokens: list[str], value: Any, field: str) -> Any:
    if not tokens:
        return value  # the whole document is replaced
    parent = _parent(doc, tokens, field)
    if isinstance(parent, list):
        parent.insert(_array_index(parent, tokens[-1], field, add=True), value)
    else:
        parent[tokens[-1]] = value
    return doc


def _existing(doc: Any, tokens: list[str], field: str) -> tuple[Any, int | str]:
    """The parent of the value at ``tokens`` (not the root; the value must exist) and its key there."""
    parent = _parent(doc, tokens, field)
    if isinstance(parent, list):
        return parent, _array_index(parent, tokens[-1], field, add=False)
    if tokens[-1] not in parent:
        raise JsonPatchError(f"{field}: {_pointer_text(tokens)} does not exist")
    return parent, tokens[-1]


def _remove(doc: Any, tokens: list[str], field: str) -> Any:
    """Removes the value at ``tokens`` (which must exist) and returns it."""
    if not tokens:
        raise JsonPatchError(f"{field}: the whole document cannot be removed")
    parent, key = _existing(doc, tokens, field)
    return parent.pop(key)


def _replace(doc: Any, tokens: list[str], value: Any, field: str) -> Any:
    if not tokens:
        return value  # the whole document, which always exists
    parent, key = _existing(doc, tokens, field)
    parent[key] = value
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 4.6 equality: numbers by value (1 == 1.0), but true is not 1 as Python's == has it."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b
    return type(a) is type(b) and a == b


def json_patch(doc: Any, ops: list[Mapping[str, Any]]) -> Any:
    """``doc`` with the RFC 6902 patch ``ops`` applied: add, remove, replace, move, copy, test.

    Strict, as RFC 6901/6902 read: a pointer is "" (the whole document) or starts with "/"; an
    array index is decimal without a sign or a leading zero, below the length (``add``: up to the
    length, or ``-``); every location an op reads must exist, as must the parent of the one an
    ``add`` writes. (The API server's evanphx/json-patch v4 also takes "-1" and "01", and refuses
    "" but in a ``test``: :class:`FakeApiServer` checks that itself.) Atomic (RFC 6902 section
    5): the ops run on a deep copy, returned only when all succeed, so ``doc`` is never changed.
    Raises :class:`JsonPatchError` naming ``patch[i]`` and its field.
    """
    if not isinstance(ops, list):
        raise JsonPatchError(f"patch: expected an array of operations, got {json_kind(ops)}")
    out = copy.deepcopy(doc)
    for i, op in enumerate(ops):
        where = f"patch[{i}]"
        if not isinstance(op, Mapping):
            raise JsonPatchError(f"{where}: expected an operation object, got {json_kind(op)}")
        kind = op.get("op")
        if kind not in _PATCH_OPS:
            raise JsonPatchError(f"{where}.op: expected one of {', '.join(_PATCH_OPS)}, got {kind!r}")
        if "path" not in op:
            raise JsonPatchError(f"{where}.path: missing")
        path = _pointer(op["path"], f"{where}.path")
        field = f"{where}.path {op['path']!r}"
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JsonPatchError(f"{where}.value: missing (null is a value; {kind} needs one)")
        if kind == "add":
            out = _add(out, path, copy.deepcopy(op["value"]), field)
        elif kind == "remove":
            _remove(out, path, field)
        elif kind == "replace":
            out = _replace(out, path, copy.deepcopy(op["value"]), field)
        elif kind == "test":
            if not _json_equal(_resolve(out, path, field), op["value"]):
                raise JsonPatchError(f"{field}: test failed: the value there is not {where}.value")
        else:
            if "from" not in op:
                raise JsonPatchError(f"{where}.from: missing ({kind} needs one)")
            source = _pointer(op["from"], f"{where}.from")
            from_field = f"{where}.from {op['from']!r}"
            if kind == "copy":
                out = _add(out, path, copy.deepcopy(_resolve(out, source, from_field)), field)
            elif source == path:
                _resolve(out, source, from_field)  # a move onto itself changes nothing, but from must exist
            elif source == path[:len(source)]:
                raise JsonPatchError(f"{from_field}: a location cannot be moved into one of its children ({field})")
            else:
                out = _add(out, path, _remove(out, source, from_field), field)
    return out


class FakeApiServer:
    """The loopback API server. Use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(self, history_limit: int | None = None) -> None:
        if history_limit is not None and history_limit < 1:
            raise ValueError(f"history_limit: must be >= 1 or None, got {history_limit}")
        self._lock = threading.Condition()
        self._rv = 100
        self._objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in ("nodes", "pods", "events", "leases")}
        # (rv, kind, type, old object, new object)
        self._history: list[tuple[int, str, str, dict | None, dict]] = []
        self._compacted_rv = 0
        #: Keep at most this many events (all kinds together) for watches, as etcd compaction
        #: does: a watch from a version older than the oldest kept event gets 410 Expired.
        self.history_limit = history_limit
        self._dropped_rv: dict[str, int] = {}  # kind -> newest event of that kind compacted away
        self._watch_generation = 0
        self._close_generation = 0
        self._open_watches: dict[str, int] = {}
        #: With ``allowWatchBookmarks=true`` a watch gets a BOOKMARK this often (and one before it
        #: ends at ``timeoutSeconds`` or :meth:`close_watches`); None: only before it ends.
        self.bookmark_interval_s: float | None = 60.0
        self._stopping = False
        self.requests: list[dict[str, Any]] = []
        self._writes_in_flight = 0  # POST/PUT/PATCH/DELETE being handled (see requests_to)
        #: metrics-server's NodeMetrics: node name -> {"cpu": "1500m", "memory": "2Gi"} (usage).
        self.node_metrics: dict[str, dict[str, str]] = {}
        #: The ``timestamp`` of each node's NodeMetrics (epoch seconds: when metrics-server's last
        #: scrape of it was taken); a node not here is stamped with the time of each list.
        self.node_metrics_at: dict[str, float] = {}
        #: Called with (namespace, name, binding body) before a binding is applied; may raise
        #: :class:`InjectedError` to answer with an error instead.
        self.binding_hook: Callable[[str, str, dict], None] | None = None
        #: Called with (namespace, event body) before an Event is created; may raise
        #: :class:`InjectedError` to answer with an error instead (nothing is stored).
        self.event_hook: Callable[[str, dict], None] | None = None
        #: Called with (kind, query parameters) before a list (each page of one) is answered, e.g.
        #: to compact the history between two pages; may raise :class:`InjectedError`.
        self.list_hook: Callable[[str, dict[str, str]], None] | None = None
        self._paged: dict[int, list[dict[str, Any]]] = {}  # paged lists still open: id -> objects
        self._paged_lists = 0
        self._stall: re.Pattern[str] | None = None  # paths that get no answer (stall / resume)
        #: Requests (and open watches) that the stall has held since the server started.
        self.stalled_requests = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = serve_in_thread(self._httpd, "fake-apiserver")
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, path: str | Path, user: str = "iro") -> Path:
        """A kubeconfig that points the real client at this server."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": user}}],
            "current-context": "fake",
        }
        p = Path(path)
        p.write_text(yaml.safe_dump(doc))
        return p

    # --- store -------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        return f"{ns}/{meta['name']}" if ns else meta["name"]

    def _put(self, kind: str, obj: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        with self._lock:
            meta = obj.setdefault("metadata", {})
            key = self._key(obj)
            old = self._objects[kind].get(key)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            rv = self._next_rv()
            meta["resourceVersion"] = str(rv)
            stored = copy.deepcopy(obj)
            self._objects[kind][key] = stored
            self._history.append((rv, kind, event or ("MODIFIED" if old else "ADDED"), old, stored))
            self._trim()
            self._lock.notify_all()
            return copy.deepcopy(stored)

    def _delete(self, kind: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            old = self._objects[kind].pop(key, None)
            if old is None:
                return None
            gone = copy.deepcopy(old)
            rv = self._next_rv()
            gone["metadata"]["resourceVersion"] = str(rv)
            self._history.append((rv, kind, "DELETED", old, gone))
            self._trim()
            self._lock.notify_all()
            return gone

    def _trim(self) -> None:
        """Drop the oldest events beyond ``history_limit`` (the caller holds the lock)."""
        if self.history_limit is None or len(self._history) <= self.history_limit:
            return
        dropped = self._history[: len(self._history) - self.history_limit]
        del self._history[: len(dropped)]
        for rv, kind, *_ in dropped:
            self._dropped_rv[kind] = rv
        self._compacted_rv = max(self._compacted_rv, dropped[-1][0])

    def add_node(self, node: dict[str, Any]) -> dict[str, Any]:
        return self._put("nodes", copy.deepcopy(node))

    def set_node_metrics(self, node: str, cpu: str, memory: str = "1Gi", at: float | None = None) -> None:
        """A new scrape of ``node`` as metrics-server serves it: usage ``cpu`` / ``memory``
        (quantities) taken at ``at`` (epoch seconds; None: stamped with the time of each list).
        metrics-server serves the same scrape, with the same timestamp, until the next one."""
        with self._lock:
            self.node_metrics[node] = {"cpu": cpu, "memory": memory}
            if at is None:
                self.node_metrics_at.pop(node, None)
            else:
                self.node_metrics_at[node] = float(at)

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        pod = copy.deepcopy(pod)
        pod.setdefault("metadata", {}).setdefault("namespace", "default")
        spec = pod.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        return self._put("pods", pod)

    def update(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._put(kind, copy.deepcopy(obj))

    def delete(self, kind: str, key: str) -> dict[str, Any] | None:
        return self._delete(kind, key)

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects[kind].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects[kind].values()]

    def compact(self) -> None:
        """Forget the watch history: a watch from an older resourceVersion gets 410 Expired."""
        with self._lock:
            self._compacted_rv = self._rv
            self._history.clear()

    def expire_watches(self) -> None:
        """End every open watch and expire every resourceVersion handed out so far, as when a
        client was away longer than the API server's watch window: resuming gets 410 Expired and
        the client must list again."""
        with self._lock:
            self._watch_generation += 1
            self._compacted_rv = self._rv + 1
            self._history.clear()
            self._lock.notify_all()

    def close_watches(self) -> None:
        """End every open watch the way its ``timeoutSeconds`` would: events not sent yet go out,
        then a BOOKMARK with the current version to a watch that asked for bookmarks. Nothing is
        expired: a client may resume from the version it last saw, if not compacted."""
        with self._lock:
            self._close_generation += 1
            self._lock.notify_all()

    def stall(self, path: str = "") -> None:
        """Hang as a dead API server, or a proxy that dropped its connections, does: every request
        whose path matches the regex ``path`` (``""``: all) is read and then gets nothing, not even
        headers, and each open watch of a matching path stops sending (no events, no bookmarks, no
        end). A connection held so stays silent for good (until :meth:`stop`), as a dropped one
        does: only a client-side timeout gets the client out, and nothing held takes effect.
        :meth:`resume` answers new requests again."""
        with self._lock:
            self._stall = re.compile(path)
            self._lock.notify_all()

    def resume(self) -> None:
        """New requests are answered again; connections :meth:`stall` held stay silent."""
        with self._lock:
            self._stall = None
            self._lock.notify_all()

    def _hold(self, path: str) -> bool:
        """If a stall holds ``path``: count it and keep the caller until :meth:`stop`, then True
        (the caller closes its connection unanswered). The caller holds the lock."""
        if self._stall is None or not self._stall.search(path):
            return False
        self.stalled_requests += 1
        self._lock.notify_all()
        while not self._stopping:
            self._lock.wait(0.5)
        return True

    def open_watches(self, kind: str) -> int:
        """How many watches of ``kind`` (``"pods"``, ``"nodes"`` ...) are being served now."""
        with self._lock:
            return self._open_watches.get(kind, 0)

    def requests_to(self, method: str, pattern: str) -> list[dict[str, Any]]:
        """Logged requests whose method matches the regex ``method`` (``"PUT|POST"``) and whose
        path matches the regex ``pattern``. Waits (up to 5 s) for writes being handled, so a
        request whose effect a test already saw is in the log too."""
        with self._lock:
            self._lock.wait_for(lambda: self._writes_in_flight == 0, timeout=5.0)
            return [r for r in self.requests if re.fullmatch(method, r["method"]) and re.search(pattern, r["path"])]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` holds (checked on every change); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
            return True

    # --- verbs -------------------------------------------------------------------------

    def _list_body(self, kind: str, fields: list, labels: dict, limit: int = 0, token: str = "") -> dict[str, Any]:
        """The list (``limit`` 0) or its page from ``token`` on: every page is of the list as it was
        at the first page (etcd's consistent continuation; stored objects are replaced, never
        changed, so the first page's references stay as they were). Raises :class:`InjectedError`
        410 ``Expired`` when that version was compacted away, 400 for a token not of this server."""
        with self._lock:
            if token:
                rv, list_id, start = _read_continue(token)
                objects = self._paged.get(list_id)
                if objects is None or rv < self._compacted_rv:
                    self._paged.pop(list_id, None)
                    raise InjectedError(410, "Expired", _CONTINUE_EXPIRED)
            else:
                rv, list_id, start = self._rv, 0, 0
                objects = [o for o in self._objects[kind].values() if _matches(o, fields, labels)]
            end = start + limit if limit > 0 else len(objects)
            items = [copy.deepcopy(o) for o in objects[start:end]]
            if end < len(objects) and not list_id:
                list_id = self._paged_lists = self._paged_lists + 1
                self._paged[list_id] = objects
                while len(self._paged) > MAX_PAGED_LISTS:
                    del self._paged[next(iter(self._paged))]
            elif end >= len(objects):
                self._paged.pop(list_id, None)
        obj_kind, api = _KINDS[kind]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end < len(objects):
            meta["continue"] = _write_continue(rv, list_id, end)
            if not fields and not labels:  # the API server counts what is left only without selectors
                meta["remainingItemCount"] = len(objects) - end
        return {"kind": f"{obj_kind}List", "apiVersion": api, "metadata": meta, "items": items}

    def _bind(self, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.binding_hook is not None:
            try:
                self.binding_hook(ns, name, body)
            except InjectedError as exc:
                return exc.code, _status(exc.code, exc.reason, str(exc))
        target = (body.get("target") or {}).get("name")
        if not target:
            return 400, _status(400, "BadRequest", "Binding.target.name: Required value")
        with self._lock:
            pod = self._objects["pods"].get(f"{ns}/{name}")
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            uid = (body.get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"].get("uid"):
                return 409, _status(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata'].get('uid')}")
            # kube-apiserver's checks (BindingREST.setPodNodeAndMetadata), in its order, each a 409.
            refused = None
            if pod["metadata"].get("deletionTimestamp"):
                refused = f"pod {name} is being deleted, cannot be assigned to a host"
            elif pod["spec"].get("nodeName"):
                refused = f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            elif pod["spec"].get("schedulingGates"):
                refused = f"pod {name} has non-empty .spec.schedulingGates"
            if refused:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": {refused}',
                                    {"name": name, "kind": "pods/binding"})
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = target
            ann = (body.get("metadata") or {}).get("annotations") or {}
            if ann:
                pod["metadata"].setdefault("annotations", {}).update(ann)
            conds = [c for c in pod.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"]
            conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
            pod["status"]["conditions"] = conds
            self._put("pods", pod)
        return 201, _status(201, "", "", None) | {"status": "Success"}

    def _create_lease(self, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return 422, _status(422, "Invalid", "metadata.name: Required value")
        with self._lock:
            if f"{ns}/{name}" in self._objects["leases"]:
                return 409, _status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
            body = copy.deepcopy(body)
            body["metadata"].update({"namespace": ns, "name": name})
            body["metadata"].pop("resourceVersion", None)
            body.setdefault("apiVersion", "coordination.k8s.io/v1")
            body.setdefault("kind", "Lease")
            return 201, self._put("leases", body)

    def _replace_lease(self, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            cur = self._objects["leases"].get(f"{ns}/{name}")
            if cur is None:
                return 404, _status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv and rv != cur["metadata"]["resourceVersion"]:
                return 409, _status(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again")
            body = copy.deepcopy(body)
            body.setdefault("metadata", {}).update({"namespace": ns, "name": name, "uid": cur["metadata"]["uid"]})
            body.setdefault("apiVersion", "coordination.k8s.io/v1")
            body.setdefault("kind", "Lease")
            return 200, self._put("leases", body)

    def _patch_status(self, ns: str, name: str, content_type: str, patch: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            cur = self._objects["pods"].get(f"{ns}/{name}")
            if cur is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            try:
                if "json-patch" in content_type:
                    refused = _json_patch_refusal(patch)
                    if refused is not None:
                        return refused
                    pod = json_patch(cur, patch or [])  # a new pod (json_patch copies), all ops applied or none
                elif "merge-patch" in content_type and not isinstance(patch, dict):
                    # the API server decodes a (strategic) merge patch into a map first
                    return 400, _status(400, "BadRequest", f"json: cannot unmarshal {_GO_KIND.get(type(patch), 'null')} "
                                        "into Go value of type map[string]interface {}")
                elif "strategic-merge-patch" in content_type:
                    pod = strategic_merge(copy.deepcopy(cur), patch)
                elif "merge-patch" in content_type:
                    pod = copy.deepcopy(cur)
                    _merge_patch(pod, patch)
                else:
                    return 415, _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json; got {content_type}")
            except JsonPatchError:
                return 422, _json_patch_not_applied()
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                return 422, _status(422, "Invalid", f"cannot apply patch: {exc}")
            # The API server checks the patched object against the URL (rest.EnsureObjectNamespace-
            # MatchesRequestNamespace, checkName): a patch does not rename, nor store a second pod.
            meta = pod.get("metadata")
            if not isinstance(meta, dict):
                return 422, _status(422, "Invalid", f'Pod "{name}" is invalid: metadata: expected an object, got {json_kind(meta)}')
            if meta.get("namespace") not in (None, "", ns):
                return 400, _status(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
            if meta.get("name") != name:
                return 400, _status(400, "BadRequest", f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})")
            meta["namespace"] = ns
            pod["spec"] = cur["spec"]  # the status subresource only changes status
            return 200, self._put("pods", pod)


def _json_patch_not_applied() -> dict[str, Any]:
    """The API server's answer to a JSON patch that does not apply (patch.go applyJSPatch:
    NewGenericServerResponse(422, ...), which keeps no cause: evanphx/json-patch's reason is not sent)."""
    body = _status(422, "Invalid", "the server rejected our request due to an error in our request")
    body["details"] = {}
    return body


#: The largest JSON patch the API server applies (patch.go maxJSONPatchOperations).
_MAX_JSON_PATCH_OPS = 10000


#: Go's encoding/json names for what a JSON value decodes to (its UnmarshalTypeError messages).
_GO_KIND = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def _json_patch_refusal(patch: Any) -> tuple[int, dict[str, Any]] | None:
    """The API server's answer to a JSON patch it refuses before applying any op, or None."""
    # jsonpatch.DecodePatch: an array of objects (JSON null decodes as no ops, a null op as an
    # op of unknown kind); anything else is 400
    if patch is not None and not isinstance(patch, list):
        return 400, _status(400, "BadRequest", f"json: cannot unmarshal {_GO_KIND[type(patch)]} into Go value of type jsonpatch.Patch")
    ops = patch or []
    for op in ops:
        if op is not None and not isinstance(op, dict):
            return 400, _status(400, "BadRequest", f"json: cannot unmarshal {_GO_KIND[type(op)]} into Go value of type jsonpatch.Operation")
    if len(ops) > _MAX_JSON_PATCH_OPS:
        return 413, _status(413, "RequestEntityTooLarge", "Request entity too large: The allowed maximum operations in a "
                            f"JSON patch is {_MAX_JSON_PATCH_OPS}, got {len(ops)}")
    # RFC 6902 lets add/replace/remove/move/copy work on "" (the whole document); evanphx/json-patch
    # v4 finds no parent for it ("doc is missing path"): only a test may read the whole document
    for op in ops:
        if isinstance(op, dict) and ((op.get("op") != "test" and op.get("path") == "")
                                     or (op.get("op") in ("move", "copy") and op.get("from") == "")):
            return 422, _json_patch_not_applied()
    return None


def _merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge_patch(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


#: The Status message of a continue token past compaction (410 Expired), the API server's words.
_CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start "
                     "a new list without the continue parameter.")


#: Paged lists (their first page's objects) kept for their next pages at most: a token of an
#: older one gets 410 Expired, as one past the API server's compaction does.
MAX_PAGED_LISTS = 64


def _write_continue(rv: int, list_id: int, start: int) -> str:
    """A continue token, opaque as the API server's (etcd3's is base64 JSON of its version and the
    next key): the first page's version, the list it continues and the next object's index."""
    doc = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "list": list_id, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


def _read_continue(token: str) -> tuple[int, int, int]:
    """What :func:`_write_continue` put in ``token``; InjectedError 400 for anything else."""
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        got = doc["rv"], doc["list"], doc["start"]
        if doc.get("v") != "meta.k8s.io/v1" or any(type(v) is not int or v <= 0 for v in got):
            raise ValueError("not a continue key of this server")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InjectedError(400, "BadRequest", f"continue key is not valid: {exc}") from None
    return got


#: The served kinds (as in the URL) -> (their ``kind``, ``apiVersion``).
_KINDS = {"nodes": ("Node", "v1"), "pods": ("Pod", "v1"), "events": ("Event", "v1"),
          "leases": ("Lease", "coordination.k8s.io/v1")}


def _bookmark_object(kind: str, rv: int) -> dict[str, Any]:
    """A BOOKMARK's object: the watched kind with only ``metadata.resourceVersion`` set."""
    obj_kind, api = _KINDS[kind]
    return {"kind": obj_kind, "apiVersion": api, "metadata": {"resourceVersion": str(rv)}}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class InjectedError(Exception):
    """Raised by a test hook to make the fake server answer with an error status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class _Handler(JsonHandler):
    api: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # --- plumbing ------------------------------------------------------------------------

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def _route(self) -> tuple[str, dict[str, str], str | None, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        for name, rx, extra in _PATHS:
            m = rx.match(parts.path)
            if m:
                return name, m.groupdict(), extra, parse_qs(parts.query)
        return "", {}, None, {}

    def _log(self, code: int) -> None:
        with self.api._lock:
            self.api.requests.append({"method": self.command, "path": urlsplit(self.path).path, "query": urlsplit(self.path).query,
                                      "status": code, "user_agent": self.headers.get("User-Agent", ""),
                                      "time": time.monotonic()})
            self.api._lock.notify_all()

    def _reply(self, code: int, body: Any) -> None:
        self._log(code)
        self._send(code, body)

    # --- verbs -----------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        route, args, _, query = self._route()
        q = {k: v[-1] for k, v in query.items()}
        try:
            fields = parse_field_selector(q.get("fieldSelector", ""))
        except ValueError as exc:
            return self._reply(400, _status(400, "BadRequest", str(exc)))
        labels = dict(p.split("=", 1) for p in q.get("labelSelector", "").split(",") if "=" in p)
        if "ns" in args and route in ("pods", "events", "leases"):
            fields = [*fields, ("metadata.namespace", "=", args["ns"])]
        if route == "nodemetrics":
            with self.api._lock:
                stamped = self.api.node_metrics_at
                items = [{"metadata": {"name": n}, "window": "30s", "usage": dict(u),
                          "timestamp": _now() if n not in stamped else
                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamped[n]))}
                         for n, u in self.api.node_metrics.items()]
            return self._reply(200, {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items})
        if route in ("nodes", "pods", "events", "leases"):
            if q.get("watch") in ("true", "1"):
                return self._watch(route, fields, labels, q)
            return self._list(route, fields, labels, q)
        if route in ("node", "pod", "lease", "podstatus"):
            kind = {"node": "nodes", "pod": "pods", "lease": "leases", "podstatus": "pods"}[route]
            key = f"{args['ns']}/{args['name']}" if "ns" in args else args["name"]
            obj = self.api.get(kind, key)
            if obj is None:
                return self._reply(404, _status(404, "NotFound", f'{kind} "{args["name"]}" not found',
                                                {"name": args["name"], "kind": kind}))
            return self._reply(200, obj)
        self._reply(404, _status(404, "NotFound", f"the server could not find the requested resource ({self.path})"))

    def do_POST(self) -> None:  # noqa: N802
        route, args, extra, _ = self._route()
        try:
            body = self._body()
        except json.JSONDecodeError as exc:
            return self._reply(400, _status(400, "BadRequest", f"invalid JSON: {exc}"))
        if route == "binding":
            name = args.get("name") or (body.get("metadata") or {}).get("name", "")
            code, out = self.api._bind(args["ns"], name, body)
            return self._reply(code, out)
        if route == "events":
            if self.api.event_hook is not None:
                try:
                    self.api.event_hook(args["ns"], body)
                except InjectedError as exc:
                    return self._reply(exc.code, _status(exc.code, exc.reason, str(exc)))
            body.setdefault("metadata", {}).setdefault("namespace", args["ns"])
            if not body["metadata"].get("name"):
                body["metadata"]["name"] = (body["metadata"].get("generateName") or "event.") + uuid.uuid4().hex[:10]
            body.setdefault("apiVersion", extra)
            body.setdefault("kind", "Event")
            return self._reply(201, self.api._put("events", body))
        if route == "leases":
            code, out = self.api._create_lease(args["ns"], body)
            return self._reply(code, out)
        if route == "pods":
            ns = args.get("ns", "default")
            body.setdefault("metadata", {})["namespace"] = ns
            if self.api.get("pods", f"{ns}/{body['metadata'].get('name')}") is not None:
                return self._reply(409, _status(409, "AlreadyExists", f'pods "{body["metadata"].get("name")}" already exists'))
            return self._reply(201, self.api.add_pod(body))
        self._reply(404, _status(404, "NotFound", f"the server could not find the requested resource ({self.path})"))

    def do_PUT(self) -> None:  # noqa: N802
        route, args, _, _ = self._route()
        try:
            body = self._body()
        except json.JSONDecodeError as exc:
            return self._reply(400, _status(400, "BadRequest", f"invalid JSON: {exc}"))
        if route == "lease":
            code, out = self.api._replace_lease(args["ns"], args["name"], body)
            return self._reply(code, out)
        self._reply(405, _status(405, "MethodNotAllowed", f"PUT is not supported on {self.path}"))

    def do_PATCH(self) -> None:  # noqa: N802
        route, args, _, _ = self._route()
        try:
            body = self._body()
        except json.JSONDecodeError as exc:
            return self._reply(400, _status(400, "BadRequest", f"invalid JSON: {exc}"))
        if route == "podstatus":
            code, out = self.api._patch_status(args["ns"], args["name"], self.headers.get("Content-Type", ""), body)
            return self._reply(code, out)
        self._reply(405, _status(405, "MethodNotAllowed", f"PATCH is not supported on {self.path}"))

    def do_DELETE(self) -> None:  # noqa: N802
        route, args, _, _ = self._route()
        kind = {"node": "nodes", "pod": "pods", "lease": "leases"}.get(route)
        if kind is None:
            return self._reply(405, _status(405, "MethodNotAllowed", f"DELETE is not supported on {self.path}"))
        key = f"{args['ns']}/{args['name']}" if "ns" in args else args["name"]
        gone = self.api.delete(kind, key)
        if gone is None:
            return self._reply(404, _status(404, "NotFound", f'{kind} "{args["name"]}" not found'))
        self._reply(200, gone)

    def _list(self, kind: str, fields: list, labels: dict, q: dict[str, str]) -> None:
        """A list or one page of it (``limit``, ``continue``), with the API server's refusals."""
        limit_text, token = q.get("limit", ""), q.get("continue", "")
        if limit_text and not re.fullmatch(r"-?[0-9]+", limit_text):
            return self._reply(400, _status(400, "BadRequest", f"limit: invalid value {limit_text!r}"))
        if token and q.get("resourceVersion"):
            return self._reply(400, _status(400, "BadRequest", "specifying resource version is not allowed when using continue"))
        try:
            if self.api.list_hook is not None:
                self.api.list_hook(kind, dict(q))
            body = self.api._list_body(kind, fields, labels, int(limit_text or 0), token)
        except InjectedError as exc:
            return self._reply(exc.code, _status(exc.code, exc.reason, str(exc)))
        self._reply(200, body)

    # --- watch -----------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, kind: str, fields: list, labels: dict, q: dict[str, str]) -> None:
        api = self.api
        timeout = float(q.get("timeoutSeconds") or 300)
        deadline = time.monotonic() + timeout
        rv_text = q.get("resourceVersion") or ""
        if rv_text not in ("", "0") and not rv_text.isdigit():
            return self._reply(400, _status(400, "BadRequest", f"resourceVersion: invalid value {rv_text!r}"))
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        self._log(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        registered = False
        try:
            expired = None
            with api._lock:
                generation, closing_generation = api._watch_generation, api._close_generation
                if rv_text in ("", "0"):
                    # No version: synthetic ADDED events for the current state, then changes.
                    initial = [copy.deepcopy(o) for o in api._objects[kind].values() if _matches(o, fields, labels)]
                    since = api._rv
                else:
                    initial = []
                    since = int(rv_text)
                    if since < api._compacted_rv:
                        expired = _status(410, "Expired", f"too old resource version: {since} ({api._compacted_rv})")
                if expired is None:
                    api._open_watches[kind] = api._open_watches.get(kind, 0) + 1
                    registered = True
                    api._lock.notify_all()
            if expired is not None:
                self._chunk(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                self._chunk(b"")
                return
            for obj in initial:
                self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            interval = api.bookmark_interval_s
            next_bookmark = time.monotonic() + interval if bookmarks and interval else None
            while True:
                bookmark = False
                with api._lock:
                    if api._hold(urlsplit(self.path).path):
                        self.close_connection = True  # a dead connection: it ends with no last chunk
                        return
                    if api._stopping or api._watch_generation != generation:
                        break  # expired watches end before sending anything newer than the expiry
                    if since < api._dropped_rv.get(kind, 0):
                        # events of this kind this watch had not sent yet were compacted away
                        expired = _status(410, "Expired", f"too old resource version: {since} ({api._dropped_rv[kind]})")
                        break
                    pending = [h for h in api._history if h[0] > since and h[1] == kind]
                    now_t = time.monotonic()
                    ending = now_t >= deadline or api._close_generation != closing_generation
                    if next_bookmark is not None and now_t >= next_bookmark:
                        bookmark = True
                        next_bookmark = now_t + interval
                    if not (pending or ending or bookmark):
                        wake = min(deadline, next_bookmark) if next_bookmark is not None else deadline
                        api._lock.wait(min(wake - now_t, 0.5))
                        continue
                    # Everything up to the current version has been looked at: events of other
                    # kinds do not concern this watch, and a bookmark may carry this version.
                    since = api._rv
                lines = []
                for _, _, etype, old, new in pending:
                    was = _matches(old, fields, labels) if etype != "ADDED" else False
                    now = _matches(new, fields, labels) if etype != "DELETED" else False
                    if etype == "DELETED":
                        out = "DELETED" if _matches(old, fields, labels) else None
                    elif was and now:
                        out = "MODIFIED"
                    elif now:
                        out = "ADDED"
                    elif was:
                        out = "DELETED"
                    else:
                        out = None
                    if out:
                        lines.append(json.dumps({"type": out, "object": new}).encode() + b"\n")
                if bookmarks and (bookmark or ending):
                    # As the API server does before a watch ends at timeoutSeconds (and now and
                    # then): the version the client may resume from, and nothing else.
                    lines.append(json.dumps({"type": "BOOKMARK", "object": _bookmark_object(kind, since)}).encode() + b"\n")
                for line in lines:
                    self._chunk(line)
                if ending:
                    break
            if expired is not None:
                self._chunk(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if registered:
                with api._lock:
                    api._open_watches[kind] -= 1
                    api._lock.notify_all()


# --- object builders for tests and demos -------------------------------------------------------


def make_node(name: str, cpu: str = "8", memory: str = "32Gi", *, zone: str | None = None, region: str | None = None,
              gpus: int = 0, gpu_model: str = "", labels: dict[str, str] | None = None,
              taints: list[dict[str, str]] | None = None, pods: str = "110", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A v1.Node as the API returns it."""
    lab = {"kubernetes.io/hostname": name, **(labels or {})}
    if zone:
        lab["topology.kubernetes.io/zone"] = zone
    if region:
        lab["topology.kubernetes.io/region"] = region
    if gpu_model:
        lab["nvidia.com/gpu.product"] = gpu_model
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab},
                            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}
    if annotations:
        node["metadata"]["annotations"] = dict(annotations)
    if taints:
        node["spec"]["taints"] = taints
    return node


def make_pod(name: str, cpu: str | None = "500m", memory: str | None = "512Mi", *, namespace: str = "default",
             scheduler: str = "default-scheduler", node: str | None = None, gpus: int = 0,
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             node_selector: dict[str, str] | None = None, tolerations: list[dict[str, str]] | None = None,
             affinity: dict[str, Any] | None = None, priority: int | None = None,
             ports: list[dict[str, Any]] | None = None,
             topology_spread: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A v1.Pod as the API returns it (one container, with ``ports``: v1.ContainerPort objects,
    ``{"containerPort": 80, "hostPort": 8080}``; ``topology_spread``: its
    ``topologySpreadConstraints``)."""
    req: dict[str, str] = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": req}}
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if ports:
        container["ports"] = [{"protocol": "TCP", **p} for p in ports]  # the API server defaults the protocol
    spec: dict[str, Any] = {"containers": [container], "schedulerName": scheduler}
    if topology_spread:
        spec["topologySpreadConstraints"] = topology_spread
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    if priority is not None:
        spec["priority"] = priority
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


# --- kube-scheduler's side of the extender protocol -------------------------------------------


class ExtenderError(Exception):
    """What kube-scheduler's ``HTTPExtender`` returns as an error (non-200, ``Error`` set, a bad reply)."""


class FitError(Exception):
    """No node passed the filters (kube's ``FitError``); ``statuses`` maps node -> reasons."""

    def __init__(self, statuses: dict[str, list[str]]) -> None:
        self.statuses = statuses
        super().__init__(f"0/{len(statuses)} nodes are available: {statuses}")


MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10


class HTTPExtenderClient:
    """kube-scheduler's ``HTTPExtender`` (``pkg/scheduler/extender.go``) in Python, for tests:
    sends ``ExtenderArgs`` with ``Nodes`` or ``NodeNames`` by ``node_cache_capable``, checks the
    reply the way kube does (a name not in the request is an error) and applies ``weight``,
    ``managedResources`` (``IsInterested``) and ``ignorable``."""

    def __init__(self, url_prefix: str, filter_verb: str = "filter", prioritize_verb: str = "prioritize",
                 bind_verb: str = "", preempt_verb: str = "", weight: int = 1, node_cache_capable: bool = False,
                 managed_resources: tuple[str, ...] = (), ignorable: bool = False, timeout_s: float = 5.0) -> None:
        self.url_prefix = url_prefix.rstrip("/")
        self.filter_verb, self.prioritize_verb, self.bind_verb, self.preempt_verb = filter_verb, prioritize_verb, bind_verb, preempt_verb
        self.weight = weight
        self.node_cache_capable = node_cache_capable
        self.managed_resources = set(managed_resources)
        self.ignorable = ignorable
        self.timeout_s = timeout_s
        import urllib.parse

        parts = urllib.parse.urlsplit(self.url_prefix)
        self._host, self._port, self._path = parts.hostname, parts.port, parts.path
        self._local = threading.local()

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        if not self.managed_resources:
            return True
        spec = pod.get("spec") or {}
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            res = c.get("resources") or {}
            if self.managed_resources & (set(res.get("requests") or {}) | set(res.get("limits") or {})):
                return True
        return False

    def is_binder(self) -> bool:
        return bool(self.bind_verb)

    def _conn(self) -> Any:
        import http.client

        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def send(self, verb: str, args: Any) -> Any:
        body = json.dumps(args).encode()
        for attempt in (0, 1):  # one reconnect when a kept-alive connection was closed by the server
            conn = self._conn()
            try:
                conn.request("POST", f"{self._path}/{verb}", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                break
            except (ConnectionError, OSError) as exc:
                conn.close()
                self._local.conn = None
                if attempt:
                    raise ExtenderError(f"{verb} with extender at URL {self.url_prefix}: {exc}") from exc
        if resp.status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {self.url_prefix}, code {resp.status}")
        return json.loads(data)

    def _args(self, pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
        if self.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}

    def filter(self, pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
        if not self.filter_verb:
            return nodes, {}, {}
        result = self.send(self.filter_verb, self._args(pod, nodes))
        if result.get("Error"):
            raise ExtenderError(result["Error"])
        by_name = {n["metadata"]["name"]: n for n in nodes}
        if self.node_cache_capable and result.get("NodeNames") is not None:
            out = []
            for name in result["NodeNames"]:
                if name not in by_name:
                    raise ExtenderError(f"extender {self.url_prefix!r} claims a filtered node {name!r} which is not found in the input node list")
                out.append(by_name[name])
        elif result.get("Nodes") is not None:
            out = list(result["Nodes"].get("items") or [])
        else:
            out = []
        return out, dict(result.get("FailedNodes") or {}), dict(result.get("FailedAndUnresolvableNodes") or {})

    def prioritize(self, pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        if not self.prioritize_verb:
            return [{"Host": n["metadata"]["name"], "Score": 0} for n in nodes], 0
        return self.send(self.prioritize_verb, self._args(pod, nodes)), self.weight

    def bind(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod.get("metadata") or {}
        result = self.send(self.bind_verb, {"PodName": meta.get("name"), "PodNamespace": meta.get("namespace", "default"),
                                            "PodUID": meta.get("uid", ""), "Node": node})
        if result.get("Error"):
            raise ExtenderError(result["Error"])


def schedule_with_extenders(pod: Mapping[str, Any], nodes: list[dict[str, Any]], extenders: list[Any],
                            in_tree_scores: dict[str, int] | None = None) -> str:
    """kube-scheduler's extender steps for one pod: ``findNodesThatPassExtenders`` (interested
    extenders in order, an error fails the pod unless the extender is ignorable, failed nodes
    collected with their reasons), the extender part of ``prioritizeNodes`` (errors ignored,
    ``score * weight``, scaled by MaxNodeScore / MaxExtenderPriority) and ``selectHost`` (highest
    total; the first of equals here, where kube picks one of them at random). Then the first
    interested binder binds. Returns the node."""
    feasible = list(nodes)
    statuses: dict[str, list[str]] = {}
    for ext in extenders:
        if not feasible:
            break
        if not ext.is_interested(pod):
            continue
        try:
            feasible, failed, unresolvable = ext.filter(pod, feasible)
        except ExtenderError:
            if ext.ignorable:
                continue
            raise
        for name, msg in unresolvable.items():
            statuses.setdefault(name, []).append(msg)
        for name, msg in failed.items():
            if name not in unresolvable:
                statuses.setdefault(name, []).append(msg)
    if not feasible:
        raise FitError(statuses)
    totals = {n["metadata"]["name"]: (in_tree_scores or {}).get(n["metadata"]["name"], 0) for n in feasible}
    for ext in extenders:
        if not ext.is_interested(pod):
            continue
        try:
            prioritized, weight = ext.prioritize(pod, feasible)
        except ExtenderError:
            continue  # prioritization errors are ignored; other extenders decide
        for hp in prioritized:
            if hp["Host"] in totals:
                totals[hp["Host"]] += hp["Score"] * weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
    host = max(totals, key=lambda n: totals[n])
    for ext in extenders:
        if ext.is_binder() and ext.is_interested(pod):
            ext.bind(pod, host)
            break
    return host


def self_signed_cert(directory: str | Path, names: tuple[str, ...] = ("localhost",)) -> tuple[Path, Path]:
    """A self-signed certificate and key (PEM) for local webhook runs and tests (needs ``cryptography``).
    The certificate is its own CA: pass it as ``caBundle`` / ``cafile``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = d / "tls.crt", d / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def main(argv: list[str] | None = None) -> int:
    """``python -m iro_fed.k8s.testing [--kubeconfig F] [--nodes N]``: run the loopback API server
    (on a free port of 127.0.0.1, written to the kubeconfig) with N demo nodes, for trying the
    extender, the webhook and the scheduler locally."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m iro_fed.k8s.testing", description=main.__doc__)
    parser.add_argument("--kubeconfig", default="iro-fake.kubeconfig", help="where to write the kubeconfig")
    parser.add_argument("--nodes", type=int, default=4, help="demo nodes in two zones (default 4)")
    args = parser.parse_args(argv)
    if args.nodes < 0:
        parser.error(f"--nodes: must be >= 0, got {args.nodes}")
    server = FakeApiServer().start()
    for i in range(args.nodes):
        server.add_node(make_node(f"node-{i}", cpu="8", memory="32Gi", zone=f"zone-{i % 2}"))
    path = server.write_kubeconfig(args.kubeconfig)
    print(f"loopback API server on {server.url}; kubeconfig: {path}", flush=True)
    with SignalEvent() as stop:  # threading.Event's set() can deadlock in a handler (iro_fed.signal_event)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    server.stop()
    return 0


def _tracked(handler: Callable[[_Handler], None]) -> Callable[[_Handler], None]:
    """Count a write as in flight from its first byte to its logged reply."""

    def run(self: _Handler) -> None:
        with self.api._lock:
            self.api._writes_in_flight += 1
        try:
            handler(self)
        finally:
            with self.api._lock:
                self.api._writes_in_flight -= 1
                self.api._lock.notify_all()

    run.__name__ = handler.__name__
    return run


for _verb in ("do_POST", "do_PUT", "do_PATCH", "do_DELETE"):
    setattr(_Handler, _verb, _tracked(getattr(_Handler, _verb)))


def _stallable(handler: Callable[[_Handler], None]) -> Callable[[_Handler], None]:
    """Hold a request that :meth:`FakeApiServer.stall` matches, never answered (outside
    the write tracking: a held write is no write in flight that ``requests_to`` should wait for)."""

    def run(self: _Handler) -> None:
        with self.api._lock:
            held = self.api._hold(urlsplit(self.path).path)
        if held:
            self.close_connection = True
            return
        handler(self)

    run.__name__ = handler.__name__
    return run


for _verb in ("do_GET", "do_POST", "do_PUT", "do_PATCH", "do_DELETE"):
    setattr(_Handler, _verb, _stallable(getattr(_Handler, _verb)))


# Last: under ``python -m`` the module runs top to bottom, and main() must find the handler's
# write tracking patched in above (it ran before it, so writes in flight went uncounted).
if __name__ == "__main__":
    raise SystemExit(main())
