"""``POST /recommend``: one pod in, the top-K nodes of the site out, with scores and the
objective terms of each choice.

The site is a set of nodes of a problem file (those of one domain, or all). A request's
workload is validated by the problem loader itself (the same field rules as a problem file, but
an unknown field is refused, not noted: :mod:`edge_agent.workload`) and joined to the site's
cluster as a one-workload :class:`~iro_fed.model.Problem`; the ranker
(registry policy, configured solver or fallback heuristic) ranks the feasible nodes with
``rank``; :func:`iro_fed.objective.evaluate` scores the placement on each of the top-K nodes
and :func:`iro_fed.objective.marginal` gives the change of R, so the reply's terms come from the
one scorer.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.workload import BadRequest, pod_error, pod_warnings, request_to_workload
from iro_fed.feasibility import explain, feasible_nodes
from iro_fed.limits import MAX_TOP_K as MAX_K
from iro_fed.metrics.snapshot import ClusterSnapshot, SnapshotQueries
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import evaluate, marginal
from iro_fed.problem_io import (
    DNS_SUBDOMAIN,
    MAX_NUMBER,
    ProblemValidationError,
    load_document,
    problem_from_dict,
    problem_to_dict,
)


class SiteError(ValueError):
    """The site cannot be built from the problem file (names the setting)."""


class RankingError(RuntimeError):
    """The ranker gave a score that is not a finite number (a policy with NaN weights): the
    agent falls back from a policy on it, as on any other failure to rank."""


def load_site(path: str | Path, site: str = "", allow_empty: bool = False) -> Problem:
    """The site's nodes from a problem file: the nodes of domain ``site`` (all when empty), no workloads."""
    return load_site_and_names(path, site, allow_empty)[0]


def load_site_and_names(path: str | Path, site: str = "", allow_empty: bool = False) -> tuple[Problem, frozenset[str]]:
    """:func:`load_site`, and the names of every node of the file (of every domain): node discovery
    must not add a node of another site to this one."""
    doc = load_document(path)
    full = problem_from_dict(doc, source=str(path))  # validates every field of the file
    if site and site not in full.domain_index:
        raise SiteError(f"site: {site!r} is not a domain of {path} (domains: {', '.join(full.domain_index)})")
    out = problem_to_dict(full)
    out["workloads"] = []
    if site:
        out["nodes"] = [n for n in out["nodes"] if n["domain"] == site]
    if not out["nodes"] and not allow_empty:
        raise SiteError(f"site: no nodes in {'domain ' + repr(site) + ' of ' if site else ''}{path}")
    return problem_from_dict(out, source=str(path)), frozenset(full.node_index)


def empty_site(site: str) -> Problem:
    """A site with one edge domain and no nodes yet (they come from Prometheus)."""
    return problem_from_dict({"resources": ["cpu", "memory"], "domains": [{"name": site, "kind": "edge"}], "nodes": []})


DISCOVERED_LABEL = "iro-fed.io/discovered"
#: The label of the agent's node series (``iro_node_*{node, site}``) that names its site.
SITE_LABEL = "site"


def site_queries(queries: SnapshotQueries, site_label_value: str) -> SnapshotQueries:
    """``queries`` with the default capacity queries (those node discovery reads) limited to the
    series of agents of this site (``{site="<site>"}``, the label every agent's node series
    carry): with one Prometheus for several sites, every agent's node joined every site. A query
    set in ``prometheus.queries`` is the operator's own and stays as it is."""
    default = SnapshotQueries()
    # A PromQL string literal: JSON's escapes (\", \\, \n, \uXXXX) are PromQL's too.
    matcher = f"{{{SITE_LABEL}={json.dumps(site_label_value, ensure_ascii=False)}}}"
    changes = {}
    for key, metric in (("cpu_capacity_cores", "iro_node_cpu_capacity_cores"),
                        ("memory_capacity_bytes", "iro_node_memory_capacity_bytes")):
        if getattr(queries, key) == getattr(default, key):
            changes[key] = f"max by ({queries.node_label}) ({metric}{matcher})"
    return dataclasses.replace(queries, **changes) if changes else queries


#: Why a node Prometheus reports does not join the site (see :func:`add_discovered_nodes`).
OTHER_DOMAIN = "a node of another domain of the problem file"
BAD_NODE_NAME = "not a Kubernetes node name (a lowercase RFC 1123 subdomain of at most 253 characters)"


