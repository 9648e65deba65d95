"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

Standard library only (urllib), so the perception layer needs no extra. Every request is
bounded three ways: ``timeout_s`` for each blocking step (connect, each read), ``deadline_s``
for the whole request (default twice ``timeout_s``: a server that trickles its answer a byte at
a time is cut off), and ``max_bytes`` for the answer (default :data:`DEFAULT_MAX_BYTES`, 32 MiB:
a huge answer is refused, not read into memory). Failures raise :class:`PrometheusUnavailable`
(cannot reach the server, HTTP 5xx, timeout, deadline) or :class:`PrometheusQueryError` (the
server answered that the query is wrong, answered nonsense, or answered more than ``max_bytes``),
each with the URL and, for query errors, Prometheus's own ``errorType`` and ``error``.

Authentication as Prometheus's own clients do it: ``http://user:pass@host:9090`` sends HTTP Basic
auth (the user info is taken out of the URL: urllib would send it as part of the host) and the
password is shown as ``***`` in every message and repr; ``bearer_token_file`` sends
``Authorization: Bearer`` with the file's content, read for each request (Kubernetes rotates a
projected service account token in place). Neither is sent on to where a redirect points.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

#: The largest answer read by default (``max_bytes``): a snapshot's queries over 20,000 nodes
#: answer a few MiB; more is a query that matches far too much, or not Prometheus.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
_ERROR_BODY_BYTES = 64 * 1024  # of an error answer, only the message is read
_CHUNK = 64 * 1024
#: The longest ``timeout_s`` / ``deadline_s``: Prometheus reads the ``timeout`` parameter as float
#: seconds into int64 nanoseconds (web/api/v1 parseDuration), so 1e10 s was a 400 on every query,
#: and a socket timeout past ~9.2e9 s overflows. 1e9 s (31 years) is "no timeout" anyway.
MAX_TIMEOUT_S = 1e9


class PrometheusError(Exception):
    """Base of the errors of :class:`PrometheusClient`."""


class PrometheusUnavailable(PrometheusError):
    """The server could not be reached, timed out or failed (5xx): worth retrying with backoff."""


