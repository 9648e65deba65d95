"""``iro scheduler``: a secondary Kubernetes scheduler that places pods in batches with IRO's solvers.

Loop (leader only):

1. pending pods of this scheduler come from a watch with
   ``fieldSelector=spec.schedulerName=NAME,spec.nodeName=``; nodes and bound pods from a second
   pair of watches (:class:`~iro_fed.k8s.client.ClusterCache`);
2. pods are gathered for ``window_s`` after the first one arrives, then the batch is solved
   jointly: ``solvers.make("fallback", primary=SOLVER, fallback=FALLBACK, time_limit_s=...)``, so
   an error, a timeout or an invalid placement of the configured solver falls back to a heuristic;
3. the batch's placements are checked in queue order against NodePorts, PodTopologySpread and
   InterPodAffinity with the pods placed before them (the snapshot judged each pod against the
   bound pods only; kube places one pod at a time): one that fails moves to its best other node
   (the objective's ``marginal``) that has room beside the batch's other pods and passes them (pods
   alike for placement, StatefulSet replicas included, search once while nothing changed); an
   unplaced pod rejected for pod affinity or spread skew that a pod of the batch being bound may
   satisfy is placed after the batch's pods, on its best node that passes against them, as kube
   would place it once they are bound (such pods placed join them: a chain, web waiting for api
   and api for db, is placed in whatever queue order); one with no such node, in either case, is not bound now but
   tried again at once in the next batch
   (outcome ``deferred``; no backoff, no Event, no ``window_s`` wait when only such pods are ready);
   every other placed pod is bound once (``pods/binding`` with ``_preload_content=False``, never
   retried; the chosen GPU cards go in the Binding's ``iro-fed.io/gpu-cards`` annotation) and
   gets an Event that explains the decision: its change of R and of each objective term
   (from :func:`iro_fed.objective.evaluate` with and without the pod), the runner-up node (the
   best other node it could have used: room, and the batch check against the pods placed before
   it) and the gap (from :func:`iro_fed.objective.marginal`); the batch's ``score`` is R of the
   placement as bound; an Event POST that failed in passing (no answer,
   429, 5xx) is sent again by the loop ``EVENT_RETRY_S`` (10 s) apart, ``EVENT_TRIES`` tries in all
   (client-go's broadcaster), from a queue of ``EVENT_RETRY_MAX`` Events at most;
4. a pod that fits nowhere gets ``PodScheduled=False``, reason ``Unschedulable``, with kube's
   message (``0/12 nodes are available: ...``; with no nodes at all ``no nodes available to
   schedule pods``, kube's ErrNoNodesAvailable) and a ``FailedScheduling`` Event; it waits in the
   unschedulable queue (below).

A batch is placed on the cluster config's ``resources`` plus every other resource its pods request
(a node that does not list one has none of it) and ``pods`` when some node has fewer free pod
slots than the batch has pods, as kube's NodeResourcesFit checks them all; the objective's
utilization counts the added ones in that batch only.

Bound pods are *assumed* (counted on their node) until the bound-pods watch shows that same pod
(same UID: a StatefulSet pod recreated under its old name is another pod) bound, as kube-scheduler's
cache does, so the next batch never double-books a node. An assumed pod stops counting only on
evidence: the watch shows it bound (it counts from the watch's copy then) or deleted, or a list of
the bound pods started after its Binding does not hold it (deleted meanwhile). kube-scheduler's
cache does not expire assumed pods either; a silent watch (a proxy that dropped its connection)
is taken for dead only after its ``timeoutSeconds`` plus a read timeout (up to about 3 min), and
the pod then still counts. A safety TTL (``assume_ttl_s``: ``ASSUME_TTL_S``, 10 min, or twice the
longest silence of the configured watches if longer) ends an assumption with no evidence at all,
logged as a warning. A pod bound here is never bound again under the same UID, however stale the
pending-pods watch (its nodeName cannot change), nor is one whose Binding got 409 while it is
unchanged, for the same TTL. Pods being deleted (``deletionTimestamp``) are
not scheduled, nor are pods with ``spec.schedulingGates`` (kube's SchedulingGates PreEnqueue): such
a pod gets ``PodScheduled=False`` reason ``SchedulingGated`` where the API server did not set it, and
is tried as soon as an update removes its gates.

Unschedulable pods wait as in kube-scheduler's queue (``pkg/scheduler/internal/queue``): each
failed attempt doubles the pod's backoff (``pod_initial_backoff_s`` 1 s, at most
``pod_max_backoff_s`` 10 s, counted from the attempt), and the pod is tried again only when its
backoff is over *and* the cluster changed since that attempt in a way that can fit it, or when it
has waited ``max_unschedulable_s`` (5 min) whatever happened. The changes that count are kube's
queueing hints for what the model reads (NodeResourcesFit, NodeAffinity, TaintToleration,
NodeUnschedulable, NodePorts, PodTopologySpread, InterPodAffinity): a node added, or its labels,
taints, ``spec.unschedulable``, allocatable (or capacity) changed (``NodeSchedulingPropertiesChange``;
conditions and annotations are not read); a bound pod deleted or finished (kube's pod informer
drops ``Succeeded`` / ``Failed`` pods: a delete), a Binding of this scheduler that failed, or a
pod it assumed bound that the watch never showed (the room counted for it is free again: kube's
``AssignedPodDelete`` move after a failed binding cycle), which moves only the pods that some node
rejected for their resources or for the pods on it (host ports, spread, inter-pod affinity) rather
than only for labels, taints, domains, latency or GPU model (NodeResourcesFit, NodePorts,
PodTopologySpread and InterPodAffinity register a pod delete; NodeAffinity, TaintToleration,
NodeUnschedulable and NodeName register node events only; the model has no volumes); a bound pod
added, relabelled or moved to another node, which moves only the pods some node rejected for pod
affinity or spread skew (InterPodAffinity and PodTopologySpread register pod adds and label
updates; logged only while such a pod waits); or a bound pod updated
so that it takes less (smaller requests, fewer GPU cards or a smaller share; requests as the model
counts them, so the status update of a kubelet actuating an in-place shrink counts), which moves
only those of these pods that request what it freed (GPU cards count as ``nvidia.com/gpu``:
NodeResourcesFit's ``isSchedulableAfterPodScaleDown``): a memory shrink moves no pod that asks
only for cpu, and cards that move or grow free nothing. A pod whose rejection is unknown (an
invalid spec) is moved by each of these. A bound
pod added (but as above), a node deleted, any other status update, a label (but as above) or
annotation change of a bound pod are not:
in a real cluster pod statuses change all the time, and each of them retried every unschedulable
pod. A pod
updated as kube's ``isPodUpdated`` sees it (anything but ``resourceVersion``, ``generation``,
``managedFields``, ``finalizers`` and status: the scheduler's own condition patch is no update),
or replaced (new UID), is tried at once with its attempts reset. Its condition is patched and
its ``FailedScheduling`` Event posted only when the outcome differs from the one already reported
(kube-scheduler skips an unchanged condition and aggregates repeated Events). An Event whose POST
failed is not counted as posted: it is posted again at the pod's next attempts (no sleep in the
loop), at most ``EVENT_TRIES`` tries in a row for a passing failure (no answer, 429, 5xx), once
for a refusal (other 4xx), then dropped until ``EVENT_REPEAT_S``. client-go's event broadcaster
retries a write with no answer up to 12 times, 10 s apart, then drops it; it drops at once
one the server refused, where a 5xx is retried here as the pod's next attempt comes anyway.
A Binding answered 409 is not retried for that pod (UID) while it is unchanged (an update as
``isPodUpdated`` sees it makes it a pod to try again); one that got no answer (status 0, after
``Kube.write_timeout_s``) or an error backs off (1, 2, 4 ... 30 s) and is retried only if the pod is
still pending; so do the pods of a batch that raised.
The loop sleeps until something can change a decision: the pending-pods watch (a pod arrives or
is updated), a cluster change that counts (above) while a pod waits in the unschedulable queue with
its backoff over (kube's ``MoveAllToActiveOrBackoffQueue``; a pod still in its backoff waits it
out and its timer wakes the loop), becoming leader, or the end of the next timer (a backoff, the
flush, a bind retry, an assumed pod's safety TTL); ``poll_s`` (1 s) at most, a safety net. The node and
bound-pod reflectors judge each change in their ``on_change`` hook, with its old and new object.
Two replicas use a Lease (:class:`~iro_fed.k8s.leader.LeaderElector`); only the current leader
binds, and it checks its leadership right before every Binding POST. On stop it gives the Lease
up only after its Bindings under way have ended.

:meth:`IroScheduler.health` (``/healthz`` of the metrics server, the liveness probe) reports the
loop wedged when its thread has ended, or when it has made no progress (a pass begun, a Binding
ended) for ``stall_s`` while pods of this scheduler are pending (by default 3 x its longest
legitimate step: ``poll_s`` + ``window_s`` + the solver's time limit + a Binding's write timeout,
60 s at least): the process is then restarted and the other replica takes the Lease.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.feasibility import (
    AFTER_FIT_FILTERS,
    GPU_CARDS_FILTER,
    POD_AFFINITY_FILTER,
    POD_FILTER_PREFIXES,
    SPREAD_FILTER,
    feasible_nodes,
    pod_key,
    resource_fit,
    static_filter,
)
from iro_fed.feedback import DEFAULT_CLASS, placement_terms
from iro_fed.k8s.client import (
    LIST_PAGE_SIZE,
    WATCH_JITTER,
    CallResult,
    ClusterCache,
    Kube,
    Reflector,
    child_rng,
    resource_version_of,
)
from iro_fed.k8s.quantity import QuantityError
from iro_fed.k8s.snapshot import (
    ANN_GPU_CARDS,
    GPU_RESOURCE,
    RESIZE_PENDING,
    TERMINAL_PHASES,
    ClusterConfig,
    ClusterModel,
    PlacedPods,
    PodRules,
    PodSpecError,
    Snapshot,
    apply_usage,
    node_doc,
    obj_key,
    obj_uid,
    pod_demand,
    pod_filter_failures,
    pod_rules,
    pods_by_node,
    reads_pods,
)
from iro_fed.model import ClusterState
from iro_fed.objective import Breakdown, evaluate, marginal
from iro_fed.problem_io import ProblemValidationError

log = logging.getLogger("iro_fed.k8s.scheduler")

SHRINK_LOG = 1024  # pod deletes and scale-downs kept to judge queued pods by; an older one counts for every pod
# What a bound pod's delete frees, in the log of _count_move: all it held, so it can fit any pod
# that some node rejected for its resources (whose _fit_needs hold this), whatever it requests.
POD_GONE = "*"
POD_FILTER_CODES = tuple(POD_FILTER_PREFIXES.values())  # the filters of the plugins that read the pods on a node
# What a bound pod added (or relabelled, or moved to another node) brings, in the same log: it can
# fit only the pods some node rejected for pod affinity or spread skew (kube's InterPodAffinity and
# PodTopologySpread register pod adds and label updates).
POD_ADDED = "+"
_ALL_HELD = frozenset({POD_GONE})  # what a bound pod's delete frees (see _frees_room)
# An assumed pod with no evidence either way (see the module's notes) stops counting after this at
# least: a last resort well past the longest silence of a bound-pods watch taken for dead (by
# default 119 s + a 60 s read, then a list), logged when it ends one.
ASSUME_TTL_S = 600.0
# A batch pod that fails against the pods before it tries its other nodes best first, this many at
# a time (then four times as many), rather than running the plugins over every node (_relocate).
RELOCATE_CHUNK = 32
BATCHES_KEPT = 100  # IroScheduler.batches keeps the latest results only (each holds one outcome per pod)
# Connections beyond the Binding workers the client's pool keeps: the three watches, the Lease, the
# loop (conditions, Events), the NodeMetrics feed, with room to spare. Fewer, and urllib3 discards
# the extra ones with "Connection pool is full" (every stop logged it with 8 workers and a pool of 10).
POOL_SPARE = 8
EVENT_REPEAT_S = 600.0  # an unchanged FailedScheduling Event is posted again after this (core Events expire after 1 h)
EVENT_TRIES = 12  # tries of one Event whose POST fails (client-go's maxTriesPerEvent), then dropped
EVENT_RETRY_S = 10.0  # a Scheduled Event whose POST failed is sent again after this (client-go's sleepDuration)
EVENT_RETRY_MAX = 1000  # Scheduled Events held for a retry at most (the oldest is dropped beyond)
# The loop counts as wedged (IroScheduler.health: the liveness probe's /healthz) when it has made no
# progress (a pass begun, a Binding ended) for this many of its longest legitimate steps (a sleep, the
# batch window, the solver's time limit, one Binding's write timeout), LOOP_STALL_MIN_S at least.
LOOP_STALL_PERIODS = 3
LOOP_STALL_MIN_S = 60.0
# kube-scheduler's defaults (podInitialBackoffDuration, podMaxBackoffDuration, podMaxInUnschedulablePodsDuration)
POD_INITIAL_BACKOFF_S = 1.0
POD_MAX_BACKOFF_S = 10.0
MAX_UNSCHEDULABLE_S = 300.0
# kube's texts: the API server's condition on a gated pod (the scheduler never tries one), and
# the scheduler's ErrNoNodesAvailable (a FitError lists nodes; with none it says this instead).
SCHEDULING_GATED = "SchedulingGated"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
NO_NODES_MESSAGE = "no nodes available to schedule pods"


@dataclass
class PodOutcome:
    """What happened to one pod of a batch."""

    key: str
    node: str | None
    status: str  # bound, unschedulable, deferred (tried again in the next batch), conflict, bind-error, invalid, not-leader
    message: str
    delta_r: float | None = None
    terms: dict[str, float] = field(default_factory=dict)
    runner_up: str | None = None
    gap: float | None = None
    attempts: int | None = None  # unschedulable / invalid: failed attempts in a row, this one included
    backoff_s: float | None = None  # ... and the backoff before the next one


@dataclass
class QueuedPod:
    """An unschedulable pod in the queue (the part of kube's ``QueuedPodInfo`` that is used)."""

    uid: str | None
    spec: str  # the pod as isPodUpdated compares it (see _pod_spec_key)
    resource_version: str | None  # the version ``spec`` was read from: same version, same spec
    attempts: int
    since: float  # the scheduler's clock at the last failed attempt
    cluster: int  # the count of cluster changes that can fit pods (_moves) when that attempt started
    backoff_s: float
    # What a bound pod's delete (POD_GONE) or scale-down must free to fit it (see _fit_needs);
    # None: any of them (its rejection is unknown).
    wants: frozenset[str] | None = None
    judged: int = 0  # the logged deletes and scale-downs up to this count were judged and fit it not

    @property
    def retry_at(self) -> float:
        return self.since + self.backoff_s


@dataclass
class Assumed:
    """A pod bound here that the bound-pods watch has not shown yet (see the module's notes)."""

    pod: dict[str, Any]  # the pod as bound (nodeName, GPU cards annotation)
    uid: str | None
    since: float  # the scheduler's clock when its Binding succeeded
    lists: int  # bound-pods lists started by then: a list started after it would show the pod


@dataclass
class EventRetry:
    """A Scheduled Event whose POST failed, kept to be sent again (the same body)."""

    namespace: str
    body: dict[str, Any]
    tries: int  # failed POSTs so far
    retry_at: float  # the scheduler's clock


@dataclass
class BatchResult:
    pods: list[PodOutcome]
    solver: str
    solved_by: str
    fallback_reason: str | None
    score: float | None
    solve_s: float


def explain_placement(problem: Any, state: ClusterState, assignment: np.ndarray, w: int,
                      with_pod: Breakdown | None = None,
                      usable: Callable[[list[int]], int | None] | None = None, late: bool = False,
                      ) -> tuple[float, dict[str, float], str | None, float | None]:
    """For placed workload ``w``: its change of R and of each weighted term (R with the pod minus
    R without it, both from :func:`evaluate`), and the best other feasible node with the gap in
    R (from :func:`marginal` on the state without the pod). ``with_pod``: ``evaluate(problem,
    assignment)`` when the caller already has it (the same for every pod of a batch). ``usable``:
    given the other feasible nodes best first, the first the pod could be placed on (the batch
    check: pod affinity, spread and host ports against the pods of its batch), None: none; without
    it the best of them is the runner-up. ``late``: a pod placed after the pods of its batch it
    waited for (:func:`_place_waiter`), which the snapshot refused everywhere: its nodes are those
    with room whose first failing filter is one kube runs after NodeResourcesFit, which ``usable``
    judges again (against the bound pods too)."""
    n = int(assignment[w])
    delta_r, terms = placement_terms(problem, assignment, w, with_pod)
    cards = state.gpu_cards.get(w)
    state.remove(w)
    try:
        cand = np.flatnonzero(_late_nodes(problem, state, w) if late and usable is not None else feasible_nodes(state, w))
        delta = marginal(problem, state, w, cand)
        others = np.flatnonzero(cand != n)
        chosen = delta[cand == n]
        j: int | None = None
        if others.size and usable is None:
            j = int(others[np.argmax(delta[others])])
        elif others.size:
            ranked = others[np.argsort(-delta[others], kind="stable")]  # ties: lowest index first, as argmax
            nodes = cand[ranked].tolist()
            node = usable(nodes)
            j = None if node is None else int(ranked[nodes.index(node)])
        runner, gap = None, None
        if j is not None:
            runner = problem.nodes[int(cand[j])].name
            gap = float(chosen[0] - delta[j]) if chosen.size else None
    finally:
        state.place(w, n, cards)
    return delta_r, terms, runner, gap


def _policy_registry(solver: str, params: Mapping[str, Any]) -> Path | None:
    """The policy-registry folder a ``dqn`` solver's ``policy`` setting names (None: a checkpoint
    file, or another solver). A path not there yet counts: ``--fine-tune-registry`` with the same
    folder makes it after the scheduler is built, and its first version is then loaded."""
    policy = params.get("policy")
    if solver != "dqn" or not isinstance(policy, str) or not policy or Path(policy).is_file():
        return None
    return Path(policy)


def _latest_pointer(registry: Path) -> str | None:
    """What a registry's ``latest`` names (its text, or a symlink's target); None: none readable."""
    latest = registry / "latest"
    try:
        return "-> " + os.readlink(latest) if latest.is_symlink() else latest.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


class IroScheduler:
    """The scheduler. ``run()`` blocks until :meth:`stop`; :meth:`schedule_batch` is one step."""

    def __init__(self, kube: Kube, name: str = "iro", solver: str = "greedy-objective",
                 solver_params: dict[str, Any] | None = None, fallback: str = "kube-default",
                 time_limit_s: float = 5.0, window_s: float = 1.0, max_batch: int = 500,
                 config: ClusterConfig | None = None, identity: str | None = None,
                 lease_name: str | None = None, lease_namespace: str = "iro-system",
                 lease_duration: int = 15, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 leader_election: bool = True, feedback: Any = None, metrics_poll_s: float | None = None,
                 bind_workers: int = 8, watch_timeout_s: int = 60,
                 pod_initial_backoff_s: float = POD_INITIAL_BACKOFF_S, pod_max_backoff_s: float = POD_MAX_BACKOFF_S,
                 max_unschedulable_s: float = MAX_UNSCHEDULABLE_S, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, watch_jitter: float = WATCH_JITTER,
                 rng: random.Random | None = None, assume_ttl_s: float | None = None,
                 stall_s: float | None = None) -> None:
        """``watch_timeout_s``, ``watch_jitter``: the watches' timeouts (:class:`Reflector`: each
        60..119 s by default, as client-go's); ``rng`` seeds their draws (repeatable in tests).
        ``assume_ttl_s``: the safety TTL of an assumed pod (None: ``ASSUME_TTL_S`` or twice the
        longest silence of a watch, whichever is longer). ``stall_s``: how long the loop may go
        without progress while pods wait before :meth:`health` reports it wedged (None:
        ``LOOP_STALL_PERIODS`` times its longest legitimate step, ``LOOP_STALL_MIN_S`` at least)."""
        import solvers

        if not 0 <= window_s <= threading.TIMEOUT_MAX:  # nan passed `< 0`; inf made Event.wait raise in the loop
            raise ValueError(f"window_s: must be >= 0 and at most {threading.TIMEOUT_MAX}, got {window_s}")
        if max_batch < 1:
            raise ValueError(f"max_batch: must be >= 1, got {max_batch}")
        if not pod_initial_backoff_s > 0:
            raise ValueError(f"pod_initial_backoff_s: must be > 0, got {pod_initial_backoff_s}")
        if not pod_max_backoff_s >= pod_initial_backoff_s:
            raise ValueError(f"pod_max_backoff_s: must be >= pod_initial_backoff_s ({pod_initial_backoff_s}), got {pod_max_backoff_s}")
        if not max_unschedulable_s > 0:
            raise ValueError(f"max_unschedulable_s: must be > 0, got {max_unschedulable_s}")
        if not 0 < poll_s <= threading.TIMEOUT_MAX:  # Event.wait raises OverflowError beyond TIMEOUT_MAX
            raise ValueError(f"poll_s: must be > 0 and at most {threading.TIMEOUT_MAX}, got {poll_s}")
        # A watch is taken for dead after its timeoutSeconds plus a read timeout; a list then waits a
        # read timeout per try: twice that is a silence no live watch has.
        silence = watch_timeout_s * (1.0 + watch_jitter) + 2 * float(getattr(kube, "read_timeout_s", 60.0))
        self.assume_ttl_s = float(assume_ttl_s) if assume_ttl_s is not None else max(ASSUME_TTL_S, 2 * silence)
        if not self.assume_ttl_s > 0:
            raise ValueError(f"assume_ttl_s: must be > 0, got {assume_ttl_s}")
        # A pass: a sleep (poll_s at most), the batch window, the solve (then the fallback's
        # heuristic) and Bindings, each of which ends (and counts as progress) within the write timeout.
        step_s = poll_s + window_s + time_limit_s + float(getattr(kube, "write_timeout_s", 30.0))
        self.stall_s = float(stall_s) if stall_s is not None else max(LOOP_STALL_MIN_S, LOOP_STALL_PERIODS * step_s)
        if not self.stall_s > 0:
            raise ValueError(f"stall_s: must be > 0, got {stall_s}")
        self.pod_initial_backoff_s = float(pod_initial_backoff_s)
        self.pod_max_backoff_s = float(pod_max_backoff_s)
        self.max_unschedulable_s = float(max_unschedulable_s)
        self.poll_s = float(poll_s)  # the longest sleep with no event and no timer due: only a safety net
        self.clock = clock  # every delay of the queue is measured on it (tests drive a fake one)
        self.kube = kube
        self.name = name
        self.solver_name = solver
        self.window_s = window_s
        self.max_batch = max_batch
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        # Built once here so a bad solver name or setting fails at start-up, not per batch.
        self._solver_args = {"primary": solver, "primary_params": dict(solver_params or {}), "fallback": fallback,
                             "time_limit_s": time_limit_s}
        self.solver = solvers.make("fallback", **self._solver_args)
        # Pod scoring (every bound pod walked per model) only where the solver or its fallback reads
        # it (a policy reload rebuilds the same classes: the answer stays).
        self._scoring = solvers.reads_pod_scoring(self.solver)
        # A dqn policy read from a registry folder follows its ``latest`` (the fine-tunes this
        # process publishes with --fine-tune-registry, or anyone's): reloaded before a batch.
        self.policy_registry = _policy_registry(solver, solver_params or {})
        self.policy_version = _latest_pointer(self.policy_registry) if self.policy_registry else None
        self._policy_refused: str | None = None  # the pointer of a version that failed to load
        self.config = config or ClusterConfig()
        # refresh_s=0: no background model builds; the scheduler builds its own (with the pods it
        # assumed) from the cache's stores when it solves.
        self.cache = ClusterCache(kube, self.config, watch_timeout_s=watch_timeout_s, refresh_s=0,
                                  watch_jitter=watch_jitter, rng=child_rng(rng))
        # Each node / bound-pod change is judged with its old and new object (see the module's notes).
        self.cache.nodes.on_change = self._node_changed
        self.cache.pods.on_change = self._bound_pod_changed
        # Cluster changes that can fit an unschedulable pod (kube's moveRequestCycle), under _lock:
        # the count of them, the count at the latest one that can fit any pod, and the latest
        # pod deletes and scale-downs as (count, resources freed), which fit only pods that want
        # one of those.
        self._moves = 0
        self._moved_all = 0
        self._shrinks: collections.deque[tuple[int, frozenset[str]]] = collections.deque()
        self._add_waiters: set[str] = set()  # queued pods (keys) that a bound pod added may fit (POD_ADDED)
        self._wake = threading.Event()
        self.pending = Reflector(kube.core.list_pod_for_all_namespaces, "pending-pods",
                                 field_selector=f"spec.schedulerName={name},spec.nodeName=",
                                 on_event=lambda t, o: self._wake.set(), watch_timeout_s=watch_timeout_s,
                                 read_timeout_s=kube.read_timeout_s, watch_jitter=watch_jitter, rng=child_rng(rng),
                                 page_size=getattr(kube, "list_page_size", LIST_PAGE_SIZE))
        self.elector = None
        if leader_election:
            from iro_fed.k8s.leader import LeaderElector

            self.elector = LeaderElector(kube, lease_name or f"{name}-scheduler", lease_namespace, self.identity,
                                         lease_duration, renew_deadline, retry_period, on_started=self._wake.set)
        self.feedback = feedback
        self.metrics_feed = None
        if feedback is not None and metrics_poll_s:
            from iro_fed.k8s.feedback import NodeMetricsFeed

            # Judged against what each node holds now (the cache), not the requests recorded with
            # its latest placement: pods finish and are deleted meanwhile.
            self.metrics_feed = NodeMetricsFeed(kube, feedback, metrics_poll_s, current=self._node_cpu)
        self._feed_pods: tuple[int, dict[str, list[Mapping[str, Any]]]] = (-1, {})  # (pods version, pods by node)
        self._assumed: dict[str, Assumed] = {}  # key -> the pod bound here, until the bound-pods watch settles it
        # key -> UID of a pod bound here while the pending-pods watch still shows it: never bound again
        self._bound_here: dict[str, str | None] = {}
        # key -> (UID whose bind got 409, the pod's spec then (_pod_spec_key), when): an update
        # (a scheduling gate removed, say) or a new UID makes it a pod to try again
        self._conflicts: dict[str, tuple[str | None, str, float]] = {}
        # key -> (UID, when its SchedulingGated condition was patched (None: failed), when tried)
        self._gated: dict[str, tuple[str | None, float | None, float]] = {}
        self._unschedulable: dict[str, QueuedPod] = {}
        # key -> (UID, reason, message, when its Event was posted or dropped (None: neither yet),
        # whether the condition is patched, failed POSTs of the Event in a row)
        self._reported: dict[str, tuple[str | None, str, str, float | None, bool, int]] = {}
        self._backoff: dict[str, tuple[float, float]] = {}  # key -> (retry after, last delay)
        # key -> its Scheduled Event whose POST failed, oldest first; sent again by the loop
        self._event_retries: dict[str, EventRetry] = {}
        self._lock = threading.Lock()
        self._node_docs: dict[tuple, dict[str, Any]] = {}
        # The bound pods' rules as the pod-reading plugins parse them, by (uid, resourceVersion),
        # for the next batch's model: one bound pod with required anti-affinity makes every batch
        # read them all (ClusterModel.placed), and 20,000 parses cost 0.2-0.5 s a batch.
        self._placed_rules: dict[tuple[str, str], PodRules | PodSpecError] = {}
        self.bind_workers = bind_workers
        ensure_pool = getattr(kube, "ensure_pool_size", None)
        if callable(ensure_pool):
            ensure_pool(max(bind_workers, 1) + POOL_SPARE)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(bind_workers, 1), thread_name_prefix="iro-bind")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The latest batches (BATCHES_KEPT: a soak kept every one, about 1 KB per pod attempt, for
        # ever); batch_count and solve_s_total count them all.
        self.batches: collections.deque[BatchResult] = collections.deque(maxlen=BATCHES_KEPT)
        self.batch_count = 0
        self.solve_s_total = 0.0
        self._last_deferred: set[str] = set()  # the pods the latest batch left for the next one (loop's thread)
        self._progress_at = self.clock()  # the loop's latest progress (a pass begun, a Binding ended): health()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> IroScheduler:
        if self._thread is not None or self._stop.is_set():
            # A second loop (and second watches) would solve and bind the same pods twice.
            raise RuntimeError("IroScheduler.start: already started (or stopped); make a new scheduler")
        self.cache.start()
        self.pending.start()
        if self.elector is not None:
            self.elector.start()
        if self.metrics_feed is not None:
            self.metrics_feed.start()
        self._progress_at = self.clock()
        self._thread = threading.Thread(target=self.run, name=f"iro-scheduler-{self.identity}", daemon=True)
        self._thread.start()
        return self

    def health(self) -> tuple[bool, str]:
        """Whether the scheduling loop is alive, for a liveness probe (``/healthz``): False when its
        thread has ended (an error escaped it), or when it has made no progress (a pass begun, a
        Binding ended) for ``stall_s`` while pods of this scheduler are pending: a wedged loop
        (a call that never returns, a deadlock) whose process would otherwise look alive for ever.
        Idle with nothing pending, before :meth:`start` and while stopping, it is healthy. With the
        text that says why."""
        if self._thread is None or self._stop.is_set():
            return True, "not running" if self._thread is None else "stopping"
        if not self._thread.is_alive():
            return False, "the scheduling loop has ended (see the log for the error)"
        idle = self.clock() - self._progress_at
        if idle <= self.stall_s:
            return True, f"scheduling loop progressed {idle:.0f} s ago"
        with self.pending.changed:
            pending = len(self.pending.store)
        if not pending:
            return True, f"scheduling loop idle for {idle:.0f} s, no pod pending"
        return False, (f"scheduling loop made no progress for {idle:.0f} s (limit {self.stall_s:.0f} s) "
                       f"with {pending} pod(s) pending")

    def stop(self, release: bool = True) -> None:
        """Stop; ``release=False`` leaves the lease to expire (what a crash does).

        Campaigning stops first (no Binding starts after that: each checks leadership), then the
        loop and the Bindings under way end, and only then is the lease given up: released
        earlier, a follower took over and bound while this replica's POSTs were outstanding."""
        self._stop.set()
        self._wake.set()
        if self.elector is not None:
            self.elector.stop(release=False)
        if self._thread is not None:
            # A batch of one binds on the loop's thread: wait out its write timeout.
            self._thread.join(timeout=max(10.0, float(getattr(self.kube, "write_timeout_s", 30.0)) + 5.0))
        if self.metrics_feed is not None:
            self.metrics_feed.stop()
        self._pool.shutdown(wait=True)
        if self.elector is not None and release:
            self.elector.release()
        self.pending.stop()
        self.cache.stop()

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def run(self) -> None:
        try:
            self._loop()
        except Exception:  # nothing is scheduled any more: health() says so (the liveness probe restarts it)
            log.exception("the scheduling loop ended on an error; /healthz now fails")

    def _loop(self) -> None:
        while not self._stop.is_set() and not (self.cache.synced and self.pending.synced.is_set()):
            self._progress_at = self.clock()
            self.cache.wait_synced(0.1)
            self.pending.synced.wait(0.1)
        while not self._stop.is_set():
            self._progress_at = self.clock()
            self._wake.wait(timeout=self._next_wake_s())
            self._wake.clear()
            self._progress_at = self.clock()
            if self._stop.is_set():
                break
            self._retry_events()  # also on a replica that lost the lease: its Bindings happened
            if not self.is_leader() or not (self.cache.synced and self.pending.synced.is_set()):
                continue
            ready = self.ready_pods()
            if not ready:
                continue
            # Gather the rest of the batch; not for the pods the last batch left for this one alone
            # (kube tries them at once), which waited a window per batch.
            if self.window_s and not self._last_deferred.issuperset(obj_key(p) for p in ready):
                self._stop.wait(self.window_s)
            pods = self.ready_pods()[: self.max_batch]
            if pods and self.is_leader():
                try:
                    self._record(self.schedule_batch(pods))
                except Exception:  # keep scheduling; the pods stay pending and are retried after a backoff
                    # (kube's queue puts a pod whose attempt errored in backoffQ): tried again at once,
                    # a batch that fails every time would spin the loop and the log.
                    with self._lock:
                        for pod in pods:
                            self._back_off(obj_key(pod))
                    log.exception("batch of %d pods failed", len(pods))
            if self.ready_pods():
                self._wake.set()

    def _record(self, result: BatchResult) -> None:
        self._last_deferred = {o.key for o in result.pods if o.status == "deferred"}
        self.batches.append(result)
        self.batch_count += 1
        self.solve_s_total += result.solve_s

    def _node_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """The nodes reflector's ``on_change``: a node added, or one whose fields the model reads
        changed, can fit a queued pod; a node deleted or a status heartbeat cannot."""
        if new is not None and (old is None or _node_fields(old) != _node_fields(new)):
            self._cluster_moved()

    def _bound_pod_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """The bound-pods reflector's ``on_change``: a pod that frees room counts, and a pod added
        (or relabelled) while a queued pod waits for one (:data:`POD_ADDED`). An assumed pod the
        watch shows (bound, or deleted: added and deleted between two passes of the loop) is
        settled here, after the store holds the change (:meth:`_model` reads the assumed pods first)."""
        obj = new if new is not None else old
        if obj is not None:
            key = obj_key(obj)
            with self._lock:
                a = self._assumed.get(key)
                if a is not None and a.uid == obj_uid(obj):
                    self._assumed.pop(key)
        try:
            freed = _frees_room(old, new, self.config.resources)
            added = _adds_a_pod(old, new)
        except Exception:  # never end the reflector's watch over one odd object: count it for every pod
            log.debug("bound pod change not judged; counted as a cluster change", exc_info=True)
            self._cluster_moved()
            return
        if added and self._waiting_for_adds():
            freed = freed | {POD_ADDED}
        if freed:
            self._cluster_moved(freed)

    def _waiting_for_adds(self) -> bool:
        """Whether a queued pod waits for a bound pod added (:data:`POD_ADDED`): only then is an add
        logged, so that the pods this scheduler binds do not fill the log (_count_move) for nothing."""
        with self._lock:
            stale = []
            found = False
            for key in self._add_waiters:  # no copy: the keys leave the set when their pod leaves the queue
                q = self._unschedulable.get(key)
                if q is not None and q.wants is not None and POD_ADDED in q.wants:
                    found = True
                    break
                stale.append(key)
            self._add_waiters.difference_update(stale)
        return found

    def _cluster_moved(self, freed: frozenset[str] | None = None) -> None:
        """A cluster change that can fit queued pods: they are tried again once their backoff is
        over (kube's ``MoveAllToActiveOrBackoffQueue``); ``freed``: a pod delete or scale-down,
        which can fit only the pods that want one of these (:meth:`_count_move`). Called after the
        store holds the change, so a loop woken here, or an attempt that reads this count, sees it."""
        with self._lock:
            self._count_move(freed)
        if self._ready_on_change():
            self._wake.set()

    def _count_move(self, freed: frozenset[str] | None = None) -> None:
        """Under ``_lock``: count a cluster change that can fit every queued pod (``freed`` None),
        or a pod delete (``{POD_GONE}``) or scale-down that freed ``freed``. These are logged
        rather than marked on the queued pods: a pod whose attempt is under way when one comes is
        queued afterwards, with the count read when its attempt began, and judged by the log then
        (kube's in-flight events)."""
        self._moves += 1
        if freed is None:
            self._moved_all = self._moves
            return
        self._shrinks.append((self._moves, freed))
        if len(self._shrinks) > SHRINK_LOG:  # forgotten: from now on it counts for every pod
            self._moved_all = max(self._moved_all, self._shrinks.popleft()[0])

    def _changed_for(self, q: QueuedPod) -> bool:
        """Under ``_lock``: whether a cluster change since ``q``'s last attempt began can fit it.
        Each logged delete or scale-down is judged once per queued pod (``q.judged``): the queue is
        read on every pass of the loop and every cluster change."""
        if self._moved_all > q.cluster:
            return True
        since = max(q.cluster, q.judged)
        for count, freed in reversed(self._shrinks):
            if count <= since:
                break
            if q.wants is None or freed & q.wants:
                return True
        q.judged = self._moves  # an entry dropped from the log later moves _moved_all past it
        return False

    def _ready_on_change(self) -> bool:
        """Whether a cluster change makes a queued pod ready, so that the loop must wake: one
        whose backoff is over and whose last attempt saw an older cluster (kube moves it to
        activeQ). A pod still backing off is left to its backoff timer, which ends the loop's
        sleep anyway and then sees the change in the versions (kube's backoffQ); so is a pod
        whose failed attempt is still being recorded. A replica that is not the leader schedules
        nothing (it is woken when it becomes leader)."""
        if not self.is_leader():
            return False
        now = self.clock()
        with self._lock:
            return any(now >= q.retry_at and self._changed_for(q) for q in self._unschedulable.values())

    # --- queue -----------------------------------------------------------------------------------

    def backoff_s(self, attempts: int) -> float:
        """kube's ``calculateBackoffDuration``: the initial backoff, doubled per further attempt,
        at most ``pod_max_backoff_s``."""
        delay = self.pod_initial_backoff_s
        for _ in range(1, attempts):
            if delay >= self.pod_max_backoff_s / 2:
                return self.pod_max_backoff_s
            delay *= 2
        return min(delay, self.pod_max_backoff_s)

    def queue_status(self) -> dict[str, dict[str, Any]]:
        """The unschedulable pods: ``namespace/name`` -> attempts, backoff, seconds until the
        backoff ends (0: over; the pod then waits for a cluster change), seconds until the
        ``max_unschedulable_s`` flush, and whether the cluster changed since its last attempt."""
        now = self.clock()
        with self._lock:
            queued = [(key, q, self._changed_for(q)) for key, q in self._unschedulable.items()]
        return {key: {"attempts": q.attempts, "backoff_s": q.backoff_s,
                      "retry_in_s": max(q.retry_at - now, 0.0),
                      "flush_in_s": max(q.since + self.max_unschedulable_s - now, 0.0),
                      "cluster_changed": changed}
                for key, q, changed in queued}

    def _next_wake_s(self) -> float:
        """How long the loop may sleep: until the next timer of the queue ends (an unschedulable
        pod's backoff or flush, a failed bind's backoff, an assumed or 409'd pod's ``assume_ttl_s``),
        within 0.05 s .. ``poll_s``. Watch events wake it earlier (see :meth:`_cluster_moved`).
        Each delay is computed as its check in :meth:`ready_pods` computes it, so the loop never
        wakes just short of a timer and then sleeps on."""
        now = self.clock()
        with self._lock:
            due = [t for q in self._unschedulable.values()
                   for t in (q.retry_at - now, self.max_unschedulable_s - (now - q.since))]
            due += [until - now for until, _ in self._backoff.values()]
            due += [e.retry_at - now for e in self._event_retries.values()]
            # These expire strictly after assume_ttl_s: at exactly 0 the next wake is 0.05 s on.
            ttl = [self.assume_ttl_s - (now - since)
                   for since in (*(a.since for a in self._assumed.values()), *(t for *_, t in self._conflicts.values()))]
        ahead = [d for d in due if d > 0] + [d for d in ttl if d >= 0]
        return min(max(min(ahead, default=self.poll_s), 0.05), self.poll_s)

    def _still_unschedulable(self, key: str, pod: Mapping[str, Any], uid: str | None, now: float) -> bool:
        """Whether ``pod``, which failed before, is still to wait (see the module's notes)."""
        with self._lock:
            q = self._unschedulable.get(key)
            changed = q is not None and self._changed_for(q)
        if q is None:
            return False
        rv = resource_version_of(pod)
        if q.uid != uid or (rv != q.resource_version and _pod_spec_key(pod) != q.spec):
            with self._lock:  # replaced or updated: a new start, attempts reset (tried now)
                if self._unschedulable.get(key) is q:
                    self._unschedulable.pop(key)
                    self._add_waiters.discard(key)
            return False
        if rv != q.resource_version:
            q.resource_version = rv  # a status change only (our own condition patch, say)
        if now - q.since >= self.max_unschedulable_s:
            return False  # flushed after waiting long enough, changed cluster or not
        return not (now >= q.retry_at and changed)

    def ready_pods(self) -> list[dict[str, Any]]:
        """Pending pods not assumed bound, not backing off after a failed bind or batch and not waiting
        in the unschedulable queue, in kube's queue order (priority, then creation)."""
        now = self.clock()
        with self.pending.changed:
            pending = dict(self.pending.store)
        pending_uids = {key: obj_uid(pod) for key, pod in pending.items()}
        with self._lock:
            assumed_keys = list(self._assumed)
            # read before the store: it holds this list's result at least (an assumed pod bound before
            # the list began and not in it is gone: a list begun after a Binding is a consistent read)
            listed = self.cache.pods.lists_applied
        bound_uids = self._bound_uids([*pending_uids, *assumed_keys])
        # An assumed pod counts on its node until the bound-pods watch shows that very pod (same
        # UID: a pod of the same name there may be its deleted predecessor; it leaves the pending
        # watch earlier, so that is not the signal), or a list started after its Binding does not
        # hold it (deleted); no time makes it free but the safety TTL (see the module's notes).
        with self._lock:
            for key, a in list(self._assumed.items()):
                if bound_uids.get(key) == a.uid:
                    self._assumed.pop(key, None)
                elif listed > a.lists or now - a.since > self.assume_ttl_s:  # the room counted for it is free
                    self._assumed.pop(key, None)
                    self._count_move(_ALL_HELD)
                    if listed > a.lists:
                        log.info("%s: bound to %s but gone from the bound pods listed since: no longer counted",
                                 key, _field(a.pod, "spec", "nodeName"))
                    else:
                        log.warning("%s: bound to %s %.0f s ago and never shown by the bound-pods watch, nor by a "
                                    "list since: no longer counted (safety TTL)", key,
                                    _field(a.pod, "spec", "nodeName"), now - a.since)
            for key, uid in list(self._bound_here.items()):
                if pending_uids.get(key) != uid:  # the pending-pods watch caught up (or it was replaced)
                    self._bound_here.pop(key, None)
            bound_here = dict(self._bound_here)
            for key, (uid, spec, since) in list(self._conflicts.items()):
                if pending_uids.get(key) != uid or now - since > self.assume_ttl_s:
                    self._conflicts.pop(key, None)
                elif _pod_spec_key(pending[key]) != spec:  # updated (a gate removed): a pod to try again
                    self._conflicts.pop(key, None)
            for table in (self._unschedulable, self._reported, self._backoff, self._gated):  # pods gone from the queue
                for key in [k for k in table if k not in pending_uids]:
                    table.pop(key, None)
            self._add_waiters.intersection_update(self._unschedulable)  # (deleted, bound elsewhere)
            assumed = set(self._assumed)
            backoff = {key for key, (until, _) in self._backoff.items() if until > now}
            conflicts = {key: uid for key, (uid, _, _) in self._conflicts.items()}
        pods = []
        gated = []
        for key, pod in pending.items():
            if key in assumed or key in backoff:
                continue
            uid = pending_uids[key]
            if key in bound_here and bound_here[key] == uid:
                continue  # bound here (the pending watch is late): a Binding would get 409, or 404 once deleted
            if key in conflicts and conflicts[key] == uid:
                continue  # its Binding got 409: not retried blindly (a recreated pod has a new UID)
            if key in bound_uids and bound_uids[key] == uid:
                continue  # bound already; the pending watch has not caught up yet
            meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
            if meta.get("deletionTimestamp"):
                continue  # being deleted: kube-scheduler skips such pods too
            spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
            if spec.get("schedulingGates"):
                gated.append(pod)  # kube's SchedulingGates PreEnqueue: never tried until the gates go
                continue
            status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
            if status.get("phase") in TERMINAL_PHASES:
                continue
            if self._still_unschedulable(key, pod, uid, now):
                continue
            pods.append(pod)
        pods.sort(key=_queue_key)
        self._report_gated(gated, now)
        return pods

    def _report_gated(self, gated: Sequence[Mapping[str, Any]], now: float) -> None:
        """Set ``PodScheduled=False`` reason ``SchedulingGated`` on each gated pod once (the API
        server sets it on create; it is patched here where it is missing), leader only; a failed
        patch is tried again EVENT_RETRY_S later."""
        if not gated or not self.is_leader():
            return
        for pod in gated:
            key, uid = obj_key(pod), obj_uid(pod)
            with self._lock:
                last = self._gated.get(key)
            if last is not None and last[0] == uid and (last[1] is not None or now - last[2] < EVENT_RETRY_S):
                continue
            current = _pod_scheduled(pod)
            if current is not None and current.get("status") == "False" and current.get("reason") == SCHEDULING_GATED:
                with self._lock:
                    self._gated[key] = (uid, now, now)
                continue
            cond = {"type": "PodScheduled", "status": "False", "reason": SCHEDULING_GATED,
                    "message": SCHEDULING_GATED_MESSAGE, "lastProbeTime": None,
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            meta = pod.get("metadata") or {}
            result = self.kube.patch_pod_status(meta.get("namespace", "default"), meta["name"],
                                                {"status": {"conditions": [cond]}})
            self._progress_at = self.clock()
            if not result.ok:
                log.warning("SchedulingGated condition of %s not patched: HTTP %s %s", key, result.status, result.message)
            with self._lock:
                self._gated[key] = (uid, now if result.ok else None, now)

    # --- the NodeMetrics feed ------------------------------------------------------------------

    def _node_cpu(self, node: str) -> tuple[dict[str, float], float] | None:
        """``node``'s CPU requests now (millicores, one class as :meth:`FeedbackLoop.record_placement`
        records them) and its allocatable CPU, read as the cluster model reads them (the bound pods
        of the cache that have not finished, plus those bound here that the watch has not shown
        yet); None when the cache does not hold the node or cannot read it. For the feed's thread."""
        res = self.config.resources
        if "cpu" not in res:
            return None
        with self.cache.nodes.changed:
            obj = self.cache.nodes.store.get(node)
        if obj is None:
            return None
        with self._lock:
            assumed = [(key, a.pod) for key, a in self._assumed.items() if _field(a.pod, "spec", "nodeName") == node]
        with self.cache.pods.changed:
            version = self.cache.pods.version
            store = self.cache.pods.store
            bound = list(store.values()) if version != self._feed_pods[0] else None
            extra = _unconfirmed(assumed, store)
        if bound is not None:  # one pass over the bound pods per change of them, not one per node
            self._feed_pods = (version, pods_by_node(bound))
        try:
            doc = node_doc(obj, res)
            apply_usage(doc, [*self._feed_pods[1].get(node, ()), *extra], res, [])
        except ValueError:  # PodSpecError, QuantityError: an unreadable node, nothing to compare with
            return None
        return {DEFAULT_CLASS: float(doc["allocated"]["cpu"])}, float(doc["capacity"]["cpu"])

    # --- one batch -------------------------------------------------------------------------------

    def _bound_uids(self, keys: Iterable[str]) -> dict[str, str | None]:
        """The UIDs of the bound pods (bound-pods watch) among ``keys``: a lookup per key, not a
        pass over every bound pod of the cluster on each queue read."""
        with self.cache.pods.changed:
            store = self.cache.pods.store
            return {key: obj_uid(store[key]) for key in keys if key in store}

    def _model(self, pods: Sequence[Mapping[str, Any]]) -> ClusterModel:
        """The cluster with the pods bound and assumed, built once for the batch ``pods``: they
        are placed on the configured resources plus what they request beyond them (and ``pods``
        when a node is short of slots), as kube checks every requested resource and the kubelet
        refuses a pod bound past one (OutOf...). The added ones bound fit only: a pod's score
        does not depend on what the other pods of its batch request."""
        # The assumed pods first: one the watch settles meanwhile is in the store read after.
        with self._lock:
            assumed = [(key, a.pod) for key, a in self._assumed.items()]
        with self.cache.pods.changed:
            store = dict(self.cache.pods.store)
        return ClusterModel(self.cache.nodes.items(), [*store.values(), *_unconfirmed(assumed, store)], self.config,
                            doc_cache=self._node_docs, pending=pods, rules_cache=self._placed_rules)

    def refresh_policy(self) -> bool:
        """With a dqn policy registry: when its ``latest`` names another version than the one in
        use, build the solver on it and swap it in (True). A version that fails to load is logged
        once and the last good policy stays (as the edge agent's registry poll does); the solver
        would otherwise fall back to the heuristic on every batch."""
        import solvers

        if self.policy_registry is None:
            return False
        pointer = _latest_pointer(self.policy_registry)
        if pointer is None or pointer in (self.policy_version, self._policy_refused):
            return False
        try:
            fresh = solvers.make("fallback", **self._solver_args)
            # Its primary's model now: the wrapper would hide a bad policy by falling back on every batch.
            fresh.preload()
        except Exception as exc:  # a half-written, corrupt or incompatible version: keep the last good one
            self._policy_refused = pointer
            log.warning("policy registry %s: latest %r cannot be loaded (%s: %s); still using %r",
                        self.policy_registry, pointer, type(exc).__name__, exc, self.policy_version)
            return False
        log.info("policy registry %s: now using %r (was %r)", self.policy_registry, pointer, self.policy_version)
        self.solver, self.policy_version, self._policy_refused = fresh, pointer, None
        return True

    def schedule_batch(self, pods: list[dict[str, Any]]) -> BatchResult:
        """Solve ``pods`` jointly on the current cluster, bind, record events and conditions."""
        version = self._moves
        model = self._model(pods)
        outcomes: list[PodOutcome] = []
        try:
            snap = model.with_pods(pods, scoring=self._scoring)
            good = list(pods)
        except (PodSpecError, QuantityError, ProblemValidationError):
            good = []
            for pod in pods:  # find the pods the model cannot read: they must not block the others
                try:
                    model.check_pod(pod)
                    good.append(pod)
                except (PodSpecError, QuantityError, ProblemValidationError) as exc:
                    outcomes.append(self._unschedulable_pod(pod, f"invalid pod spec: {exc}", "SchedulerError", version))
            if not good:
                log.info("batch of %d: %s", len(pods), _batch_counts(outcomes))
                return BatchResult(outcomes, self.solver_name, "", None, None, 0.0)
            snap = model.with_pods(good, scoring=self._scoring)
        problem = snap.problem
        if problem.num_nodes == 0:
            # kube's ErrNoNodesAvailable, not a FitError ("0/0 nodes are available."): its status is
            # UnschedulableAndUnresolvable, so reason Unschedulable; a node added moves the pods.
            outcomes.extend(self._unschedulable_pod(pod, NO_NODES_MESSAGE, "Unschedulable", version, frozenset())
                            for pod in good)
            log.info("batch of %d: no nodes available to schedule pods (%s)", len(pods), _batch_counts(outcomes))
            return BatchResult(outcomes, self.solver_name, "", None, None, 0.0)
        self.refresh_policy()
        placement = self.solver.solve(problem)
        info = placement.info or {}
        # The solver placed the batch jointly, each pod's pod (anti-)affinity, spread and host ports
        # judged against the bound pods only: a placement that fails against the pods placed
        # before it (queue order) moves to the best other node that passes, as kube placing one
        # pod at a time would; one with none is not bound now but tried again in the next batch.
        solved = placement.assignment
        state = ClusterState.with_assignment(problem, solved, placement.gpu_cards)
        order: list[tuple[int, str, PodRules]] = []  # the pods kept, in the order they were judged
        deferred, kept = _batch_conflicts(model, problem, good, solved, state, order)
        judged = len(order)
        waiting = self._place_waiters(model, problem, state, good, kept, order, deferred)
        late = {w for w, _, _ in order[judged:]}  # placed after the pods they waited for
        if not np.array_equal(state.assignment, solved):  # moved, deferred or placed: bound, explained and scored as bound
            placement = dc_replace(placement, assignment=state.assignment.copy(), gpu_cards=dict(state.gpu_cards),
                                   objective=evaluate(problem, state.assignment))
        assignment = placement.assignment
        to_bind = []
        with_all = evaluate(problem, assignment) if (assignment >= 0).any() else None
        explained = _explain_batch(model, problem, state, assignment, good, order, with_all, late)
        for w, pod in enumerate(good):
            n = int(placement.assignment[w])
            if w in deferred:
                outcomes.append(self._defer(pod, problem.nodes[int(solved[w])].name, deferred[w]))
                continue
            if n < 0:
                reason = placement.reasons.get(w) or "no node fits"
                if w in waiting:
                    outcomes.append(self._defer(pod, None, reason))
                    continue
                outcomes.append(self._unschedulable_pod(pod, reason, "Unschedulable", version, _fit_needs(problem, w)))
                continue
            # Explanations need the state (remove / place back), so they are computed here, in order.
            explanation = explained.get(w) or explain_placement(problem, state, assignment, w, with_all)
            to_bind.append((snap, state, placement, w, pod, explanation))
        # Bindings and their events go out in parallel, as kube-scheduler binds asynchronously;
        # each worker checks leadership right before its POST.
        if len(to_bind) > 1 and self.bind_workers > 1:
            outcomes.extend(self._pool.map(lambda job: self._bind(*job), to_bind))
        else:
            outcomes.extend(self._bind(*job) for job in to_bind)
        result = BatchResult(outcomes, self.solver_name, str(info.get("solved_by", self.solver_name)),
                             info.get("fallback_reason"), placement.objective.score if placement.objective else None,
                             float(placement.timing.get("solve_s", 0.0)))
        log.info("batch of %d: %s, solved by %s in %.1f ms", len(pods), _batch_counts(outcomes),
                 result.solved_by, 1000 * result.solve_s)
        return result

    def _place_waiters(self, model: ClusterModel, problem: Any, state: ClusterState, pods: Sequence[Mapping[str, Any]],
                       kept: PlacedPods, order: list[tuple[int, str, PodRules]],
                       deferred: Mapping[int, str]) -> set[int]:
        """Place the unplaced pods of the batch that some node refused for pod affinity or spread
        skew which the pods being bound (``kept``) may change (:func:`_refused_for_pods`, :func:`_counted_by`), in queue
        order after them, as kube would place them once those are bound (:func:`_place_waiter`);
        each one placed joins ``kept`` and ``order``. A pod placed may be the one another waits for,
        earlier in the queue (web waits for api, api for db): passes repeat while one places a pod,
        so a chain in any order is placed (at most one pass more than the waiters placed). Returns
        those that wait for a pod being bound but have no node that passes: they are left for the
        next batch (one whose target is bound nowhere stays unschedulable)."""
        waiting: set[int] = set()
        if not kept.by_namespace:  # nothing being bound: no pod waits for the batch
            return waiting
        memo: dict[Any, Any] = {}
        # Parsed once: the unplaced pods refused for pod affinity or spread skew (a deferred pod is not bound: never kept).
        left = {w: rules for w, pod in enumerate(pods)
                if w not in deferred and int(state.assignment[w]) < 0
                and (rules := _refused_for_pods(problem, w, pod)) is not None}
        placed = True
        while placed and left:
            placed, waiting = False, set()
            for w, rules in list(left.items()):
                if not _counted_by(rules, kept):
                    continue
                node = _place_waiter(model, problem, state, w, pods[w], kept, memo, rules)
                if node is None:
                    waiting.add(w)
                    continue
                as_placed = rules.placed()
                kept.add(node, as_placed)
                order.append((w, node, as_placed))
                del left[w]
                placed = True
        return waiting

    def _bind(self, snap: Snapshot, state: ClusterState, placement: Any, w: int, pod: dict[str, Any],
              explanation: tuple[float, dict[str, float], str | None, float | None]) -> PodOutcome:
        problem = snap.problem
        key = obj_key(pod)
        meta = pod.get("metadata") or {}
        node = problem.nodes[int(placement.assignment[w])].name
        delta, terms, runner, gap = explanation
        if not self.is_leader():
            return PodOutcome(key, node, "not-leader", "lost leadership before binding; left pending")
        cards = placement.gpu_cards.get(w)
        annotations = {ANN_GPU_CARDS: ",".join(str(c) for c in cards)} if cards else None
        result = self.kube.bind(meta.get("namespace", "default"), meta["name"], node, uid=meta.get("uid"), annotations=annotations)
        self._progress_at = self.clock()  # a batch of many Bindings on a slow API server is progress, not a wedge
        if not result.ok:
            status = "conflict" if result.status == 409 else "bind-error"
            # Never retried here: a 409 means the pod is bound already; after any other failure
            # the pod is still pending in the API and a later batch tries again after a backoff
            # (if that POST did bind it, the watch removes it first, or that batch gets a 409).
            with self._lock:
                # The room this batch counted for the pod is free: the pods of the batch it kept
                # out may fit now (kube moves pods with AssignedPodDelete after a failed binding).
                self._count_move(_ALL_HELD)
                if result.status == 409:
                    # Bound already (the watch will show where) or the pod was replaced: this
                    # pod is not tried again; one recreated under the same name has a new UID.
                    self._conflicts[key] = (meta.get("uid"), _pod_spec_key(pod), self.clock())
                else:  # try again in a later batch, backing off 1, 2, 4 ... 30 s
                    self._back_off(key)
            log.warning("binding %s to %s: HTTP %s %s", key, node, result.status, result.message)
            return PodOutcome(key, node, status, result.message, delta, terms, runner, gap)
        bound = dict(pod, spec=dict(pod.get("spec") or {}, nodeName=node))
        if annotations:
            bound["metadata"] = dict(meta, annotations={**(meta.get("annotations") or {}), **annotations})
        with self._lock:
            self._assumed[key] = Assumed(bound, meta.get("uid"), self.clock(), self.cache.pods.lists_started)
            self._bound_here[key] = meta.get("uid")
            self._unschedulable.pop(key, None)
            self._add_waiters.discard(key)
            self._reported.pop(key, None)
        parts = ", ".join(f"{t} {v:+.4f}" for t, v in terms.items() if abs(v) > 0)
        runner_text = f"runner-up {runner}, gap {gap:+.4f}" if runner is not None and gap is not None else "no other feasible node"
        message = (f"Successfully assigned {key} to {node} by {self.name} ({self.solver_name}): "
                   f"R {delta:+.4f} ({parts or 'no change'}); {runner_text}")
        self._event(pod, "Scheduled", message, "Normal", "Binding", retry=True)
        if self.feedback is not None:
            self.feedback.record_placement(key, node, problem, state, explained=(delta, terms))
        return PodOutcome(key, node, "bound", message, delta, terms, runner, gap)

    def _defer(self, pod: Mapping[str, Any], node: str | None, reason: str) -> PodOutcome:
        """A pod of the batch left for the next one: placed on ``node`` where a pod placed before it
        in this batch now excludes it, or (``node`` None) rejected for pod affinity or spread while
        others of its batch are bound, which may satisfy it. Not unschedulable: no backoff, no
        condition or Event; it is tried again at once, against the pods bound meanwhile."""
        key = obj_key(pod)
        with self._lock:
            self._unschedulable.pop(key, None)  # else a queued pod would wait for a cluster change
            self._add_waiters.discard(key)
        where = (f"node {node}: {reason} (pods placed before it in this batch)" if node is not None
                 else f"{reason} (pods of this batch being bound may change that)")
        log.debug("%s: %s; tried again in the next batch", key, where)
        return PodOutcome(key, node, "deferred", f"{where}; tried again in the next batch")

    def _back_off(self, key: str) -> None:
        """Under ``_lock``: the pod is tried again after 1, 2, 4 ... 30 s (doubled per failure in
        a row; the entry stays after it ends so the next delay doubles, and goes when the pod
        leaves the pending watch)."""
        delay = min(2 * self._backoff.get(key, (0.0, 0.5))[1], 30.0)
        self._backoff[key] = (self.clock() + delay, delay)

    def _unschedulable_pod(self, pod: dict[str, Any], reason: str, kind: str, version: int,
                           wants: frozenset[str] | None = None) -> PodOutcome:
        key = obj_key(pod)
        meta = pod.get("metadata") or {}
        uid, spec = obj_uid(pod), _pod_spec_key(pod)
        with self._lock:  # back to the unschedulable queue, one attempt more than the last time
            last_try = self._unschedulable.get(key)
            attempts = last_try.attempts + 1 if last_try is not None and (last_try.uid, last_try.spec) == (uid, spec) else 1
            queued = QueuedPod(uid, spec, resource_version_of(pod), attempts, self.clock(), version,
                               self.backoff_s(attempts), wants)
            self._unschedulable[key] = queued
            if wants is not None and POD_ADDED in wants:
                self._add_waiters.add(key)
            else:  # it no longer waits for a pod added
                self._add_waiters.discard(key)
        log.debug("%s: %s (attempt %d; tried again after %.0f s if the cluster changes, after %.0f s anyway)",
                  key, reason, attempts, queued.backoff_s, self.max_unschedulable_s)
        if self.is_leader():
            current = _pod_scheduled(pod)
            with self._lock:
                last = self._reported.get(key)
            same = last is not None and last[:3] == (uid, kind, reason)
            shown = (current is not None and current.get("status") == "False" and current.get("reason") == kind
                     and current.get("message") == reason)
            patched = shown or (same and last[4])  # a patch that failed is sent again on the next attempt
            if not patched:
                # lastTransitionTime moves only when the status does (podutil.UpdatePodCondition).
                was_false = current is not None and current.get("status") == "False" and current.get("lastTransitionTime")
                now = current["lastTransitionTime"] if was_false else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                cond = {"type": "PodScheduled", "status": "False", "reason": kind, "message": reason,
                        "lastProbeTime": None, "lastTransitionTime": now}
                result = self.kube.patch_pod_status(meta.get("namespace", "default"), meta["name"],
                                                    {"status": {"conditions": [cond]}})
                self._progress_at = self.clock()
                patched = result.ok
                if not result.ok:
                    log.warning("PodScheduled condition of %s not patched: HTTP %s %s", key, result.status, result.message)
            # The same failure for the same pod is one Event, not one per retry (kube's recorder
            # aggregates repeats); it is posted again after EVENT_REPEAT_S so it outlives the Event TTL.
            # A failed POST is no post: it is tried again at the next attempt, a few times at most.
            posted, failures = (last[3], last[5]) if same else (None, 0)
            if failures or posted is None or self.clock() - posted > EVENT_REPEAT_S:
                result = self._event(pod, "FailedScheduling", reason, "Warning", "Scheduling")
                if result.ok:
                    posted, failures = self.clock(), 0
                else:
                    failures += 1
                    if failures >= EVENT_TRIES or not _passing(result):
                        log.warning("FailedScheduling event for %s dropped after %d failed POST(s)", key, failures)
                        posted, failures = self.clock(), 0  # dropped: the unchanged failure is tried after EVENT_REPEAT_S
            with self._lock:
                self._reported[key] = (uid, kind, reason, posted, patched, failures)
        return PodOutcome(key, None, "unschedulable" if kind == "Unschedulable" else "invalid", reason,
                          attempts=queued.attempts, backoff_s=queued.backoff_s)

    def _event(self, pod: Mapping[str, Any], reason: str, message: str, etype: str, action: str,
               retry: bool = False) -> CallResult:
        """Post an Event about ``pod``. ``retry``: a passing failure (no answer, 429, 5xx) keeps it
        for :meth:`_retry_events` (the loop sends it again, EVENT_RETRY_S apart, EVENT_TRIES tries
        in all), as client-go's broadcaster does; the FailedScheduling Event is retried by the
        pod's next attempts instead."""
        meta = pod.get("metadata") or {}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ns = meta.get("namespace", "default")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": meta.get("name"), "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": etype, "action": action,
            "source": {"component": f"{self.name}-scheduler"},
            "reportingComponent": f"{self.name}-scheduler", "reportingInstance": self.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        result = self.kube.create_event(ns, event)
        self._progress_at = self.clock()  # a write that returned: many of them on a slow API server are not a wedge
        if not result.ok:
            log.warning("event for %s not recorded: HTTP %s %s", obj_key(pod), result.status, result.message)
            if retry and _passing(result):
                self._hold_event(obj_key(pod), EventRetry(ns, event, 1, self.clock() + EVENT_RETRY_S))
        return result

    def _hold_event(self, key: str, retry: EventRetry, replace: bool = True) -> None:
        """Keep ``retry`` for the loop, EVENT_RETRY_MAX at most (the oldest goes first).
        ``replace``: the latest Scheduled Event of a pod replaces one held; else (a requeue)
        one held meanwhile stays."""
        with self._lock:
            if key in self._event_retries and not replace:
                return
            self._event_retries.pop(key, None)
            self._event_retries[key] = retry
            while len(self._event_retries) > EVENT_RETRY_MAX:
                old = next(iter(self._event_retries))
                self._event_retries.pop(old)
                log.warning("Scheduled event for %s dropped: more than %d events wait for a retry", old, EVENT_RETRY_MAX)

    def _retry_events(self) -> None:
        """Send again the held Events whose retry time has come (called by the loop, never
        sleeping). While the API server fails, one POST is tried per pass: the others due wait
        EVENT_RETRY_S more (not a try of theirs), so an outage costs the loop one write timeout
        per EVENT_RETRY_S, not one per held Event."""
        now = self.clock()
        with self._lock:
            due = [(k, e) for k, e in self._event_retries.items() if e.retry_at <= now]
            for k, _ in due:
                self._event_retries.pop(k)
        for i, (key, held) in enumerate(due):
            result = self.kube.create_event(held.namespace, held.body)
            if result.ok:
                continue
            held.tries += 1
            if not _passing(result) or held.tries >= EVENT_TRIES:
                log.warning("Scheduled event for %s dropped after %d failed POST(s): HTTP %s %s",
                            key, held.tries, result.status, result.message)
            else:
                held.retry_at = now + EVENT_RETRY_S
                self._hold_event(key, held, replace=False)
            for later_key, later in due[i + 1:]:
                later.retry_at = now + EVENT_RETRY_S
                self._hold_event(later_key, later, replace=False)
            return


#: How the batch log line words each outcome (PodOutcome.status), in its order; the first three always shown.
BATCH_COUNTS = (("bound", "bound"), ("unschedulable", "unschedulable"), ("deferred", "left for the next batch"),
                ("invalid", "invalid"), ("conflict", "already bound (409)"), ("bind-error", "binding failed"),
                ("not-leader", "not bound (not the leader)"))


def _batch_counts(outcomes: Sequence[PodOutcome]) -> str:
    """The batch log line's counts of ``outcomes`` by status: bound, unschedulable and left for the
    next batch always, then invalid pods and Bindings that failed or were not sent where there are
    some, so that the counts add up to the batch's pods (a status unknown here is counted as such)."""
    counts = collections.Counter(o.status for o in outcomes)
    parts = [f"{counts.pop(status, 0)} {words}" for status, words in BATCH_COUNTS[:3]]
    parts += [f"{counts.pop(status)} {words}" for status, words in BATCH_COUNTS[3:] if counts.get(status)]
    parts += [f"{n} {status}" for status, n in sorted(counts.items())]
    return ", ".join(parts)


def _passing(result: CallResult) -> bool:
    """A write failure worth a retry: no answer (0), 429 or a 5xx. client-go's broadcaster retries
    only a write with no answer; a 429 or 5xx is a passing failure too (an overloaded or
    restarting server), where a refusal (other 4xx) will not pass the next time either."""
    return result.status in (0, 429) or result.status >= 500


def _unconfirmed(assumed: Iterable[tuple[str, Mapping[str, Any]]],
                 bound: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of ``assumed`` (``(key, pod)`` pairs) that count on top of the bound-pods store
    ``bound``: an assumed pod counts until the watch shows that very pod (same UID) bound."""
    return [pod for key, pod in assumed if key not in bound or obj_uid(bound[key]) != obj_uid(pod)]


def _field(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, None where a step is missing or not an object."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _node_fields(node: Mapping[str, Any]) -> str:
    """What the model reads of a node (:func:`~iro_fed.k8s.snapshot.node_doc`): labels, taints,
    ``spec.unschedulable``, allocatable (capacity when it has none). kube's
    ``NodeSchedulingPropertiesChange`` compares these too, and conditions and annotations, which
    the model does not read: a heartbeat or an image list moves nothing."""
    return json.dumps([_field(node, "metadata", "uid"), _field(node, "metadata", "labels"), _field(node, "spec", "taints"),
                       _field(node, "spec", "unschedulable"), _field(node, "status", "allocatable"),
                       _field(node, "status", "capacity")], sort_keys=True, default=str)


def _counts(pod: Mapping[str, Any]) -> bool:
    """Whether a bound pod counts on its node (:func:`~iro_fed.k8s.snapshot.pods_by_node`)."""
    return _field(pod, "status", "phase") not in TERMINAL_PHASES


def _usage(pod: Mapping[str, Any], resources: Sequence[str]) -> tuple[Any, ...] | None:
    """What a bound pod takes on its node as :func:`~iro_fed.k8s.snapshot.apply_usage` counts it:
    (node, requests, GPU cards, GPU share, cards held); None when it counts nothing (finished, or
    unreadable: the model leaves such a pod out)."""
    if not _counts(pod):
        return None
    try:
        d = pod_demand(pod, resources)
    except (PodSpecError, QuantityError):
        return None
    return (_field(pod, "spec", "nodeName"), d.requests, d.gpu_count, d.gpu_milli,
            _field(pod, "metadata", "annotations", ANN_GPU_CARDS))


def _resize_status(pod: Mapping[str, Any]) -> Any:
    """The parts of a pod's status that its effective request reads during an in-place resize
    (:func:`~iro_fed.k8s.snapshot.pod_demand`: each container status's ``allocatedResources``
    and ``resources``, the pod's ``status.resources`` / ``allocatedResources``, ``resize`` and
    the ``PodResizePending`` condition's reason): a kubelet actuating a shrink changes only
    these, while readiness, IPs and restarts, the usual churn, change none of them."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return status
    containers: list[Any] = []
    for key in ("containerStatuses", "initContainerStatuses"):
        items = status.get(key)
        if not isinstance(items, list):
            containers.append(items)  # odd or absent: compared whole, the full parse judges it
            continue
        containers.extend([cs.get("name"), cs.get("allocatedResources"), cs.get("resources")]
                          if isinstance(cs, Mapping) else cs for cs in items)
    conds = status.get("conditions")
    pending = ([c.get("reason") for c in conds if isinstance(c, Mapping) and c.get("type") == RESIZE_PENDING]
               if isinstance(conds, list) else conds)
    return [containers, status.get("resources"), status.get("allocatedResources"), status.get("resize"), pending]


def _frees_room(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                resources: Sequence[str]) -> frozenset[str]:
    """What a bound pod going from ``old`` to ``new`` (None: added / deleted) frees for another
    pod, as kube's NodeResourcesFit hint judges it: ``{POD_GONE}``, all it held (deleted, finished, moved
    off its node, or unreadable now: as a deleted one), which can fit any pod that some node
    rejected for its resources; for a scale-down, the resources it takes less of
    (``nvidia.com/gpu`` for fewer GPU cards or a smaller share: cards that move or grow release
    nothing), which can fit only such a pod that requests one of them
    (``isSchedulableAfterPodScaleDown``); empty, nothing. Scaled down is judged on the effective
    requests (kube's ``extractPodScaleDown`` compares ``PodRequests`` with ``UseStatusResources``
    on every update), so the status update of a kubelet actuating an in-place shrink counts. A
    pod added or a status, label or annotation update that leaves its requests frees nothing."""
    if old is None:
        return frozenset()
    if new is not None and _counts(old) == _counts(new) and old.get("spec") == new.get("spec") \
            and _field(old, "metadata", "annotations") == _field(new, "metadata", "annotations") \
            and _resize_status(old) == _resize_status(new):
        return frozenset()  # the usual update (status, labels): nothing the usage reads changed
    was = _usage(old, resources)
    if was is None:
        return frozenset()  # it took nothing
    now = _usage(new, resources) if new is not None else None
    if now is None or now[0] != was[0]:
        return _ALL_HELD
    freed = {r for r, v in was[1].items() if now[1].get(r, 0.0) < v}
    if now[2] * now[3] < was[2] * was[3]:  # milli of GPU held (cards x 1000, or the share): as kube, a decrease
        freed.add(GPU_RESOURCE)
    return frozenset(freed)


def _batch_conflicts(model: ClusterModel, problem: Any, pods: Sequence[Mapping[str, Any]],
                     assignment: np.ndarray, state: ClusterState | None = None,
                     kept_order: list[tuple[int, str, PodRules]] | None = None) -> tuple[dict[int, str], PlacedPods]:
    """The placed pods of a batch that fail NodePorts, PodTopologySpread or InterPodAffinity
    against the bound pods plus the pods of the batch placed before them (queue order, the ones
    kept), as kube placing one pod at a time would find: (workload -> kube's reason, the pods
    kept). Nothing to check (no cost) when no pod of the batch has pod (anti-)affinity, a spread
    constraint or a host port: the snapshot judged each pod against the bound pods already.

    ``state``: the batch's placements (``assignment``) on the cluster. A pod that fails is then
    moved, as kube would place it, to the best (:func:`marginal`) of its other nodes that pass
    the snapshot's filters, have room beside the batch's other pods and pass these plugins
    against the pods before it (:func:`_relocate`); only a pod with no such node is reported.
    ``state`` ends with the pods kept where they go and the reported ones unplaced. Without it
    every replica of an anti-affine set after the first was left to the next batch, one per
    topology domain per batch, each batch waiting ``window_s``. ``kept_order``: gets (workload,
    node, rules) of each pod kept, in the order they were added to the pods kept."""
    earlier = PlacedPods()
    if not any(reads_pods(p) for p in pods):
        return {}, earlier
    out: dict[int, str] = {}
    memo: dict[Any, Any] = {}  # pod_filter_failures' counts over the bound pods, kept for the batch
    # Pods alike for placement (_template_key: a Deployment's or a StatefulSet's replicas) with no
    # node left: the counts of pods kept and deferred then. The next one fails too while no other
    # pod is kept or deferred meanwhile (the same rules against the same pods, on the same nodes
    # but the two freed by the two deferred pods, where they fail), so the search over every node
    # is not run again for each (300 zone anti-affine replicas over 5 zones).
    no_room: dict[tuple, tuple[int, int]] = {}
    read: frozenset[str] | None = None  # the pod label keys some selector in play reads, on the first conflict
    parsed = _BatchRules(pods)  # each pod's rules parsed once: the check, the template and the relocation read them
    kept = 0
    for w, pod in enumerate(pods):
        n = int(assignment[w])
        if n < 0:
            continue
        node = problem.nodes[n].name
        try:
            # On the rules parsed once (the batch's memo: the same bound pods).
            full = parsed.full(w) if reads_pods(pod) or earlier.anti else None
            reason = None if full is None else model.placement_conflict(pod, node, earlier, full, memo)
            rules = parsed.as_placed(w)
        except PodSpecError:  # labels the model cannot read (the API server never sends such): nothing selects it
            continue
        template = None
        if reason is not None and state is not None and full is not None:
            if read is None:
                read = _selector_keys(pods, model.placed(), parsed)
            template = _template_key(problem, w, full, read)
            if no_room.get(template) != (kept, len(out)):
                moved = _relocate(model, problem, state, w, pod, earlier, memo, full)
                if moved is not None:
                    node, reason = moved, None
        if reason is not None:
            out[w] = reason
            if state is not None and template is not None:
                state.remove(w)
                no_room[template] = (kept, len(out))
        else:
            earlier.add(node, rules)
            kept += 1
            if kept_order is not None:
                kept_order.append((w, node, rules))
    return out, earlier


def _selector_keys(pods: Sequence[Mapping[str, Any]], placed: PlacedPods,
                   parsed: _BatchRules | None = None) -> frozenset[str]:
    """The pod label keys that some selector judging a pod of the batch reads: the batch's pods'
    required (anti-)affinity terms and DoNotSchedule spread selectors (``matchLabelKeys`` merged
    in) and the bound pods' required anti-affinity terms. A pod's other labels (a StatefulSet's
    ``statefulset.kubernetes.io/pod-name``, an indexed Job's completion index) decide nothing.
    ``parsed``: the batch's rules parsed so far (:class:`_BatchRules` of ``pods``)."""
    keys: set[str] = set()
    selectors = [t.selector for _, other in placed.anti for t in other.anti_affinity]
    parsed = _BatchRules(pods) if parsed is None else parsed
    for w, pod in enumerate(pods):
        if not reads_pods(pod):
            continue
        try:
            rules = parsed.full(w)
        except PodSpecError:  # never judged nor added to the pods placed (see _batch_conflicts)
            continue
        selectors.extend(t.selector for t in (*rules.affinity, *rules.anti_affinity))
        selectors.extend(c.selector for c in rules.spread)
    for selector in selectors:
        keys.update(key for key, _, _ in selector.requirements)
    return frozenset(keys)


def _template_key(problem: Any, w: int, rules: PodRules, read: frozenset[str]) -> tuple:
    """What decides whether batch pod ``w`` (its rules ``rules``) has a node that passes, for
    :func:`_relocate`: its requests and node-level constraints (feasibility's ``pod_key``), its
    namespace, inter-pod rules, host ports and the nodes its spread counts over, and of its labels
    only those that some selector in play reads (``read``, :func:`_selector_keys`). Two pods with
    the same key pass on the same nodes against the same pods: per-pod labels, annotations
    (``apps.kubernetes.io/pod-index``), ``spec.hostname`` or volumes do not tell them apart."""
    return (pod_key(problem, w), rules.namespace, rules.terminating, rules.affinity, rules.anti_affinity, rules.spread,
            rules.ports, tuple(sorted(rules.node_selector.items())), rules.node_terms, rules.tolerations,
            tuple(sorted((k, v) for k, v in rules.labels.items() if k in read)))


class _BatchRules:
    """The :class:`PodRules` of each pod of a batch, parsed once for the batch (its check read a
    conflicting pod's two or three times: the check, its template, its relocation; and every pod's
    once more for the selector keys). A pod whose rules do not parse raises the same
    :class:`PodSpecError` each time."""

    def __init__(self, pods: Sequence[Mapping[str, Any]]) -> None:
        self._pods = pods
        self._got: dict[int, PodRules | PodSpecError] = {}

    def full(self, w: int) -> PodRules:
        """Pod ``w``'s rules as a pending pod (:func:`pod_rules`)."""
        got = self._got.get(w)
        if got is None:
            try:
                got = pod_rules(self._pods[w])
            except PodSpecError as exc:
                got = exc
            self._got[w] = got
        if isinstance(got, PodSpecError):
            raise got
        return got

    def as_placed(self, w: int) -> PodRules:
        """Pod ``w``'s rules as a pod on a node (``pod_rules(pod, pending=False)``): what the plugins
        read of the pods placed. Taken from the full parse; parsed on its own only where that
        fails (a field a placed pod's rules do not read)."""
        try:
            rules = self.full(w)
        except PodSpecError:
            return pod_rules(self._pods[w], pending=False)
        return rules.placed()


def _relocate(model: ClusterModel, problem: Any, state: ClusterState, w: int, pod: Mapping[str, Any],
              earlier: PlacedPods, memo: dict[Any, Any], rules: PodRules | None = None) -> str | None:
    """Move workload ``w``, whose node in ``state`` fails against ``earlier`` (the pods of its batch
    before it), to the node kube would pick among the rest: one that passes the snapshot's filters
    and has room (resources, GPU cards) with the batch's other pods where ``state`` has them, and
    that passes NodePorts, PodTopologySpread and InterPodAffinity against ``earlier``; the best
    by the objective's :func:`marginal` of those (:func:`_first_passing`). Returns its name
    (``state`` updated), or None (``state`` as it was): no such node. ``rules``: ``pod``'s, parsed
    (None: parsed here)."""
    n = int(state.assignment[w])
    cards = state.gpu_cards.get(w)
    state.remove(w)
    mask = feasible_nodes(state, w)
    mask[n] = False
    c = _best_passing(model, problem, state, w, pod, np.flatnonzero(mask), earlier, memo, rules)
    if c is not None:
        state.place(w, c)
        return problem.nodes[c].name
    state.place(w, n, cards)
    return None


def _place_waiter(model: ClusterModel, problem: Any, state: ClusterState, w: int, pod: Mapping[str, Any],
                  kept: PlacedPods, memo: dict[Any, Any], rules: PodRules | None = None) -> str | None:
    """Place unplaced workload ``w``, refused by the snapshot for pod affinity or spread skew that the
    pods of its batch being bound (``kept``) may satisfy (:func:`_refused_for_pods`, :func:`_counted_by`), as kube would
    place it after them: on the best (:func:`marginal`) node with room beside the batch in ``state``
    that passes every static filter before those plugins and passes NodePorts, PodTopologySpread
    and InterPodAffinity against the bound pods and ``kept``. Returns its name (``state``
    updated), or None: no such node (the pod is left for the next batch). ``rules``: ``pod``'s,
    parsed (None: parsed here)."""
    c = _best_passing(model, problem, state, w, pod, np.flatnonzero(_late_nodes(problem, state, w)), kept, memo, rules)
    if c is None:
        return None
    state.place(w, c)
    return problem.nodes[c].name


def _late_nodes(problem: Any, state: ClusterState, w: int) -> np.ndarray:
    """``mask[n]``: workload ``w`` has room on node n in ``state`` and passes every static filter
    but those kube runs after NodeResourcesFit (spread, inter-pod affinity), which the snapshot
    judged against the bound pods only: the caller judges them again with the batch's pods."""
    sf = static_filter(problem, w)
    return resource_fit(state, w) & (sf.mask | np.isin(sf.first_fail, AFTER_FIT_FILTERS))


def _best_passing(model: ClusterModel, problem: Any, state: ClusterState, w: int, pod: Mapping[str, Any],
                  cand: np.ndarray, earlier: PlacedPods, memo: dict[Any, Any],
                  rules: PodRules | None = None) -> int | None:
    """The best of nodes ``cand`` for workload ``w`` (unplaced in ``state``) by :func:`marginal`
    (ties: lowest index first) where ``pod`` passes the pod-reading plugins against ``earlier``
    (:func:`_first_passing`); None: none."""
    if not cand.size:
        return None
    order = cand[np.argsort(-marginal(problem, state, w, cand), kind="stable")].tolist()
    return _first_passing(model, problem, order, pod, earlier, memo, rules)


def _first_passing(model: ClusterModel, problem: Any, order: Sequence[int], pod: Mapping[str, Any],
                   earlier: PlacedPods, memo: dict[Any, Any], rules: PodRules | None = None) -> int | None:
    """The first of nodes ``order`` (indices, best first) where ``pod`` passes NodePorts,
    PodTopologySpread and InterPodAffinity against the bound pods and ``earlier``; None: none.
    The plugins run over a chunk of them at a time (their counts taken once; most pods pass on one
    of the first few, where a run over every node cost 8 ms a pod on 2,000 nodes). A node's verdict
    does not depend on the others asked with it, so it is :meth:`ClusterModel.placement_conflict`'s.
    ``rules``: ``pod``'s, parsed (None: parsed here)."""
    rules = pod_rules(pod) if rules is None else rules
    start, size = 0, RELOCATE_CHUNK
    while start < len(order):
        chunk = order[start:start + size]
        names = [problem.nodes[c].name for c in chunk]
        failing = pod_filter_failures(rules, model.placed(), model.node_docs, names, earlier, memo)
        for c, name in zip(chunk, names, strict=True):
            if name not in failing:
                return c
        start, size = start + size, 4 * size
    return None


def _explain_batch(model: ClusterModel, problem: Any, state: ClusterState, assignment: np.ndarray,
                   pods: Sequence[Mapping[str, Any]], order: Sequence[tuple[int, str, PodRules]],
                   with_all: Breakdown | None, late: set[int],
                   ) -> dict[int, tuple[float, dict[str, float], str | None, float | None]]:
    """:func:`explain_placement` of each pod of ``order`` (the batch's pods kept, in the order they
    were judged), its runner-up a node that passes the batch check against the pods before it
    (as its own node did): one an earlier replica of an anti-affine set took is no runner-up.
    ``late``: the pods placed after the pods they waited for (:func:`_place_waiter`)."""
    out = {}
    before = PlacedPods()
    memo: dict[Any, Any] = {}
    for w, node, rules in order:
        pod = pods[w]
        usable = None
        if reads_pods(pod) or before.anti:  # else no pod of the batch bars it from a node (as placement_conflict)
            usable = functools.partial(_first_passing, model, problem, pod=pod, earlier=before, memo=memo)
        out[w] = explain_placement(problem, state, assignment, w, with_all, usable, w in late)
        before.add(node, rules)
    return out


def _refused_for_pods(problem: Any, w: int, pod: Mapping[str, Any]) -> PodRules | None:
    """``pod``'s rules (workload ``w``) when some node refused it for pod affinity or spread skew
    (pods being bound may change that); None when none did, or its rules do not parse."""
    if not np.isin(static_filter(problem, w).first_fail, (POD_AFFINITY_FILTER, SPREAD_FILTER)).any():
        return None
    try:
        return pod_rules(pod)
    except PodSpecError:
        return None


def _counted_by(rules: PodRules, kept: PlacedPods) -> bool:
    """Whether a pod of ``kept`` is one that the affinity terms (all of them) or a spread selector
    of the pod whose rules are ``rules`` counts."""
    for _, other in kept.pods():
        if rules.affinity and all(t.matches(other.namespace, other.labels) for t in rules.affinity):
            return True
        if other.namespace == rules.namespace and any(c.selector.matches(other.labels) for c in rules.spread):
            return True
    return False


def _adds_a_pod(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a bound pod going from ``old`` to ``new`` (None: added / deleted) is one more pod
    that pod affinity or a spread constraint may select: added, relabelled, or moved to a node."""
    if new is None or not _counts(new):
        return False
    return (old is None or not _counts(old) or _field(old, "metadata", "labels") != _field(new, "metadata", "labels")
            or _field(old, "spec", "nodeName") != _field(new, "spec", "nodeName"))


def _fit_needs(problem: Any, w: int) -> frozenset[str]:
    """What a bound pod's delete, scale-down or add must bring to fit workload ``w`` of ``problem``,
    which is left unplaced: ``POD_GONE`` (any delete), ``POD_ADDED`` when some node rejected it for
    pod affinity or spread skew, and the resources it requests
    (``nvidia.com/gpu`` for GPU cards or a share), as kube's hint reads the waiting pod's
    ``PodRequests``; none when no node reached the resource check (each failed a static filter:
    labels, taints, domains...), as kube consults NodeResourcesFit's hint only for a pod that
    plugin rejected, and the static filters' plugins move nothing on a pod delete."""
    sf = static_filter(problem, w)
    # NodePorts, PodTopologySpread and InterPodAffinity register a pod delete too: a pod some node
    # rejected for the pods on it is retried by any delete (kube's hints narrow that down further).
    pod_filters = bool(np.isin(sf.first_fail, POD_FILTER_CODES).any())
    # ... and a pod added helps one rejected for pod affinity or spread skew.
    added = {POD_ADDED} if np.isin(sf.first_fail, (POD_AFFINITY_FILTER, SPREAD_FILTER)).any() else set()
    # The nodes that reached NodeResourcesFit: those passing the static filters, short of GPU cards,
    # or failing only a plugin kube runs after it (spread, inter-pod affinity).
    if not (sf.mask | (sf.first_fail == GPU_CARDS_FILTER) | np.isin(sf.first_fail, AFTER_FIT_FILTERS)).any():
        return frozenset({POD_GONE, *added}) if pod_filters else frozenset()
    wants = {POD_GONE, *added, *(r for r, v in zip(problem.resources, problem.demand[w], strict=True) if v > 0)}
    if problem.wl_gpu_count[w] > 0:
        wants.add(GPU_RESOURCE)
    return frozenset(wants)


def _pod_spec_key(pod: Mapping[str, Any]) -> str:
    """The pod as kube's ``isPodUpdated`` compares two versions of it: everything but
    ``resourceVersion``, ``generation``, ``managedFields``, ``finalizers`` and the status."""
    meta = pod.get("metadata")
    meta = {k: v for k, v in meta.items() if k not in _NOT_AN_UPDATE} if isinstance(meta, Mapping) else meta
    rest = {k: v for k, v in pod.items() if k not in ("metadata", "status")}
    return json.dumps([meta, rest], sort_keys=True, default=str)


_NOT_AN_UPDATE = frozenset({"resourceVersion", "generation", "managedFields", "finalizers"})


def _pod_scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ``PodScheduled`` condition as the watch last showed it (None: none or unreadable)."""
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conds, list):
        return None
    return next((c for c in conds if isinstance(c, Mapping) and c.get("type") == "PodScheduled"), None)


def _queue_key(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    """kube's queue order (priority, then creation time) for a pending pod. Tolerant of bad
    fields: a pod whose priority or timestamp is malformed sorts as 0 / "" and is reported
    unschedulable by the batch (check_pod) instead of crashing the sort for every pod."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    priority = spec.get("priority")
    created = meta.get("creationTimestamp")
    return (
        -priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created if isinstance(created, str) else "",
        obj_key(pod),
    )
