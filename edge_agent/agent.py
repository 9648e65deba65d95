"""The edge agent: HTTP endpoints, background loops, and an orderly start and stop.

Threads:

* the HTTP server (stdlib ``ThreadingHTTPServer``, one thread per connection, at most
  ``listen.max_connections``): strict HTTP/1.1 framing (one digits-only ``Content-Length``, no
  ``Transfer-Encoding``: 400 / 411 and close, so no request can be smuggled in a body), bodies over
  ``listen.max_body_bytes`` 413 before a byte is read (no ``100 Continue`` for them), a deadline
  of ``listen.request_timeout_s`` for a request's line, headers and body together (408 and close),
  bodies parsed by :func:`iro_fed.k8s.httpjson.loads_strict` (400 naming the field), 405 with
  ``Allow``, JSON for every error, and one log line, not a traceback, when a client resets;
* ``collect``: psutil readings of the node every ``collect.interval_s`` into the gauges;
* ``perception`` (with ``prometheus.url``): a cluster snapshot every ``refresh_interval_s``;
  with ``prometheus.scoring`` ``usage`` / ``max`` the site's ``allocated`` follows observed usage
  (:func:`iro_fed.metrics.load_aware_problem`). When Prometheus fails the agent goes back to
  request-based scoring, says so in ``/readyz`` and ``iro_agent_dependency_up``, and retries
  with exponential backoff;
* ``policy`` (with ``policy.registry``): follows the registry's ``latest`` pointer, keeps the last
  good policy, retries with backoff when the registry is missing or a version is broken;
* ``supernode`` (with ``federated.enabled``): runs and restarts the site's Flower SuperNode, or
  checks an external one (:mod:`edge_agent.federation`); /recommend never waits on it.

:meth:`Agent.stop` (on SIGTERM / SIGINT) stops accepting connections, lets in-flight requests
finish (each is bounded by ``listen.request_timeout_s``), stops the loops and flushes the
experience store.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import solvers
from edge_agent.backoff import Backoff
from edge_agent.config import AgentConfig
from edge_agent.federation import SuperNodeSupervisor, policy_sample
from edge_agent.logs import LOGGER_NAME, event
from edge_agent.metrics import HANDLERS, AgentMetrics
from edge_agent.policy import PolicyLoadError, Ranker, RegistryPolicySource
from edge_agent.recommend import Recommender, add_discovered_nodes, empty_site, features, load_site
from edge_agent.store import ExperienceStore, Outcome, Transition
from edge_agent.workload import BadRequest
from iro_fed.k8s.httpjson import ConnectionLimit, DeadlineReader, JsonBodyError, loads_strict
from iro_fed.metrics.prometheus import PrometheusClient
from iro_fed.metrics.snapshot import ClusterSnapshot, build_snapshot, load_aware_problem
from iro_fed.model import Problem


@dataclass(frozen=True)
class SiteView:
    """The site's nodes (``site``, requests) and what /recommend ranks against (``cluster``:
    the same, or with observed usage when ``load_aware``); ``discovered`` nodes came from Prometheus."""

    site: Problem
    cluster: Problem
    load_aware: bool
    discovered: int


class Agent:
    """One edge agent (see the module docstring). ``start()``, then ``stop()``."""

    def __init__(self, cfg: AgentConfig, logger: logging.Logger | None = None) -> None:
        self.cfg = cfg
        self.log = logger or logging.getLogger(LOGGER_NAME)
        discover = cfg.prometheus.discover_nodes
        self.base_site: Problem = (
            load_site(cfg.problem, cfg.site, allow_empty=discover) if cfg.problem else empty_site(cfg.site)
        )
        self.discover_domain = cfg.site or (self.base_site.domains[0].name if self.base_site.domains else "")
        self._discovered: tuple = ()
        # What /recommend ranks against, swapped as a whole by the perception loop.
        self.view = SiteView(self.base_site, self.base_site, False, 0)
        self.recommender = Recommender(self.base_site, cfg.recommend.k)
        self.metrics = AgentMetrics(cfg.node_name, cfg.site or "all")
        self.store = ExperienceStore(cfg.store.path, cfg.store.max_rows) if cfg.store.path else None
        self.fallback = Ranker(solvers.make(cfg.recommend.fallback), "heuristic")
        self.solver = (
            Ranker(solvers.make(cfg.recommend.solver, **cfg.recommend.solver_params), "solver")
            if cfg.recommend.solver
            else None
        )
        self.policy = RegistryPolicySource(cfg.policy.registry) if cfg.policy.registry else None
        self.federation: SuperNodeSupervisor | None = None
        if cfg.federated.enabled:
            self.metrics.add_federated()
            self.federation = SuperNodeSupervisor(cfg.federated, self.metrics, cfg.store.path, self.log)
        # Decisions also recorded in the federated DQN's observation format (for the ClientApp).
        self.record_policy_samples = cfg.federated.enabled and cfg.federated.experience
        self.prometheus = PrometheusClient(cfg.prometheus.url, cfg.prometheus.timeout_s) if cfg.prometheus.url else None
        self.snapshot: ClusterSnapshot | None = None
        self.prometheus_state: dict[str, Any] = {"up": None, "last_error": None, "last_success": None}
        self.load_aware_nodes = 0
        self.local = None
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server: ThreadingHTTPServer | None = None
        self.started_at = time.time()

    # --- ranking -------------------------------------------------------------------------------

    def current_ranker(self) -> tuple[Ranker, dict[str, Any]]:
        """The policy if one is loaded, else the configured solver, else the fallback (with why)."""
        note: dict[str, Any] = {}
        if self.policy is not None:
            current = self.policy.current
            if current is not None:
                return current, note
            note["fallback_reason"] = f"no global policy loaded: {self.policy.last_error or 'registry not read yet'}"
        if self.solver is not None:
            return self.solver, note
        if self.policy is None:
            note["fallback_reason"] = "no policy registry or solver configured"
        return self.fallback, note

    def recommend(self, body: Any) -> dict[str, Any]:
        ranker, note = self.current_ranker()
        view = self.view
        cluster = view.cluster
        note["scoring"] = "usage" if view.load_aware else "requests"
        if self.cfg.prometheus.scoring != "requests" and not view.load_aware:
            why = ("the snapshot has no usage of the site's nodes" if self.prometheus_state["up"]
                   else "no usable snapshot (Prometheus unreachable)")
            note["scoring_note"] = f"prometheus.scoring={self.cfg.prometheus.scoring} but {why}: scoring with requests"
        start = time.perf_counter()
        try:
            rec = self.recommender.recommend(body, cluster, ranker, note)
        except BadRequest:
            raise
        except Exception as exc:
            if ranker.source != "policy":
                raise
            # A global policy that cannot rank this pod (a bug, a feature mismatch) must not cost the
            # reply: rank with the configured solver or the fallback, and say why.
            self.metrics.dependency_failures.labels("policy").inc()
            event(self.log, logging.ERROR, "policy failed to rank: using the fallback", version=ranker.version,
                  error=f"{type(exc).__name__}: {exc}")
            note["fallback_reason"] = f"policy {ranker.version} failed to rank: {type(exc).__name__}: {exc}"
            ranker = self.solver or self.fallback
            rec = self.recommender.recommend(body, cluster, ranker, note)
        elapsed = time.perf_counter() - start
        self.metrics.decision_latency.labels(ranker.source).observe(elapsed)
        self.metrics.decisions.labels(ranker.source, "ranked" if rec.top else "no_fit").inc()
        if self.store is not None and self.cfg.recommend.record and rec.top:
            t = Transition(
                workload=rec.doc["workload"],
                source=ranker.source,
                state=features(rec, rec.doc["k"]),
                action=0,
                candidates=[e["node"] for e in rec.doc["nodes"]],
                reward=float(rec.deltas[0]),
                policy_version=ranker.version,
                info={"scoring": note["scoring"], "solver": ranker.solver.name},
                policy_sample=self._policy_sample(rec),
            )
            self.store.record(t)
            rec.doc["decision_id"] = t.decision_id
        return rec.doc

    def _policy_sample(self, rec: Any) -> Any:
        if not self.record_policy_samples:
            return None
        try:
            return policy_sample(rec, self.cfg.federated.observation_k)
        except Exception as exc:  # a sample is a bonus: never fail the reply for it
            event(self.log, logging.WARNING, "no policy sample for the decision", error=f"{type(exc).__name__}: {exc}")
            return None

    def record_outcome(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("body", "expected a JSON object")
        did = body.get("decision_id")
        if not isinstance(did, str) or not did:
            raise BadRequest("decision_id", "required: the decision_id of a /recommend reply")
        observed = body.get("observed", {})
        if not isinstance(observed, dict):
            raise BadRequest("observed", f"expected an object, got {type(observed).__name__}")
        node = body.get("node")
        if node is not None and not isinstance(node, str):
            raise BadRequest("node", f"expected a node name, got {type(node).__name__}")
        if self.store is None:
            raise BadRequest("", "this agent has no experience store (store.path is not set)")
        self.store.record(outcome=Outcome(did, observed, node))
        return {"recorded": True, "decision_id": did}

    # --- readiness -----------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        ranker, note = self.current_ranker()
        view = self.view
        ready = not self.stopping.is_set() and view.site.num_nodes > 0
        degraded = []
        if view.site.num_nodes == 0:
            degraded.append("the site has no nodes yet (waiting for Prometheus to report some)")
        prom: dict[str, Any] = {"configured": self.prometheus is not None}
        if self.prometheus is not None:
            prom.update(self.prometheus_state)
            prom["url"] = self.prometheus.base_url
            if self.prometheus_state["up"] is None:
                degraded.append("prometheus not read yet: scoring with requests")
            elif self.prometheus_state["up"] is False:
                degraded.append("prometheus unreachable: scoring with requests")
        if note.get("fallback_reason"):
            degraded.append(note["fallback_reason"])
        federation = None
        if self.federation is not None:
            federation = self.federation.status()
            why = self.federation.degradation(federation)
            if why:
                degraded.append(why)
        doc = {
            "ready": ready,
            "status": "stopping" if self.stopping.is_set() else ("degraded" if degraded else "ok"),
            "degraded": degraded,
            "site": self.cfg.site or None,
            "node": self.cfg.node_name,
            "nodes": view.site.num_nodes,
            "discovered_nodes": view.discovered,
            "scoring": "usage" if view.load_aware else "requests",
            "scoring_setting": self.cfg.prometheus.scoring,
            "load_aware_nodes": self.load_aware_nodes,
            "prometheus": prom,
            "ranking": {"source": ranker.source, "solver": ranker.solver.name, "version": ranker.version},
            "policy_registry": None
            if self.policy is None
            else {"path": str(self.policy.registry), "last_error": self.policy.last_error, "last_check": self.policy.last_check},
            "store": None
            if self.store is None
            else {"path": str(self.store.path), "written": self.store.written, "last_error": self.store.last_error},
            "federation": federation,
        }
        return ready, doc

    def federation_status(self) -> dict[str, Any]:
        """``GET /federation``: the SuperNode's state (``enabled: false`` without ``federated.enabled``)."""
        if self.federation is None:
            return {"enabled": False}
        return {"enabled": True, **self.federation.status()}

    # --- loops ---------------------------------------------------------------------------------

    def _loop(self, name: str, interval: float, step: Callable[[], None], first_delay: float = 0.0) -> None:
        """Run ``step`` every ``interval`` s; after a failure wait with exponential backoff."""
        backoff = Backoff(self.cfg.backoff.initial_s, self.cfg.backoff.max_s)
        delay = first_delay
        while not self.stopping.wait(delay):
            try:
                step()
            except Exception as exc:  # every failure of a dependency: log, count, back off
                delay = backoff.next_delay()
                self.metrics.dependency_up.labels(name).set(0)
                self.metrics.dependency_failures.labels(name).inc()
                event(self.log, logging.WARNING, f"{name} failed", dependency=name, error=f"{type(exc).__name__}: {exc}",
                      retry_in_s=round(delay, 3), failures=backoff.failures)
                continue
            if backoff.failures:
                event(self.log, logging.INFO, f"{name} recovered", dependency=name, after_failures=backoff.failures)
            backoff.reset()
            self.metrics.dependency_up.labels(name).set(1)
            delay = interval

    def _collect_step(self) -> None:
        assert self.local is not None
        self.metrics.set_local(self.local.collect())
        if self.store is not None:
            self.metrics.experience_rows.set(self.store.written)

    def _perception_step(self) -> None:
        assert self.prometheus is not None
        try:
            snap = build_snapshot(self.prometheus, self.cfg.prometheus.queries)
        except Exception as exc:
            view = self.view
            if view.load_aware:
                event(self.log, logging.WARNING, "prometheus failed: back to request-based scoring", error=str(exc))
            # Discovered nodes stay (with nothing allocated): their requests are unknown.
            self.view = SiteView(view.site, view.site, False, view.discovered)
            self.load_aware_nodes = 0
            self.metrics.load_aware.set(0)
            self.prometheus_state.update(up=False, last_error=f"{type(exc).__name__}: {exc}")
            raise
        self.snapshot = snap
        site = self.view.site
        if self.cfg.prometheus.discover_nodes:
            site, key = add_discovered_nodes(self.base_site, snap, self.discover_domain)
            if key == self._discovered:
                site = self.view.site  # unchanged: keep the problem (and its caches)
            else:
                event(self.log, logging.INFO, "site nodes from Prometheus", discovered=[k[0] for k in key][:50],
                      count=len(key))
                self._discovered = key
        cluster, used = load_aware_problem(site, snap, self.cfg.prometheus.scoring)
        self.view = SiteView(site, cluster, cluster is not site, len(self._discovered))
        self.load_aware_nodes = used
        self.metrics.load_aware.set(1 if cluster is not site else 0)
        self.prometheus_state.update(up=True, last_error=None, last_success=snap.taken_at)

    def _policy_step(self) -> None:
        assert self.policy is not None
        try:
            changed = self.policy.poll()
        except PolicyLoadError:
            self._set_policy_info()
            raise
        if changed:
            current = self.policy.current
            event(self.log, logging.INFO, "policy loaded", version=current.version if current else None)
        self._set_policy_info()

    def _set_policy_info(self) -> None:
        ranker, _ = self.current_ranker()
        self.metrics.policy_info.clear()
        self.metrics.policy_info.labels(ranker.source, ranker.version or "").set(1)

    # --- start / stop --------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        self.server = _Server((cfg.listen.host, cfg.listen.port), _Handler)
        self.server.max_connections = cfg.listen.max_connections
        self.server.agent = self  # type: ignore[attr-defined]
        self._set_policy_info()
        from iro_fed.metrics.local import LocalCollector

        self.local = LocalCollector()  # primes the CPU reading; the first sample comes after first_delay
        loops = [("local_metrics", cfg.collect.interval_s, self._collect_step, min(0.5, cfg.collect.interval_s))]
        if self.prometheus is not None:
            self.metrics.dependency_up.labels("prometheus").set(0)
            loops.append(("prometheus", cfg.prometheus.refresh_interval_s, self._perception_step, 0.0))
        if self.policy is not None:
            self.metrics.dependency_up.labels("policy_registry").set(0)
            loops.append(("policy_registry", cfg.policy.poll_interval_s, self._policy_step, 0.0))
        for name, interval, step, first in loops:
            t = threading.Thread(target=self._loop, args=(name, interval, step, first), name=f"loop-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True)
        t.start()
        self._http_thread = t
        if self.federation is not None:
            self.federation.start()
        event(self.log, logging.INFO, "edge agent started", host=cfg.listen.host, port=self.port, site=cfg.site or None,
              node=cfg.node_name, nodes=self.base_site.num_nodes, prometheus=cfg.prometheus.url or None,
              registry=str(cfg.policy.registry) if cfg.policy.registry else None, solver=cfg.recommend.solver or None,
              federated=cfg.federated.mode if cfg.federated.enabled else None)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def stop(self) -> None:
        """Stop serving, finish in-flight requests, stop the loops, flush the store."""
        if self.stopping.is_set() and self.server is None:
            return
        self.stopping.set()
        event(self.log, logging.INFO, "edge agent stopping")
        if self.server is not None:
            self.server.shutdown()  # no new connections
            self.server.close_idle_reads()  # no new requests on open ones
            self.server.server_close()  # joins the request threads still running
            self._http_thread.join(self.cfg.shutdown_timeout_s)
            self.server = None
        for t in self._threads:
            t.join(self.cfg.shutdown_timeout_s)
        if self.federation is not None:
            self.federation.stop()
        if self.store is not None:
            self.store.close(self.cfg.shutdown_timeout_s)
        event(self.log, logging.INFO, "edge agent stopped", experience_written=self.store.written if self.store else 0)


POST_HANDLERS = ("recommend", "outcome")
# A method is a token (RFC 9110 5.6.2); anything else is not a request line.
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,20}")
# After an error reply to a request whose body was not read, at most this much of the body is
# read and dropped before the connection closes (see _Handler.finish).
_DRAIN_BYTES = 16 << 20
_DRAIN_S = 2.0