class PrometheusQueryError(PrometheusError):
    """The server rejected the query (HTTP 400/422 with ``status: error``) or answered nonsense."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels and value (NaN stays NaN)."""

    labels: dict[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and (timestamp, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info shown as ``***`` (for messages and reprs)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not splittable ("http://[::1"): hide whatever could be a password
        return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _float(text: Any) -> float:
    # Prometheus encodes sample values as strings, including "NaN", "+Inf", "-Inf".
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _seconds(x: float) -> str:
    """A duration parameter (``timeout``, ``step``) as plain seconds: Prometheus reads a float
    ("0.5", "1e-05") or a duration of whole units ("2s", "500ms"), so "0.5s" or "1.5s" (what
    ``f"{x:g}s"`` gave) is a 400 bad_data on every query, and ``:g`` kept only 6 digits."""
    return repr(float(x))


def _point(pair: Any, promql: str) -> tuple[float, float]:
    """One ``[<unix_time>, "<value>"]`` pair of a result; anything else is a PrometheusQueryError."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        raise PrometheusQueryError(f"query {promql!r}: expected a [time, value] pair, got {str(pair)[:100]}")
    try:
        ts = float(pair[0])
    except (TypeError, ValueError):
        raise PrometheusQueryError(f"query {promql!r}: not a timestamp: {str(pair[0])[:100]}") from None
    return ts, _float(pair[1])


def _labels(item: Any, promql: str) -> dict[str, str]:
    metric = item.get("metric", {}) if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        raise PrometheusQueryError(f"query {promql!r}: expected a series object with labels, got {str(item)[:100]}")
    return {str(k): str(v) for k, v in metric.items()}


class PrometheusClient:
    """Queries one Prometheus server.

    ``base_url`` is the server root (``http://127.0.0.1:9090``); ``timeout_s`` bounds each
    blocking step of a request on the client side and is also sent as the query's ``timeout`` so
    the server gives up at the same time; ``deadline_s`` (default ``2 * timeout_s``: the server's
    time, then as long again to send the answer) bounds a whole request, and ``max_bytes``
    (default :data:`DEFAULT_MAX_BYTES`) the answer's size. User info in ``base_url``
    (``user:pass@``) is sent as HTTP Basic auth; ``bearer_token_file`` (not with it) as a bearer
    token read for each request.
    """

    def __init__(self, base_url: str, timeout_s: float = 5.0, deadline_s: float | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, bearer_token_file: str | None = None) -> None:
        parsed = None
        if isinstance(base_url, str):
            try:
                parsed = urllib.parse.urlsplit(base_url)
                _ = parsed.port  # a port out of range raises too
            except ValueError:  # e.g. an unclosed IPv6 bracket: "http://[::1"
                parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
            shown = redact_url(base_url) if isinstance(base_url, str) else base_url
            raise ValueError(f"prometheus url: expected http(s)://host:port, got {shown!r}")
        if not _positive(timeout_s) or timeout_s > MAX_TIMEOUT_S:
            raise ValueError(f"prometheus timeout_s: must be > 0 and at most {MAX_TIMEOUT_S:g} s, got {timeout_s!r}")
        if deadline_s is not None and (not _positive(deadline_s) or deadline_s > MAX_TIMEOUT_S):
            raise ValueError(f"prometheus deadline_s: must be a number of seconds > 0 and at most {MAX_TIMEOUT_S:g}, "
                             f"got {deadline_s!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"prometheus max_bytes: must be an integer >= 1, got {max_bytes!r}")
        self._authorization: str | None = None
        if parsed.username is not None or parsed.password is not None:
            if bearer_token_file is not None:
                raise ValueError("prometheus bearer_token_file: not with a user and password in the url (one or the other)")
            user = urllib.parse.unquote(parsed.username or "")
            password = urllib.parse.unquote(parsed.password or "")
            self._authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            # The shown URL keeps the user (so that errors say who was refused), never the password.
            self._shown_user = f"{parsed.username or ''}:***@" if parsed.password is not None else f"{parsed.username}@"
            base_url = urllib.parse.urlunsplit(parsed._replace(netloc=parsed.netloc.rpartition("@")[2]))
        else:
            self._shown_user = ""
        self.bearer_token_file = bearer_token_file
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.deadline_s = 2.0 * self.timeout_s if deadline_s is None else float(deadline_s)
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        scheme, _, rest = self.base_url.partition("://")
        shown = f"{scheme}://{self._shown_user}{rest}"
        token = f", bearer_token_file={self.bearer_token_file!r}" if self.bearer_token_file else ""
        return (f"PrometheusClient({shown!r}, timeout_s={self.timeout_s}, deadline_s={self.deadline_s}, "
                f"max_bytes={self.max_bytes}{token})")

    def _request(self, url: str) -> urllib.request.Request:
        req = urllib.request.Request(url)
        authorization = self._authorization
        if self.bearer_token_file is not None:
            try:
                with open(self.bearer_token_file, encoding="utf-8") as f:  # each time: a rotated token is read anew
                    token = f.read().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise PrometheusUnavailable(f"prometheus bearer_token_file {self.bearer_token_file!r}: cannot read "
                                            f"it: {exc}") from None
            if not token or any(c in token for c in "\r\n"):
                raise PrometheusUnavailable(f"prometheus bearer_token_file {self.bearer_token_file!r}: "
                                            "empty or more than one line")
            authorization = f"Bearer {token}"
        if authorization is not None:
            # Unredirected: urllib would copy a plain header to wherever a redirect points.
            req.add_unredirected_header("Authorization", authorization)
        return req

    def _fetch(self, url: str, limit: int) -> tuple[int, bytes]:
        """(status, body) of one GET, whatever the status, within the deadline and ``limit`` bytes.
        Raises the errors of :meth:`_get` for what is not an answer."""
        deadline = _Deadline(self.deadline_s)
        opener = urllib.request.build_opener(_WatchedHandler(deadline))
        try:
            try:
                resp = opener.open(self._request(url), timeout=min(self.timeout_s, self.deadline_s))
            except urllib.error.HTTPError as exc:
                # The message is all that is read of an error answer: a huge one is cut, not refused.
                fp = getattr(exc, "fp", None)
                try:
                    body = b"" if fp is None else _read_capped(fp, url, min(limit, _ERROR_BODY_BYTES), deadline, cut=True)
                finally:
                    exc.close()
                return exc.code, body
            with resp:
                return resp.status, _read_capped(resp, url, limit, deadline)
        except PrometheusError:
            raise
        except Exception as exc:
            if deadline.expired:  # the watchdog closed the socket: whatever broke, it was the deadline
                raise PrometheusUnavailable(f"{url}: no complete answer within the {self.deadline_s:g} s "
                                            f"deadline (deadline_s)") from exc
            raise
        finally:
            deadline.cancel()

    # --- raw API ---------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            status, body = self._fetch(url, self.max_bytes)
            if status >= 500 or status == 429:
                raise PrometheusUnavailable(f"{url}: HTTP {status} {_error_text(body)}")
            if status >= 400:
                raise PrometheusQueryError(f"{url}: HTTP {status} {_error_text(body)}")
        except TimeoutError as exc:
            raise PrometheusUnavailable(f"{url}: no answer within {self.timeout_s:g} s") from exc
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise PrometheusUnavailable(f"{url}: no answer within {self.timeout_s:g} s") from exc
            raise PrometheusUnavailable(f"{url}: cannot connect: {reason}") from exc
        except (ConnectionError, OSError) as exc:
            raise PrometheusUnavailable(f"{url}: {exc}") from exc
        except http.client.HTTPException as exc:
            # Not OSErrors: a peer that does not speak HTTP (BadStatusLine), one that closed the
            # connection mid-answer (IncompleteRead), too many headers.
            raise PrometheusUnavailable(f"{url}: broken HTTP answer: {type(exc).__name__}: {str(exc).strip()[:200]}") from exc
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise PrometheusQueryError(f"{url}: the answer is not JSON: {body[:200]!r}") from exc
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise PrometheusQueryError(f"{url}: {_error_text(body)}")
        return doc.get("data")

    def query(self, promql: str, time: float | None = None) -> list[Sample]:
        """An instant query; returns the vector (a scalar comes back as one unlabeled sample)."""
        data = self._get("/api/v1/query", {"query": promql, "time": time, "timeout": _seconds(self.timeout_s)})
        kind = data.get("resultType") if isinstance(data, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        if kind == "vector" and isinstance(result, list):
            out = []
            for item in result:
                labels = _labels(item, promql)
                # A native histogram sample has "histogram", not "value": no float value (NaN).
                ts, val = _point(item["value"], promql) if "value" in item else (math.nan, math.nan)
                out.append(Sample(labels, val, ts))
            return out
        if kind == "scalar" and isinstance(result, list):
            ts, val = _point(result, promql)
            return [Sample({}, val, ts)]
        raise PrometheusQueryError(f"query {promql!r}: expected an instant vector or scalar, got {kind!r}")

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[Series]:
        """A range query from ``start`` to ``end`` (unix seconds) every ``step_s`` seconds."""
        if not step_s > 0:
            raise ValueError(f"step_s: must be > 0, got {step_s!r}")
        if end < start:
            raise ValueError(f"end ({end}) is before start ({start})")
        data = self._get(
            "/api/v1/query_range",
            {"query": promql, "start": start, "end": end, "step": _seconds(step_s), "timeout": _seconds(self.timeout_s)},
        )
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PrometheusQueryError(f"query_range {promql!r}: expected a matrix")
        out = []
        for item in result:
            labels = _labels(item, promql)
            values = item.get("values", [])
            if not isinstance(values, list):
                raise PrometheusQueryError(f"query_range {promql!r}: expected a list of values, got {str(values)[:100]}")
            out.append(Series(labels, [_point(pair, promql) for pair in values]))
        return out

    def ready(self) -> bool:
        """True when the server answers ``/-/ready`` with 200."""
        try:
            return self._fetch(f"{self.base_url}/-/ready", _ERROR_BODY_BYTES)[0] == 200
        except (PrometheusError, urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException):
            return False


def _positive(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


class _Deadline:
    """A request's overall deadline: when it passes, the request's sockets are shut down, so a
    read blocked on a server that trickles (each byte within the socket timeout) returns at once."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if not self.expired:
                return
        _shutdown(sock)  # connected after the deadline passed

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class _Watched:
    """A connection whose socket the request's :class:`_Deadline` can shut down."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _WatchedHTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _WatchedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    # urllib's own handlers (proxies from the environment still apply), with watched connections;
    # a subclass of both, build_opener uses it in place of each.
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_WatchedHTTPConnection, req, deadline=self._deadline)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_WatchedHTTPSConnection, req, deadline=self._deadline)


def _read_capped(resp: Any, url: str, limit: int, deadline: _Deadline, cut: bool = False) -> bytes:
    """The body of ``resp``, at most ``limit`` bytes: more is a PrometheusQueryError (or, with
    ``cut``, the first ``limit`` bytes). Read a chunk at a time (``read1``: one socket read each),
    so neither a huge answer nor the deadline waits for the whole body."""
    declared = resp.headers.get("Content-Length", "") if getattr(resp, "headers", None) is not None else ""
    if not cut and declared.strip().isdigit() and int(declared) > limit:
        raise PrometheusQueryError(f"{url}: the answer is {int(declared)} bytes, more than the {limit} bytes read "
                                   "at most (max_bytes)")
    read = getattr(resp, "read1", resp.read)
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        if deadline.expired:
            raise TimeoutError("deadline")
        total += len(chunk)
        if total > limit:
            if cut:
                chunks.append(chunk[: len(chunk) - (total - limit)])
                break
            raise PrometheusQueryError(f"{url}: the answer is more than the {limit} bytes read at most (max_bytes)")
        chunks.append(chunk)
    if deadline.expired:  # the socket was shut down: what was read is cut short, not the answer
        raise TimeoutError("deadline")
    body = b"".join(chunks)
    if not cut and declared.strip().isdigit() and total < int(declared):  # read1 ends quietly at EOF
        raise http.client.IncompleteRead(body, int(declared) - total)
    return body


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and "error" in doc:
            return f"{doc.get('errorType', 'error')}: {doc['error']}"
    except ValueError:
        pass
    return body[:200].decode("utf-8", "replace").strip()
