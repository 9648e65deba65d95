"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

Standard library only (urllib), so the perception layer needs no extra. Every call has a
timeout; failures raise :class:`PrometheusUnavailable` (cannot reach the server, HTTP 5xx,
timeout) or :class:`PrometheusQueryError` (the server answered that the query is wrong), each
with the URL and, for query errors, Prometheus's own ``errorType`` and ``error``.
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any


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

    ``base_url`` is the server root (``http://127.0.0.1:9090``); ``timeout_s`` bounds every
    request on the client side and is also sent as the query's ``timeout`` so the server gives
    up at the same time.
    """

    def __init__(self, base_url: str, timeout_s: float = 5.0) -> None:
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"prometheus url: expected http(s)://host:port, got {base_url!r}")
        if not timeout_s > 0:
            raise ValueError(f"prometheus timeout_s: must be > 0, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)

    def __repr__(self) -> str:
        return f"PrometheusClient({self.base_url!r}, timeout_s={self.timeout_s})"

    # --- raw API ---------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:  # noqa: S310 - http(s) checked above
                body = resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            if exc.code >= 500 or exc.code == 429:
                raise PrometheusUnavailable(f"{url}: HTTP {exc.code} {_error_text(body)}") from exc
            raise PrometheusQueryError(f"{url}: HTTP {exc.code} {_error_text(body)}") from exc
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
            with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=self.timeout_s) as resp:  # noqa: S310
                return resp.status == 200
        except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException):
            return False


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and "error" in doc:
            return f"{doc.get('errorType', 'error')}: {doc['error']}"
    except ValueError:
        pass
    return body[:200].decode("utf-8", "replace").strip()