class _Server(ConnectionLimit, ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for in-flight requests
    block_on_close = True
    allow_reuse_address = True
    max_connections = 64  # bounded threads: more get 503 at once instead of queueing without limit
    busy_message = "too many connections (listen.max_connections)"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line instead of socketserver's traceback on stderr: a client that reset or
        closed the connection mid-request is news, not a crash of the agent."""
        exc = sys.exc_info()[1]
        agent: Agent = self.agent  # type: ignore[attr-defined]
        client = client_address[0] if isinstance(client_address, tuple) else str(client_address)
        if isinstance(exc, (ConnectionError, TimeoutError)):
            event(agent.log, logging.INFO, "client connection lost", client=client, error=f"{type(exc).__name__}: {exc}")
            return
        tb = exc.__traceback__ if exc is not None else None
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else None
        event(agent.log, logging.ERROR, "request handling failed", client=client,
              error=f"{type(exc).__name__}: {exc}", where=where)


class _Handler(BaseHTTPRequestHandler):
    server_version = "iro-edge-agent/0.1"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

    def setup(self) -> None:
        super().setup()
        timeout = self.agent.cfg.listen.request_timeout_s
        self.connection.settimeout(timeout)
        self.rfile.close()  # the plain reader of StreamRequestHandler: replaced by one with a deadline
        self._reader = DeadlineReader(self.connection, timeout)
        self.rfile = io.BufferedReader(self._reader)
        self._body_left = 0

    @property
    def agent(self) -> Agent:
        return self.server.agent  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        event(self.agent.log, logging.DEBUG, "http", client=self.client_address[0], request=format % args)

    # --- one request ---------------------------------------------------------------------------

    def handle_one_request(self) -> None:
        """The stdlib's loop step, plus: every method is routed (405 with ``Allow`` where it is not
        served), a request that does not arrive in time gets 408, every error reply is JSON."""
        self._reader.deadline = None  # until the next request's first byte: the idle timeout
        self._t0: float | None = None
        self._responded = False
        self._body_left = 0  # bytes of a declared body not read: the connection closes after the reply
        self.command, self.request_version, self.requestline, self.path = "", "", "", ""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            self._t0 = time.perf_counter()
            if len(self.raw_requestline) > 65536:
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG, "request line: over 65536 bytes")
                return
            if not self.parse_request():
                return  # an error reply has been sent (or the line was blank)
            self._serve()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True
            if self._reader.deadline is None or self._responded:
                return  # an idle keep-alive connection, or a client that does not read its reply
            timeout = self.agent.cfg.listen.request_timeout_s
            try:
                self.send_error(HTTPStatus.REQUEST_TIMEOUT,
                                f"the request did not arrive within listen.request_timeout_s ({timeout:g} s)")
                self.wfile.flush()
            except OSError:
                pass

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # no headers, no framing: not served
            self.send_error(HTTPStatus.BAD_REQUEST, "request line: HTTP/0.9 is not served (send HTTP/1.1)")
            return False
        if not _METHOD.fullmatch(self.command or ""):
            self.send_error(HTTPStatus.BAD_REQUEST, f"request line: not a method: {self.command[:20]!r}")
            return False
        return True

    def handle_expect_100(self) -> bool:
        # "100 Continue" only for a body that will be read; a refused one (too large, ambiguous
        # framing, wrong endpoint or method) gets its final answer at once, and the client does
        # not send it.
        try:
            length = self._body_length()
        except _HttpError:
            return True
        if (self.command != "POST" or self._route() not in POST_HANDLERS or length is None
                or length > self.agent.cfg.listen.max_body_bytes):
            return True
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's error replies (bad request line, headers too large, 408, 414) as JSON."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        if self.request_version == "HTTP/0.9":
            self.request_version = ""  # the reply gets a status line and headers all the same
        self.close_connection = True
        text = message or HTTPStatus(code).phrase
        field = None
        if text.startswith(("request line:", "headers:")):
            field = text.split(":", 1)[0]
        elif code == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:  # the stdlib's "Line too long", "Too many headers"
            field, text = "headers", f"headers: {text}"
        elif code in (HTTPStatus.BAD_REQUEST, HTTPStatus.HTTP_VERSION_NOT_SUPPORTED):  # the stdlib's request line checks
            field, text = "request line", f"request line: {text}"
        self._reply(code, {"error": text, "field": field}, "other")

    def _reply(self, code: int, doc: Any, handler: str, content_type: str = "application/json", body: bytes | None = None,
               headers: dict[str, str] | None = None) -> None:
        data = body if body is not None else (json.dumps(doc, separators=(",", ":")) + "\n").encode()
        # Count before the reply goes out, so a client that has its answer sees it in /metrics.
        metrics = self.agent.metrics
        metrics.request_duration.labels(handler).observe(time.perf_counter() - (self._t0 or time.perf_counter()))
        metrics.requests.labels(handler, str(code)).inc()
        self._responded = True
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        # An unread body would be read as the next request (request smuggling): close instead.
        if (code >= 400 and code != 404) or self._body_left or self.agent.stopping.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        name = path.lstrip("/")
        return name if name in HANDLERS else "other"

    def _body_length(self) -> int | None:
        """The body length the headers declare (None: no body). Framing that two HTTP parsers (a
        proxy and the agent) could read differently is refused: that is how requests are smuggled."""
        te = self.headers.get_all("Transfer-Encoding") or []
        cl = self.headers.get_all("Content-Length") or []
        if te and cl:
            raise _HttpError(400, "Transfer-Encoding", "sent together with Content-Length: ambiguous framing "
                                                       "(send Content-Length only)")
        if te:
            raise _HttpError(411, "Transfer-Encoding", f"{te[0][:50]!r} bodies are not accepted: send Content-Length")
        if len(cl) > 1:
            raise _HttpError(400, "Content-Length", f"sent {len(cl)} times ({', '.join(v[:20] for v in cl[:4])})")
        if not cl:
            return None
        text = cl[0].strip(" \t")
        if text.startswith("-") and text[1:].isdigit():
            raise _HttpError(400, "Content-Length", f"must be >= 0, got {text[:50]}")
        if not (text.isascii() and text.isdigit()):  # int() would take '+5', ' 5', '5_0', '٥'
            raise _HttpError(400, "Content-Length", f"not a number of bytes: {cl[0][:50]!r}")
        return int(text) if len(text) <= 18 else 10**18  # 10**18 bytes: over any limit

    def _serve(self) -> None:
        handler = self._route()
        try:
            length = self._body_length()
        except _HttpError as exc:
            self._body_left = -1  # where the body ends is unknown: close after the reply
            self._reply(exc.code, {"error": str(exc), "field": exc.field}, handler)
            return
        self._body_left = length or 0
        if handler == "other":
            self._reply(404, {"error": f"no such endpoint: {self.path[:100]}", "field": None}, handler)
            return
        allowed = ("POST",) if handler in POST_HANDLERS else ("GET", "HEAD")
        if self.command not in allowed:
            self._reply(405, {"error": f"{self.command} is not served on /{handler}: use {' or '.join(allowed)}",
                              "field": None}, handler, headers={"Allow": ", ".join(allowed)})
            return
        if handler in POST_HANDLERS:
            self._post(handler, length)
            return
        try:
            self._get(handler)
        except (ConnectionError, TimeoutError):
            raise  # the client is gone: one log line (_Server.handle_error)
        except Exception as exc:  # a bug behind a GET endpoint: a 500, not a dropped connection
            if self._responded:
                raise
            event(self.agent.log, logging.ERROR, "request failed", handler=handler, error=f"{type(exc).__name__}: {exc}")
            self._reply(500, {"error": f"internal error: {type(exc).__name__}", "field": None}, handler)

    def _get(self, handler: str) -> None:
        if handler == "metrics":
            body, ctype = self.agent.metrics.exposition()
            self._reply(200, None, handler, ctype, body)
        elif handler == "healthz":
            doc = {"status": "ok", "uptime_s": round(time.time() - self.agent.started_at, 3)}
            if self.agent.federation is not None:  # the agent is healthy either way; the SuperNode's state is news
                st = self.agent.federation.status()
                doc["supernode"] = {k: st.get(k) for k in ("mode", "state", "up", "connected", "node_id", "pid",
                                                           "restarts")}
            self._reply(200, doc, handler)
        elif handler == "federation":
            self._reply(200, self.agent.federation_status(), handler)
        elif handler == "readyz":
            ready, doc = self.agent.readiness()
            self._reply(200 if ready else 503, doc, handler)
        elif handler == "snapshot":
            snap = self.agent.snapshot
            doc = {"snapshot": None if snap is None else snap.to_dict(self.agent.view.site)}
            self._reply(200, doc, handler)

    def _post(self, handler: str, length: int | None) -> None:
        try:
            body = self._read_json(length)
            doc = self.agent.recommend(body) if handler == "recommend" else self.agent.record_outcome(body)
        except _HttpError as exc:
            self._reply(exc.code, {"error": str(exc), "field": exc.field}, handler)
            return
        except BadRequest as exc:
            self._reply(400, {"error": str(exc), "field": exc.field}, handler)
            return
        except Exception as exc:  # never crash on input; log what went wrong
            event(self.agent.log, logging.ERROR, "request failed", handler=handler, error=f"{type(exc).__name__}: {exc}")
            self._reply(500, {"error": f"internal error: {type(exc).__name__}", "field": None}, handler)
            return
        self._reply(200 if handler == "recommend" else 202, doc, handler)

    def _read_json(self, length: int | None) -> dict[str, Any]:
        limit = self.agent.cfg.listen.max_body_bytes
        if length is None:
            raise _HttpError(411, "Content-Length", "required")
        if length > limit:  # before reading a byte of it
            raise _HttpError(413, "body", f"{length} bytes is over the limit of {limit} (listen.max_body_bytes)")
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            timeout = self.agent.cfg.listen.request_timeout_s
            raise _HttpError(408, "body", f"not received within listen.request_timeout_s ({timeout:g} s)") from None
        self._body_left = length - len(raw)
        if len(raw) < length:
            raise _HttpError(400, "body", f"ended after {len(raw)} of {length} bytes")
        return _parse_body(raw)

    def finish(self) -> None:
        super().finish()
        if self._body_left:
            self._drain()

    def _drain(self) -> None:
        """The reply went out before the request's body was read (413, 411, a framing error...).
        Closing now, with the client still sending, would make the kernel reset the connection,
        and a client that is still writing would never read the reply. So: end our side (FIN),
        then read and drop what comes, for at most _DRAIN_S seconds and _DRAIN_BYTES bytes."""
        conn = self.connection
        try:
            conn.shutdown(socket.SHUT_WR)
            end = time.monotonic() + min(_DRAIN_S, self.agent.cfg.listen.request_timeout_s)
            left = _DRAIN_BYTES
            while left > 0 and (wait := end - time.monotonic()) > 0:
                conn.settimeout(wait)
                chunk = conn.recv(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass


def _parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, parsed as the extender and webhook parse theirs
    (:func:`iro_fed.k8s.httpjson.loads_strict`): UTF-8 only, no ``NaN`` / ``Infinity`` or numbers
    beyond a double, integers within 64 bits, no lone surrogates (``"\\ud800"``: no UTF-8
    writer, the store included, can encode one), at most 100 levels deep. Anything else is a 400
    naming the field."""
    try:
        doc = loads_strict(raw)
    except JsonBodyError as exc:
        raise _HttpError(400, exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    if not isinstance(doc, dict):
        raise _HttpError(400, "body", f"expected a JSON object, got {type(doc).__name__}")
    return doc


class _HttpError(Exception):
    def __init__(self, code: int, field: str | None, message: str) -> None:
        self.code, self.field = code, field
        super().__init__(f"{field}: {message}" if field else message)
