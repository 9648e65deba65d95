"""``kube-default``: kube-scheduler's default placement, for what the problem model covers.

Followed from kubernetes/kubernetes (v1.33 / v1.34, default profile; v1.30 to v1.32 differ only
in the best-effort skip of BalancedAllocation):

* ``pkg/scheduler/framework/plugins/noderesources/least_allocated.go``: NodeResourcesFit with
  the default LeastAllocated strategy, cpu and memory weight 1 each (extended resources do not
  score: they are not in the default ``resources``):
  ``(allocatable - requested) * 100 / allocatable`` in int64 per resource (0 when
  requested > allocatable), then the weighted sum divided by the weight sum, int64 again (each
  share is truncated before the average). ``requested`` is the node's ``NonZeroRequested`` plus
  the pod's non-zero request (``resource_allocation.go``, ``framework/types.go``
  ``calculateResource``, ``pkg/scheduler/util``: ``PodRequests`` with each container that has
  no cpu / memory request counted as 100m / 200 MiB, for scoring only; an explicit 0 stays 0).
  The Kubernetes snapshot computes both exactly from the pods (``Problem.nonzero_demand`` for
  the pending pods, ``Problem.initial_nonzero`` per node from the bound ones). Pods this solver
  placed add their non-zero request to their node's ``NonZeroRequested`` too
  (``NodeInfo.update``), so best-effort pods spread. Memory is computed in bytes. The snapshot
  rounds each pod's request as upstream does (``MilliValue`` / ``Value`` of the pod's exact
  total: up to a whole millicore / byte), so its numbers are whole here; a fractional number
  of a problem file (numbers, not quantities) is taken to the nearest millicore / byte.
* ``noderesources/balanced_allocation.go``: fractions ``requested / allocatable`` (capped at 1,
  *actual* requests: ``useRequested``) of cpu and memory; with two resources
  ``std = |f_cpu - f_mem| / 2`` and ``int64((1 - std) * 100)`` in float64 (so 0.68 vs 0 gives
  65, not 66); best-effort pods (no cpu and no memory request) skip the plugin (PreScore Skip,
  since v1.33: PR #130260 for issue #129138; before, they scored the node's own fractions).
* ``plugins/tainttoleration/taint_toleration.go``: the number of ``PreferNoSchedule`` taints the
  pod does not tolerate, normalized by ``helper.DefaultNormalizeScore(100, reverse=true)``
  (``100 - 100 * count / max`` in int64; all 100 when no node has one).
* ``plugins/nodeaffinity/node_affinity.go``: the sum of the weights of matching preferred terms,
  normalized by ``DefaultNormalizeScore(100, reverse=false)``; a term with an empty preference
  matches no node (``NewPreferredSchedulingTerms`` skips it).
* ``apis/config/v1/default_plugins.go``: weights TaintToleration 3, NodeAffinity 2,
  NodeResourcesFit 1, NodeResourcesBalancedAllocation 1, PodTopologySpread 2, InterPodAffinity 2,
  ImageLocality 1. The last three score equally on every node here and are left out of the sum
  (a constant does not change the choice): the model has no pod labels, owners, pod (anti-)
  affinity or images. In particular the system default spread constraints (hostname maxSkew 3,
  zone maxSkew 5, ScheduleAnyway) only apply to pods selected by a Service, ReplicaSet,
  StatefulSet or ReplicationController; for a bare pod upstream skips the plugin, as here.
  Replicas of a Deployment in a real cluster would also be spread by it; this solver does not.
* ``schedule_one.go``: ``numFeasibleNodesToFind`` (adaptive ``percentageOfNodesToScore`` =
  ``50 - N/125`` %, floor 5 %, at least 100 nodes; all nodes below 100), the filter scan starting
  at ``nextStartNodeIndex`` and advancing it by the nodes processed, and ``selectHost`` (uniform
  among the highest total: a seeded draw here, reservoir sampling upstream; same distribution,
  different random stream).
* ``backend/cache/node_tree.go``: the node list interleaves zones round-robin (zone key from
  ``topology.kubernetes.io/region`` / ``zone`` labels with the ``failure-domain.beta`` fallbacks).
* ``plugins/queuesort/priority_sort.go``: pods by priority, highest first, then arrival order.

Known differences (deliberate, the model does not carry what upstream reads):

* Only for problems without ``nonzero_demand`` (problem files, traces; the Kubernetes snapshot
  has it): a zero cpu / memory demand is taken as a *missing* request (one number per pod);
  upstream adds the default only for a missing request, per container, so an explicit
  ``cpu: 0`` scores as 0 there, and a pod with one container lacking a request gets +100m there.
* Only for problems without ``initial_nonzero`` (problem files, traces, the extender's NodeList
  mode, a problem whose ``allocated`` was replaced): a node's initial ``allocated`` usage is
  taken as its ``NonZeroRequested``, so a best-effort pod already bound counts 0 instead of
  100m / 200 MiB.
* In-place resize status (``status.containerStatuses[].allocatedResources`` / ``resources``)
  is not read: a pod being resized counts its spec requests (upstream the largest of spec,
  allocated and actuated). Pod-level ``spec.resources.requests`` are read, as upstream.
* Nodes with neither a zone nor a region label are grouped by the model's domain (upstream puts
  them all in one zone ""): a problem file's domain is its zone. The Kubernetes snapshot derives
  the domain from these labels (else ``default``), so for real nodes both agree.
* The scan checks feasible nodes in order and stops at exactly the number to find (upstream
  checks in parallel chunks and may process a few more). Every ``solve`` starts the scan at
  index 0 and reseeds (the same seed gives the same answer); upstream keeps
  ``nextStartNodeIndex`` across scheduling cycles, so a caller that solves step by step
  (the simulator) restarts the rotation each step. This only matters above 100 nodes.
* The model's own filters (domains, latency, GPU cards) run as filter plugins would; pods that
  fit nowhere stay unplaced (no preemption, no retry queue).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from iro_fed.feasibility import feasible_nodes, untolerated
from iro_fed.model import ClusterState, Problem
from solvers.base import SEED, OnlineSolver, Param, SolverProperties

MAX_NODE_SCORE = 100
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST_BYTES = 200 * 1024 * 1024
MIB = 1024 * 1024
PLUGIN_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "NodeResourcesBalancedAllocation": 1}
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """``Scheduler.numFeasibleNodesToFind`` (percentage 0 = adaptive)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * percentage // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


