"""The edge agent: HTTP endpoints, background loops, and an orderly start and stop.

Threads:

* the HTTP server (stdlib ``ThreadingHTTPServer``, one thread per connection, at most
  ``listen.max_connections``) with the extender's and webhook's handler
  (:class:`iro_fed.k8s.httpjson.RoutedJsonHandler`): strict HTTP/1.1 framing (digits-only
  ``Content-Length``, repeated only with the same value; no ``Transfer-Encoding``: 400 / 411 and
  close, so no request can be smuggled in a body), bodies over ``listen.max_body_bytes`` 413
  before a byte is read (no ``100 Continue`` for them), ``listen.request_timeout_s`` for a
  request's line and headers and again for its body (408 and close), bodies parsed by
  :func:`iro_fed.k8s.httpjson.loads_strict` (400 naming the field), 405 with ``Allow``, JSON for
  every error, and one log line, not a traceback, when a client resets;
* ``collect``: psutil readings of the node every ``collect.interval_s`` into the gauges, and
  /proc/net/dev read once per round (:class:`edge_agent.metrics.NetworkCounter`); a network read
  that fails keeps the last network totals and is reported on its own (dependency ``network``,
  ``/readyz`` ``network_error``) while CPU and memory go on updating;
* ``perception`` (with ``prometheus.url``): a cluster snapshot every ``refresh_interval_s``;
  with ``prometheus.scoring`` ``usage`` / ``max`` the site's ``allocated`` follows observed usage
  (:func:`iro_fed.metrics.load_aware_problem`). When Prometheus fails the agent goes back to
  request-based scoring, says so in ``/readyz`` and ``iro_agent_dependency_up``, and retries
  with exponential backoff. A snapshot's queries share one deadline (the client's ``deadline_s``,
  twice ``prometheus.timeout_s``: :func:`~iro_fed.metrics.snapshot.build_snapshot`), not one each;
* ``policy`` (with ``policy.registry``): follows the registry's ``latest`` pointer, keeps the last
  good policy, retries with backoff when the registry is missing or a version is broken;
* ``supernode`` (with ``federated.enabled``): runs and restarts the site's Flower SuperNode, or
  checks an external one (:mod:`edge_agent.federation`); /recommend never waits on it.

:meth:`Agent.stop` (on SIGTERM / SIGINT / SIGHUP) stops accepting connections, lets in-flight requests
finish (each is bounded by ``listen.request_timeout_s``), stops the loops and flushes the
experience store.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

import solvers
from edge_agent.backoff import Backoff
from edge_agent.config import AgentConfig
from edge_agent.federation import SuperNodeSupervisor, policy_sample
from edge_agent.logs import LOGGER_NAME, event
from edge_agent.metrics import HANDLERS, AgentMetrics, NetworkCounter
from edge_agent.policy import LATEST, PolicyLoadError, Ranker, RegistryPolicySource
from edge_agent.recommend import (
    Recommender,
    add_discovered_nodes,
    empty_site,
    features,
    load_site_and_names,
    site_queries,
)
from edge_agent.store import ExperienceStore, Outcome, Transition
from edge_agent.workload import BadRequest, did_you_mean
from iro_fed.k8s.httpjson import MAX_PARSE_MEMORY, AnyFamily, ConnectionLimit, HttpError, RoutedJsonHandler
from iro_fed.metrics.local import LocalCollector
from iro_fed.metrics.prometheus import PrometheusUnavailable, redact_url
from iro_fed.metrics.snapshot import ClusterSnapshot, build_snapshot, load_aware_problem
from iro_fed.model import Problem
from iro_fed.problem_io import json_kind

#: Distinct skipped discovered nodes logged (a bound against a Prometheus with endless bad names).
MAX_REFUSALS_LOGGED = 1000
#: The fields of a ``POST /outcome`` body.
OUTCOME_FIELDS = ("decision_id", "node", "observed")
#: The most an outcome's ``observed`` may take as stored (its JSON text, in bytes). A real one is a
#: few measurements (``{"latency_ms": 12, "cpu_throttled": false}``); the body limit alone (1 MiB)
#: let 100,000 stored outcomes (``store.max_rows``) grow the store to ~100 GB.
MAX_OBSERVED_BYTES = 16 * 1024
#: The longest workload name /recommend records with a decision: a Pod's ``namespace/name``
#: (63 + 1 + 253). A workload object's name was taken at any length and stored in every transition.
MAX_WORKLOAD_NAME = 317
#: What one body may be reckoned to take once parsed (:func:`iro_fed.k8s.httpjson.parse_estimate`),
#: per byte of ``listen.max_body_bytes`` (at least 1 MiB of it, at most the shared handler's 512 MiB);
#: more gets 413 before it is parsed.
#: A real Pod is reckoned at 10-17 times its size (managedFields' empty objects), ``[{},{},...]``
#: at 86 times: the shared handler's 512 MiB let 1 MiB of it become 28 MiB of objects, and 16 such
#: requests at once peaked the process at 226 MiB, against the Deployment's 256 Mi limit.
PARSE_BYTES_PER_BODY_BYTE = 32
#: What the bodies parsed and answered at once may be reckoned to take in all (the server's
#: ``parse_budget``); past it a request waits for room until its body deadline, then 503. A body
#: over it alone still parses alone.
MAX_PARSE_TOTAL = 64 << 20


class StoreBusy(HttpError):
    """503: the experience store cannot take more now; ``retry_after_s`` (its Retry-After) is when
    it tries its file again."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(503, message, None, retry_after_s)


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
        self.file_nodes: frozenset[str] = frozenset()  # every node of the problem file, of every domain
        if cfg.problem:
            self.base_site, self.file_nodes = load_site_and_names(cfg.problem, cfg.site, allow_empty=discover)
            self._warn_if_node_elsewhere()
        else:
            self.base_site = empty_site(cfg.site)
        self.discover_domain = cfg.site or (self.base_site.domains[0].name if self.base_site.domains else "")
        self._discovered: tuple = ()
        # What /recommend ranks against, swapped as a whole by the perception loop.
        self.view = SiteView(self.base_site, self.base_site, False, 0)
        self.recommender = Recommender(self.base_site, cfg.recommend.k)
        site_label = cfg.site or "all"  # the site label of this agent's node series
        self.metrics = AgentMetrics(cfg.node_name, site_label, NetworkCounter(cfg.collect.network_interfaces))
        # Discovery reads the capacity of the nodes whose agents carry this agent's site label.
        self.snapshot_queries = (site_queries(cfg.prometheus.queries, site_label) if discover
                                 else cfg.prometheus.queries)
        self._refusals_logged: set[str] = set()
        self.store = (
            ExperienceStore(cfg.store.path, cfg.store.max_rows, max_pending=cfg.store.max_pending,
                            busy_timeout_s=cfg.store.busy_timeout_s, logger=self.log)
            if cfg.store.path
            else None
        )
        self.fallback = Ranker(solvers.make(cfg.recommend.fallback), "heuristic")
        self.solver = (
            Ranker(solvers.make(cfg.recommend.solver, **cfg.recommend.solver_params), "solver")
            if cfg.recommend.solver
            else None
        )
        if cfg.recommend.solver_params and not cfg.recommend.solver:
            # The rule: the parameters are recommend.solver's, never the fallback's. Not an error: emptying
            # the solver (IRO_AGENT_SOLVER=) of a file that sets them is how a site ranks with the policy only.
            event(self.log, logging.WARNING, "recommend.solver_params not used: no recommend.solver is set "
                  "(the fallback takes no parameters)", solver_params=sorted(map(str, cfg.recommend.solver_params)),
                  solver=cfg.label("recommend.solver"))
        self.policy = RegistryPolicySource(cfg.policy.registry) if cfg.policy.registry else None
        self._waiting_for_latest = False  # "no latest yet" logged (once, until the registry changes)
        self.federation: SuperNodeSupervisor | None = None
        if cfg.federated.enabled:
            self.metrics.add_federated()
            self.federation = SuperNodeSupervisor(cfg.federated, self.metrics, cfg.store.path, self.log)
        # Decisions also recorded in the federated DQN's observation format (for the ClientApp).
        self.record_policy_samples = cfg.federated.enabled and cfg.federated.experience
        self.prometheus = cfg.prometheus.client() if cfg.prometheus.url else None
        self.snapshot: ClusterSnapshot | None = None
        self.prometheus_state: dict[str, Any] = {"up": None, "last_error": None, "last_success": None}
        self.load_aware_nodes = 0
        self.local: LocalCollector | None = None
        self._network_error: str | None = None  # the last network failure logged (logged once, not every round)
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server: _Server | None = None
        self.started_at = time.time()

    def _warn_if_node_elsewhere(self) -> None:
        """Warn (once, at start) when this agent's node is a node of the problem file under another
        domain than ``site``: a file shared by the nodes of several domains, ``site`` copied from
        another node's settings, and this agent would rank and label that site, not its own. A
        warning, not an error: an agent may serve a site from a node outside it."""
        cfg = self.cfg
        if cfg.site and cfg.node_name in self.file_nodes and cfg.node_name not in self.base_site.node_index:
            event(self.log, logging.WARNING, "this agent's node is in another domain of the problem file than its "
                  "site: it ranks and labels the site's nodes, not its own domain's", node=cfg.node_name,
                  site=cfg.site, site_from=cfg.label("site"), problem=str(cfg.problem))

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
        name = rec.doc["workload"]
        if len(name) > MAX_WORKLOAD_NAME:  # a workload object's (a Pod's names are checked as the API server does)
            raise BadRequest("workload.name", f"at most {MAX_WORKLOAD_NAME} characters (a Pod's namespace/name), "
                                              f"got {len(name)}")
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
        # Every field checked before the store is asked: a misspelt one ("observd") was stored as
        # observed={} (202), and the corrected retry then got 409 for a different outcome.
        unknown = [str(key) for key in body if key not in OUTCOME_FIELDS]
        if unknown:
            raise BadRequest(unknown[0], "unknown field of an outcome (known: " + ", ".join(OUTCOME_FIELDS) + ")"
                                         + did_you_mean(unknown[0], OUTCOME_FIELDS))
        did = body.get("decision_id")
        if did is None:
            raise BadRequest("decision_id", "required: the decision_id of a /recommend reply")
        if not isinstance(did, str) or not did:
            got = "an empty string" if did == "" else json_kind(did)
            raise BadRequest("decision_id", f"expected a non-empty string (the decision_id of a /recommend reply), "
                                            f"got {got}")
        # Required: a body without it was stored as observed={} and the real outcome, sent after,
        # got 409. An explicit {} is taken: it says where the pod went with nothing measured, on purpose.
        if "observed" not in body:
            raise BadRequest("observed", "required: what was observed after the decision, a JSON object "
                                         '(e.g. {"latency_ms": 12}; {} when nothing was measured)')
        observed = body["observed"]
        if not isinstance(observed, dict):
            raise BadRequest("observed", f"expected an object, got {json_kind(observed)}")
        size = len(json.dumps(observed, default=str))  # as the store writes it (ASCII: characters are bytes)
        if size > MAX_OBSERVED_BYTES:
            raise BadRequest("observed", f"{size} bytes as JSON is over the limit of {MAX_OBSERVED_BYTES} "
                                         "(a few measurements, e.g. {\"latency_ms\": 12})")
        node = body.get("node")
        if node is None or node == "":
            raise BadRequest("node", "required: the node the pod was placed on (a node of this site)")
        if not isinstance(node, str):
            raise BadRequest("node", f"expected a node name, got {type(node).__name__}")
        site = self.view.site
        if node not in site.node_index:
            where = f"site {self.cfg.site!r}" if self.cfg.site else "this agent's site"
            # A hint only for a name that can be a node's (at most 253 characters): difflib over
            # every node of a large site with a body-sized name would hold the request.
            hint = did_you_mean(node, list(site.node_index)) if len(node) <= 253 else ""
            raise BadRequest("node", f"{node[:253]!r} is not a node of {where}{hint}")
        if self.store is None:
            # 409, not 503: the agent's settings, not a passing state, refuse it, so a retry cannot
            # succeed (503 invites retries forever); not 400 either: the request itself is fine.
            raise HttpError(409, "this agent has no experience store (store.path is not set): it takes no outcomes",
                            None)
        # One outcome per decision of this agent's store (edge_agent.store): a retried POST is the
        # row already stored (200), a different second outcome a 409, an unknown decision a 400.
        result = self.store.record_outcome(Outcome(did, observed, node),
                                           timeout=min(5.0, self.cfg.listen.request_timeout_s))
        doc: dict[str, Any] = {"recorded": result.status in ("recorded", "duplicate"), "status": result.status,
                               "decision_id": did, "outcome_id": result.outcome_id}
        if result.status == "unknown":
            raise BadRequest("decision_id", f"unknown decision {did!r}: not a decision of this agent's experience "
                                            "store (never recommended here, not recorded, or evicted beyond "
                                            "store.max_rows)")
        if result.status == "conflict":
            raise HttpError(409, f"decision_id: decision {did!r} already has another outcome (outcome_id "
                                 f"{result.outcome_id}); one outcome per decision, the first is kept", "decision_id")
        if result.status == "failed":
            raise HttpError(500, f"the outcome could not be stored: {result.error}", None)
        if result.status == "full":
            # Refused rather than queued and dropped later unseen: at-least-once clients send it again.
            raise StoreBusy(f"outcome not taken: {result.error}; send it again after Retry-After",
                            result.retry_after_s or 0.0)
        if result.status == "pending":
            doc["note"] = ("queued: the experience store's file fails or is busy; the outcome is checked "
                           "(known decision, one per decision) when it is written; send it again to learn "
                           "what became of it (200 once stored)")
        return doc

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
                # Unreachable, or answering but the snapshot failed (a rejected query, a bad series).
                why = ("unreachable" if self.prometheus_state.get("unreachable", True)
                       else f"read failed ({self.prometheus_state['last_error']})")
                degraded.append(f"prometheus {why}: scoring with requests")
        if note.get("fallback_reason"):
            degraded.append(note["fallback_reason"])
        store_failing = self._store_failing()
        if store_failing:
            degraded.append(store_failing)
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
            else {"path": str(self.store.path), "written": self.store.written, "pending": self.store.pending,
                  "failed": self.store.failed, "last_error": self.store.last_error},
            "federation": federation,
            "network_error": self.metrics.network_error,  # why iro_node_network_bytes stands still
        }
        return ready, doc

    def _store_failing(self) -> str | None:
        """Why the experience store is degraded (records held in memory for a failing file), or None.
        Decisions are still answered: the agent stays ready."""
        store = self.store
        if store is None or not store.pending or not store.last_error:
            return None
        return f"experience store failing: {store.pending} pending ({store.last_error})"

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
        # A network failure is the network series' own (dependency "network"): CPU and memory still
        # update, and this loop keeps its interval rather than backing off for it.
        self.metrics.collect(self.local)
        error = self.metrics.network_error
        if error != self._network_error:
            if error is not None:
                event(self.log, logging.WARNING, "network bytes not read: keeping the last totals", dependency="network",
                      error=error)
            else:
                event(self.log, logging.INFO, "network bytes read again", dependency="network")
            self._network_error = error
        if self.store is not None:
            self.metrics.experience_rows.set(self.store.written)
            self.metrics.experience_pending.set(self.store.pending)
            self.metrics.experience_failed.set(self.store.failed)
            self.metrics.dependency_up.labels("store").set(0 if self._store_failing() else 1)

    def _perception_step(self) -> None:
        assert self.prometheus is not None
        try:
            snap = build_snapshot(self.prometheus, self.snapshot_queries)
        except Exception as exc:
            view = self.view
            if view.load_aware:
                event(self.log, logging.WARNING, "prometheus failed: back to request-based scoring", error=str(exc))
            # Discovered nodes stay (with nothing allocated): their requests are unknown.
            self.view = SiteView(view.site, view.site, False, view.discovered)
            self.load_aware_nodes = 0
            self.metrics.load_aware.set(0)
            self.prometheus_state.update(up=False, last_error=f"{type(exc).__name__}: {exc}",
                                         unreachable=isinstance(exc, PrometheusUnavailable))
            raise
        self.snapshot = snap
        site = self.view.site
        if self.cfg.prometheus.discover_nodes:
            site, key, refused = add_discovered_nodes(self.base_site, snap, self.discover_domain, self.file_nodes)
            self._log_refusals(refused)
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
        self.prometheus_state.update(up=True, last_error=None, last_success=snap.taken_at, unreachable=False)

    def _log_refusals(self, refused: dict[str, str]) -> None:
        """One warning per node Prometheus reports that may not join the site (not one per refresh)."""
        for name, why in refused.items():
            if name in self._refusals_logged or len(self._refusals_logged) >= MAX_REFUSALS_LOGGED:
                continue
            self._refusals_logged.add(name)
            event(self.log, logging.WARNING, "node from Prometheus skipped", node=name[:300], reason=why,
                  site=self.discover_domain)

    def _policy_step(self) -> None:
        assert self.policy is not None
        try:
            changed = self.policy.poll()
        except PolicyLoadError:
            self._set_policy_info()
            if self._no_latest_yet():
                # A registry before its first round: the usual state of a new federation, not a
                # failure. Polled every policy.poll_interval_s (no backoff), said once.
                if not self._waiting_for_latest:
                    event(self.log, logging.INFO, "policy registry has no 'latest' yet: ranking without a policy "
                          "until one is published", registry=str(self.policy.registry),
                          poll_interval_s=self.cfg.policy.poll_interval_s)
                    self._waiting_for_latest = True
                return
            self._waiting_for_latest = False
            raise
        self._waiting_for_latest = False
        if changed:
            current = self.policy.current
            event(self.log, logging.INFO, "policy loaded", version=current.version if current else None)
        self._set_policy_info()

    def _no_latest_yet(self) -> bool:
        """The registry folder is there and has no ``latest`` pointer (not even a broken link)."""
        assert self.policy is not None
        registry = self.policy.registry
        return self.policy.current is None and registry.is_dir() and not os.path.lexists(registry / LATEST)

    def _set_policy_info(self) -> None:
        ranker, _ = self.current_ranker()
        self.metrics.policy_info.clear()
        self.metrics.policy_info.labels(ranker.source, ranker.version or "").set(1)

    # --- start / stop --------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        self.server = _Server(self)
        self._set_policy_info()
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
              node=cfg.node_name, nodes=self.base_site.num_nodes,
              prometheus=redact_url(cfg.prometheus.url) if cfg.prometheus.url else None,  # never the password
              registry=str(cfg.policy.registry) if cfg.policy.registry else None, solver=cfg.recommend.solver or None,
              federated=cfg.federated.mode if cfg.federated.enabled else None)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def abandon(self) -> None:
        """Undo ``__init__`` after :meth:`start` failed to bind (nothing started yet): close the
        store, without the stop's log lines (the agent never ran)."""
        assert self.server is None, "abandon() is for an agent that never started serving"
        self.stopping.set()
        if self.store is not None:
            self.store.close(self.cfg.shutdown_timeout_s)

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
            if self.store.lost_at_close:
                # Not INFO "stopped" alone: these decisions (and outcomes) are gone, not in the file.
                event(self.log, logging.WARNING, "pending records were not written: the experience store's file failed "
                      "until the stop", lost=self.store.lost_at_close, lost_outcomes=self.store.lost_outcomes,
                      error=self.store.last_error)
        event(self.log, logging.INFO, "edge agent stopped", experience_written=self.store.written if self.store else 0)