def discovery_refusal(name: str, file_nodes: Collection[str] = ()) -> str | None:
    """Why node ``name`` (not yet of the site) may not join it, or None."""
    if name in file_nodes:
        return OTHER_DOMAIN
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        return BAD_NODE_NAME
    return None


def add_discovered_nodes(
    base: Problem, snapshot: ClusterSnapshot, domain: str, file_nodes: Collection[str] = ()
) -> tuple[Problem, tuple, dict[str, str]]:
    """``base`` plus the nodes of ``snapshot`` it lacks (those that report CPU and memory
    capacity), in ``domain``, with nothing allocated (load-aware scoring fills in their usage).

    Returns the problem, a key of what was added (equal keys: the same problem) and the nodes left
    out with why (:func:`discovery_refusal`): a node of the problem file (``file_nodes``, every
    domain) in another domain than the site's, and a name that is not a Kubernetes node's ("Bad
    Name" joined). Sites with resources other than cpu and memory get no discovered nodes (their
    capacity is unknown). A capacity the problem loader would refuse (over
    :data:`~iro_fed.problem_io.MAX_NUMBER`) is left out too: it failed the whole snapshot before,
    so one bad series turned load-aware scoring off for the site.
    """
    if set(base.resources) - {"cpu", "memory"} or domain not in base.domain_index:
        return base, (), {}
    extra = []
    refused: dict[str, str] = {}
    for name, u in sorted(snapshot.nodes.items()):
        if name in base.node_index:
            continue
        cpu, mem = u.cpu_capacity_millicores or 0, u.memory_capacity_mib or 0
        if not (1 <= cpu <= MAX_NUMBER and 1 <= mem <= MAX_NUMBER):
            continue
        why = discovery_refusal(name, file_nodes)
        if why is not None:
            refused[name] = why
            continue
        extra.append((name, int(cpu), int(mem)))
    if not extra:
        return base, (), refused
    doc = problem_to_dict(base)
    doc["workloads"] = []
    for name, millicores, mib in extra:
        doc["nodes"].append({"name": name, "domain": domain, "capacity": {"cpu": millicores, "memory": mib},
                             "labels": {DISCOVERED_LABEL: "true"}})
    return problem_from_dict(doc), tuple(extra), refused


@dataclass
class Recommendation:
    """The reply of ``/recommend`` (``to_dict``) plus what the agent records and counts."""

    doc: dict[str, Any]
    problem: Problem
    state: ClusterState
    top: list[tuple[int, float]]
    deltas: np.ndarray