def zone_interleaved_order(problem: Problem) -> np.ndarray:
    """Node indices in ``nodeTree.list()`` order: one node per zone, round-robin."""
    zones: dict[str, list[int]] = {}
    for i, node in enumerate(problem.nodes):
        zone = next((node.labels[k] for k in ZONE_LABELS if k in node.labels), "")
        region = next((node.labels[k] for k in REGION_LABELS if k in node.labels), "")
        key = f"{region}:\x00:{zone}" if (zone or region) else node.domain
        zones.setdefault(key, []).append(i)
    order: list[int] = []
    lists = list(zones.values())
    for depth in range(max((len(v) for v in lists), default=0)):
        order.extend(v[depth] for v in lists if depth < len(v))
    return np.array(order, dtype=np.int64)


def default_normalize(scores: np.ndarray, reverse: bool) -> np.ndarray:
    """``helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)`` in integer arithmetic."""
    max_count = int(scores.max()) if scores.size else 0
    if max_count == 0:
        return np.full(scores.shape, MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    out = MAX_NODE_SCORE * scores.astype(np.int64) // max_count
    return MAX_NODE_SCORE - out if reverse else out


def least_allocated(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
    """``leastRequestedScore`` per node (int64 arrays)."""
    safe = np.where(allocatable > 0, allocatable, 1)
    score = (allocatable - requested) * MAX_NODE_SCORE // safe
    return np.where((allocatable == 0) | (requested > allocatable), 0, score)


class KubeDefault(OnlineSolver):
    name = "kube-default"
    properties = SolverProperties(
        "online", False, "kube-scheduler's default scoring (LeastAllocated, Balanced, taints, affinity) and sampling."
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "order": Param("priority", str, "Pod order; kube-scheduler's queue sorts by priority.", choices=("given", "priority", "largest-first")),
        "percentage_of_nodes_to_score": Param(
            0, int, "percentageOfNodesToScore: 0 = adaptive (50 - N/125 %, floor 5 %), 100 = all nodes.", minimum=0, maximum=100
        ),
    }

    def reset(self, problem: Problem) -> None:
        super().reset(problem)
        self.node_order = zone_interleaved_order(problem)
        self.next_start_node_index = 0
        self.num_to_find = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, problem.num_nodes)
        cpu = problem.resource_index["cpu"]
        mem = problem.resource_index.get("memory")
        self._cpu, self._mem = cpu, mem
        self._allocatable_cpu = np.rint(problem.capacity[:, cpu]).astype(np.int64)
        self._allocatable_mem = np.rint(problem.capacity[:, mem] * MIB).astype(np.int64) if mem is not None else None
        # Each pod's non-zero request (cpu milli, memory bytes): exact from the snapshot, else a
        # zero demand taken as a missing request (the model keeps one number per pod).
        actual_cpu = np.rint(problem.demand[:, cpu]).astype(np.int64)
        actual_mem = np.rint(problem.demand[:, mem] * MIB).astype(np.int64) if mem is not None else None
        if problem.nonzero_demand is not None:
            self._pod_nz_cpu = np.rint(problem.nonzero_demand[:, 0]).astype(np.int64)
            self._pod_nz_mem = np.rint(problem.nonzero_demand[:, 1] * MIB).astype(np.int64) if mem is not None else None
        else:
            self._pod_nz_cpu = np.where(actual_cpu == 0, DEFAULT_MILLI_CPU_REQUEST, actual_cpu)
            self._pod_nz_mem = (
                np.where(actual_mem == 0, DEFAULT_MEMORY_REQUEST_BYTES, actual_mem) if actual_mem is not None else None
            )
        # A node's NonZeroRequested = base + what the pods placed here add (NodeInfo.update). The
        # base is the bound pods' sum when the snapshot gave it (placed pods then add their whole
        # non-zero request); else the node's current allocated, which already holds the placed
        # pods' actual requests, so they add only the difference.
        if problem.initial_nonzero is not None:
            self._initial_cpu: np.ndarray | None = np.rint(problem.initial_nonzero[:, 0]).astype(np.int64)
            self._initial_mem = np.rint(problem.initial_nonzero[:, 1] * MIB).astype(np.int64) if mem is not None else None
            self._add_cpu, self._add_mem = self._pod_nz_cpu, self._pod_nz_mem
        else:
            self._initial_cpu = self._initial_mem = None
            self._add_cpu = self._pod_nz_cpu - actual_cpu
            self._add_mem = self._pod_nz_mem - actual_mem if self._pod_nz_mem is not None and actual_mem is not None else None

    def rebuild_caches(self, state: ClusterState) -> None:
        """Per node, what the pods ``state`` placed add to its NonZeroRequested beyond the base of
        :meth:`plugin_scores`, cpu (milli) and memory (bytes) (see :meth:`OnlineSolver.sync`)."""
        placed = np.flatnonzero(state.assignment >= 0)
        where = state.assignment[placed]
        self._nz_cpu = np.zeros(state.problem.num_nodes, dtype=np.int64)
        np.add.at(self._nz_cpu, where, self._add_cpu[placed])
        self._nz_mem = None
        if self._add_mem is not None:
            self._nz_mem = np.zeros(state.problem.num_nodes, dtype=np.int64)
            np.add.at(self._nz_mem, where, self._add_mem[placed])

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        for w, node, sign in entries:
            self._nz_cpu[node] += sign * self._add_cpu[w]
            if self._nz_mem is not None and self._add_mem is not None:
                self._nz_mem[node] += sign * self._add_mem[w]

    def candidates(self, state: ClusterState, w: int) -> np.ndarray:
        """The filter scan: from ``nextStartNodeIndex``, the first ``numFeasibleNodesToFind``
        feasible nodes in node-tree order; advances the start by the nodes processed."""
        n = state.problem.num_nodes
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        positions = np.flatnonzero(feasible_nodes(state, w)[self.node_order])
        start = self.next_start_node_index
        i = int(np.searchsorted(positions, start))
        rotated = np.concatenate((positions[i:], positions[:i]))
        if rotated.size >= self.num_to_find:
            rotated = rotated[: self.num_to_find]
            processed = int((rotated[-1] - start) % n) + 1
        else:
            processed = n
        self.next_start_node_index = (start + processed) % n
        return self.node_order[rotated]

    def plugin_scores(self, state: ClusterState, w: int, candidates: np.ndarray) -> dict[str, np.ndarray]:
        """Each score plugin's normalized 0..100 scores over ``candidates`` (unweighted)."""
        p = state.problem
        wl = p.workloads[w]
        # Fit scores the non-zero requests (node: NonZeroRequested; pod: its non-zero request);
        # BalancedAllocation the actual ones (useRequested).
        self.sync(state)
        nz_cpu, nz_mem = self._nz_cpu, self._nz_mem
        pod_cpu = int(round(p.demand[w, self._cpu]))
        node_cpu = np.rint(state.allocated[candidates, self._cpu]).astype(np.int64)
        base_cpu = self._initial_cpu[candidates] if self._initial_cpu is not None else node_cpu
        cap_cpu = self._allocatable_cpu[candidates]
        req = [base_cpu + nz_cpu[candidates] + self._pod_nz_cpu[w]]
        actual = [node_cpu + pod_cpu]
        caps = [cap_cpu]
        pod_mem = 0
        if self._mem is not None and nz_mem is not None and self._pod_nz_mem is not None:
            pod_mem = int(round(p.demand[w, self._mem] * MIB))
            node_mem = np.rint(state.allocated[candidates, self._mem] * MIB).astype(np.int64)
            base_mem = self._initial_mem[candidates] if self._initial_mem is not None else node_mem
            req.append(base_mem + nz_mem[candidates] + self._pod_nz_mem[w])
            actual.append(node_mem + pod_mem)
            caps.append(self._allocatable_mem[candidates])

        # NodeResourcesFit, LeastAllocated, weight 1 per resource.
        total = np.zeros(candidates.size, dtype=np.int64)
        weight_sum = np.zeros(candidates.size, dtype=np.int64)
        for r, c in zip(req, caps, strict=True):
            total += least_allocated(r, c)
            weight_sum += c > 0
        fit = np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)

        # NodeResourcesBalancedAllocation (skipped for best-effort pods).
        if pod_cpu == 0 and pod_mem == 0:
            balanced = np.zeros(candidates.size, dtype=np.int64)
        else:
            fractions = [np.minimum(a / np.where(c > 0, c, 1), 1.0) for a, c in zip(actual, caps, strict=True)]
            valid = [c > 0 for c in caps]
            if len(fractions) == 2:
                both = valid[0] & valid[1]
                std = np.where(both, np.abs((fractions[0] - fractions[1]) / 2), 0.0)
            else:
                std = np.zeros(candidates.size)
            balanced = np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)

        # TaintToleration: intolerable PreferNoSchedule taints, fewer is better.
        cols = untolerated(wl, p, ("PreferNoSchedule",))
        if cols.size:
            counts = p.taint_table[1][np.ix_(candidates, cols)].sum(axis=1)
        else:
            counts = np.zeros(candidates.size, dtype=np.int64)
        taint = default_normalize(counts, reverse=True)

        # NodeAffinity: weights of matching preferred terms. A term with an empty preference
        # matches no node (NewPreferredSchedulingTerms skips it), not every node.
        affinity_raw = np.zeros(candidates.size, dtype=np.int64)
        for term in wl.preferred:
            if not term.match_labels:
                continue
            match = np.ones(candidates.size, dtype=bool)
            for key, value in term.match_labels.items():
                codes, values = p.label_codes(key)
                match &= codes[candidates] == values.get(value, -2)
            affinity_raw += term.weight * match
        affinity = default_normalize(affinity_raw, reverse=False)

        return {
            "TaintToleration": taint,
            "NodeAffinity": affinity,
            "NodeResourcesFit": fit,
            "NodeResourcesBalancedAllocation": balanced,
        }

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        scores = self.plugin_scores(state, w, candidates)
        return sum(PLUGIN_WEIGHTS[name] * s for name, s in scores.items()).astype(np.float64)

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        best = np.flatnonzero(scores == scores.max())
        return int(best[self.rng.integers(best.size)]) if best.size > 1 else int(best[0])