class _Server(ConnectionLimit, AnyFamily, ThreadingHTTPServer):
    """The agent's HTTP server: its limits are the ``listen`` settings, read by the shared
    handler (:class:`iro_fed.k8s.httpjson.RoutedJsonHandler`) from here."""

    daemon_threads = False  # server_close() waits for in-flight requests
    block_on_close = True
    allow_reuse_address = True
    busy_message = "too many connections (listen.max_connections)"
    setting_names = {"max_body_bytes": "listen.max_body_bytes", "header_timeout_s": "listen.request_timeout_s",
                     "body_timeout_s": "listen.request_timeout_s", "max_parse_memory": "listen.max_body_bytes"}
    max_parse_total = MAX_PARSE_TOTAL

    def __init__(self, agent: Agent) -> None:
        listen = agent.cfg.listen
        self.agent = agent
        self.max_connections = listen.max_connections  # bounded threads: more get 503 at once, not a queue
        self.max_body_bytes = listen.max_body_bytes
        # Sized for the agent (a pod or workload per body, a 256 Mi container), not the shared handler's 512 MiB.
        # never above the shared handler's ceiling: listen.max_body_bytes may be up to 1 GiB
        self.max_parse_memory = min(MAX_PARSE_MEMORY, PARSE_BYTES_PER_BODY_BYTE * max(listen.max_body_bytes, 1 << 20))
        # One setting bounds the request line and headers, the body, and an idle keep-alive connection.
        self.header_timeout_s = self.body_timeout_s = self.idle_timeout_s = listen.request_timeout_s
        super().__init__((listen.host, listen.port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line instead of socketserver's traceback on stderr: a client that reset or
        closed the connection mid-request is news, not a crash of the agent."""
        exc = sys.exc_info()[1]
        client = client_address[0] if isinstance(client_address, tuple) else str(client_address)
        if isinstance(exc, (ConnectionError, TimeoutError)):
            event(self.agent.log, logging.INFO, "client connection lost", client=client,
                  error=f"{type(exc).__name__}: {exc}")
            return
        tb = exc.__traceback__ if exc is not None else None
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else None
        event(self.agent.log, logging.ERROR, "request handling failed", client=client,
              error=f"{type(exc).__name__}: {exc}", where=where)


class _Handler(RoutedJsonHandler):
    """The agent's endpoints. Framing, limits, deadlines and error replies are the shared
    handler's; the agent's own rules: errors are ``{"error": ..., "field": ...}``
    (docs/edge_agent.md), every error reply but a 404 closes the connection, as does any reply
    that leaves a body unread, and every reply is counted per endpoint."""

    server: _Server
    server_version = "iro-edge-agent/0.1"
    error_key = "error"
    drain_bytes = 0  # a body the agent did not read is never read as the next request: the connection closes

    @property
    def agent(self) -> Agent:
        return self.server.agent

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        event(self.agent.log, logging.DEBUG, "http", client=self.client_address[0], request=format % args)

    def routes(self) -> dict[str, dict[str, Callable[[], None]]]:
        gets = {"healthz": self._healthz, "readyz": self._readyz, "metrics": self._metrics,
                "snapshot": self._snapshot, "federation": self._federation}
        out: dict[str, dict[str, Callable[[], None]]] = {f"/{k}": {"GET": f, "HEAD": f} for k, f in gets.items()}
        out["/recommend"] = {"POST": lambda: self._post(self.agent.recommend, 200)}
        # A retried outcome (already stored) is 200; a new or queued one 202; 503 with Retry-After
        # while the store's file fails and store.max_pending records wait for it (not taken).
        out["/outcome"] = {"POST": lambda: self._post(
            self.agent.record_outcome, lambda doc: 200 if doc["status"] == "duplicate" else 202)}
        return out

    def route_path(self) -> str:
        return super().route_path().rstrip("/") or "/"  # /healthz/ is /healthz

    def not_found(self, path: str) -> str:
        return (f"unknown path {path[:100]!r} (POST /recommend, /outcome; GET /healthz, /readyz, /metrics, "
                "/snapshot, /federation)")

    def keep_alive_after_error(self, code: int) -> bool:
        return code == 404

    def request_failed(self, exc: Exception) -> None:
        event(self.agent.log, logging.ERROR, "request failed", handler=self._handler_name(),
              error=f"{type(exc).__name__}: {exc}")

    def _handler_name(self) -> str:
        """The ``handler`` label of the request metrics."""
        name = self.route_path().lstrip("/")
        return name if name in HANDLERS else "other"

    def send_body(self, code: int, data: bytes, content_type: str = "application/json",
                  headers: Mapping[str, str] | None = None) -> None:
        # Count before the reply goes out, so a client that has its answer sees it in /metrics.
        handler = self._handler_name()
        now = time.perf_counter()
        self.agent.metrics.request_duration.labels(handler).observe(now - (self.request_started or now))
        self.agent.metrics.requests.labels(handler, str(code)).inc()
        if self.agent.stopping.is_set():
            self.close_connection = True
        super().send_body(code, data, content_type, headers)

    # --- endpoints ---------------------------------------------------------------------------

    def _metrics(self) -> None:
        body, ctype = self.agent.metrics.exposition()
        self.send_body(200, body, ctype)

    def _healthz(self) -> None:
        doc = {"status": "ok", "uptime_s": round(time.time() - self.agent.started_at, 3)}
        if self.agent.federation is not None:  # the agent is healthy either way; the SuperNode's state is news
            st = self.agent.federation.status()
            doc["supernode"] = {k: st.get(k) for k in ("mode", "state", "up", "connected", "node_id", "pid", "restarts")}
        self._send(200, doc)

    def _readyz(self) -> None:
        ready, doc = self.agent.readiness()
        self._send(200 if ready else 503, doc)

    def _snapshot(self) -> None:
        snap = self.agent.snapshot
        self._send(200, {"snapshot": None if snap is None else snap.to_dict(self.agent.view.site)})

    def _federation(self) -> None:
        self._send(200, self.agent.federation_status())

    def _post(self, action: Callable[[dict[str, Any]], dict[str, Any]],
              code: int | Callable[[dict[str, Any]], int]) -> None:
        body = self.read_json()
        if not isinstance(body, dict):
            raise HttpError(400, f"body: expected a JSON object, got {json_kind(body)}", "body")
        try:
            doc = action(body)
        except BadRequest as exc:
            raise HttpError(400, str(exc), exc.field) from None
        self._send(code if isinstance(code, int) else code(doc), doc)