class Recommender:
    """Turns a request body into a ranked list against the current site cluster."""

    def __init__(self, site_problem: Problem, default_k: int = 5) -> None:
        self.site_problem = site_problem
        self.default_k = default_k
        skeleton = problem_to_dict(site_problem)
        skeleton["nodes"] = []
        skeleton.pop("workloads", None)
        self._skeleton = skeleton

    def parse(self, body: Any) -> tuple[dict[str, Any], str, int]:
        """(workload object, 'workload' or 'pod', k) of a request body; :class:`BadRequest` names the field."""
        wl, kind = request_to_workload(body, self.site_problem.resources)
        k = body.get("k", self.default_k) if isinstance(body, Mapping) else self.default_k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise BadRequest("k", f"expected an integer 1..{MAX_K}, got {_as_json(k)}")
        return wl, kind, k

    def join(self, workload: dict[str, Any], cluster: Problem, kind: str = "workload") -> Problem:
        """The one-workload problem on ``cluster``; the loader's field errors become :class:`BadRequest`."""
        doc = dict(self._skeleton)
        doc["nodes"] = []
        doc["workloads"] = [workload]
        try:
            tiny = problem_from_dict(doc)
        except ProblemValidationError as exc:
            errors = [_request_error(path, msg, kind) for path, msg in exc.errors]
            path, msg = errors[0]
            # Every error, not only a count of the others: the client fixes them in one go.
            more = "; ".join(f"{p}: {m}" for p, m in errors[1:])
            raise BadRequest(path, msg + (f" (and {len(errors) - 1} more: {more})" if more else "")) from None
        problem = cluster.replace(
            workloads=tiny.workloads, demand=tiny.demand, wl_gpu_count=tiny.wl_gpu_count, wl_gpu_milli=tiny.wl_gpu_milli
        )
        _share_node_caches(cluster, problem)
        return problem

    def recommend(self, body: Any, cluster: Problem, ranker: Any, note: dict[str, Any]) -> Recommendation:
        """Rank the site's nodes for the pod of ``body``; ``note`` adds fields to the reply."""
        start = time.perf_counter()
        workload, kind, k = self.parse(body)
        problem = self.join(workload, cluster, kind)
        state = ClusterState(problem)
        top = ranker.rank(state, 0, k)
        # A diverged policy (NaN weights) loads and ranks: its NaN scores made the order arbitrary
        # and the reply not JSON ("score": NaN).
        bad = next((score for _, score in top if not np.isfinite(score)), None)
        if bad is not None:
            raise RankingError(f"{ranker.solver.name} gave a score that is not a finite number ({bad})")
        nodes = np.array([n for n, _ in top], dtype=np.int64)
        deltas = marginal(problem, state, 0, nodes) if nodes.size else np.zeros(0)
        entries = []
        assignment = np.full(1, -1, dtype=np.int64)
        for rank, ((n, score), delta) in enumerate(zip(top, deltas, strict=True), start=1):
            assignment[0] = n
            breakdown = evaluate(problem, assignment)
            node = problem.nodes[n]
            entries.append(
                {
                    "rank": rank,
                    "node": node.name,
                    "domain": node.domain,
                    "score": round(float(score), 9),
                    "delta_r": round(float(delta), 9),
                    "objective": breakdown.to_dict(),
                }
            )
        doc: dict[str, Any] = {
            "workload": problem.workloads[0].name,
            "input": kind,
            "k": k,
            "source": ranker.source,
            "solver": ranker.solver.name,
            "policy_version": ranker.version,
            **note,
            "feasible_nodes": int(feasible_nodes(state, 0).sum()),
            "nodes": entries,
        }
        if not entries:
            doc["unplaced_reason"] = explain(state, 0)
        warnings = pod_warnings(body) if kind == "pod" else []
        if warnings:
            doc["warnings"] = warnings
        doc["timing_ms"] = round((time.perf_counter() - start) * 1000.0, 3)
        return Recommendation(doc, problem, state, top, deltas)


def _as_json(value: Any, limit: int = 100) -> str:
    """``value`` as the client wrote it (JSON: ``true``, ``null``, ``"5"``), cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _request_error(path: str, msg: str, kind: str) -> tuple[str, str]:
    """A problem loader's error (``workloads[0].max_latency_ms``) as the request's field:
    ``workload.max_latency_ms``, or for a Pod the field or annotation that set it, named as the
    scheduler names it (:func:`edge_agent.workload.pod_error`)."""
    if not path.startswith("workloads[0]"):
        return path or kind, msg
    rest = path.removeprefix("workloads[0]").removeprefix(".")
    if kind == "pod":
        return pod_error(rest, msg)
    return (f"workload.{rest}" if rest else "workload"), msg


#: Cached properties of a Problem that depend on the nodes only (not on the workloads); a
#: one-workload problem built from a cluster reuses the cluster's instead of recomputing them.
_NODE_CACHES = ("has_gpus", "util_resources", "util_capacity", "util_inv_capacity", "util_valid_count",
                "node_unit_price", "cpu_index", "taint_table")


def _share_node_caches(cluster: Problem, problem: Problem) -> None:
    for name in _NODE_CACHES:
        if name not in cluster.__dict__:
            getattr(cluster, name)  # compute once on the cluster
        problem.__dict__[name] = cluster.__dict__[name]
    problem._label_codes = cluster._label_codes  # per-label node codes: node-only, filled lazily


def features(rec: Recommendation, k: int) -> np.ndarray:
    """The transition's state vector: the pod's demand as shares of the largest node, then per
    candidate slot (k of them, zero-padded) its free share after placement and its delta R."""
    p, state = rec.problem, rec.state
    cap = p.util_capacity.max(axis=0) if p.num_nodes else np.ones(len(p.util_resources))
    demand = p.util_demand[0] / np.where(cap > 0, cap, 1.0)
    slots = np.zeros((k, 2), dtype=np.float64)
    for i, ((n, _), d) in enumerate(zip(rec.top[:k], rec.deltas[:k], strict=True)):
        free = (state.free_share[n] - p.util_inv_capacity[n] @ p.util_demand[0]) / p.util_valid_count[n]
        slots[i] = (free, d)
    return np.concatenate([demand, slots.ravel()]).astype(np.float32)
