"""``kube-default``: kube-scheduler's default placement, for what the problem model covers.

Followed from kubernetes/kubernetes (v1.3x):

* ``pkg/scheduler/framework/plugins/noderesources/least_allocated.go``: NodeResourcesFit with
  the default LeastAllocated strategy, cpu and memory weight 1 each:
  ``(allocatable - requested) * 100 / allocatable`` in integer arithmetic per resource (0 when
  requested > allocatable), weighted sum divided by the weight sum. ``requested`` is the node's
  non-zero request plus the pod's non-zero request (``pkg/scheduler/util/pod_resources.go``:
  a container without a cpu / memory request counts 100m / 200 MiB). Memory is computed in bytes.
* ``noderesources/balanced_allocation.go``: fractions ``requested / allocatable`` (capped at 1,
  actual requests) of cpu and memory; ``int64((1 - |f_cpu - f_mem| / 2) * 100)``; best-effort
  pods (no cpu and no memory request) skip the plugin.
* ``plugins/tainttoleration/taint_toleration.go``: the number of ``PreferNoSchedule`` taints the
  pod does not tolerate, normalized by ``helper.DefaultNormalizeScore(100, reverse=true)``.
* ``plugins/nodeaffinity/node_affinity.go``: the sum of the weights of matching preferred terms,
  normalized by ``DefaultNormalizeScore(100, reverse=false)``.
* ``apis/config/v1/default_plugins.go``: weights TaintToleration 3, NodeAffinity 2,
  NodeResourcesFit 1, NodeResourcesBalancedAllocation 1 (PodTopologySpread, InterPodAffinity,
  ImageLocality score equally on every node here: the model has no owners, pod affinity or images).
* ``schedule_one.go``: ``numFeasibleNodesToFind`` (adaptive ``percentageOfNodesToScore`` =
  ``50 - N/125`` %, floor 5 %, at least 100 nodes), the filter scan starting at
  ``nextStartNodeIndex`` and advancing it by the nodes processed, and ``selectHost`` (random among
  the highest total, seeded here; upstream's reservoir sampling picks each tied node with the
  same probability).
* ``backend/cache/node_tree.go``: the node list interleaves zones round-robin (zone key from
  ``topology.kubernetes.io/region`` / ``zone`` labels, falling back to the node's domain).
* ``plugins/queuesort/priority_sort.go``: pods by priority, highest first, then arrival order.

Known differences: the scan checks feasible nodes in order and stops at exactly the number to
find (upstream checks in parallel chunks and may process a few more); a node's existing
``allocated`` usage is taken as its non-zero request (the model does not keep per-pod requests of
what already runs there); the model's own filters (domains, latency, GPU cards) run as filter
plugins would.
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
        pod_cpu = int(round(p.demand[w, self._cpu]))
        node_cpu = np.rint(state.allocated[candidates, self._cpu]).astype(np.int64)
        cap_cpu = self._allocatable_cpu[candidates]
        req = [node_cpu + (pod_cpu or DEFAULT_MILLI_CPU_REQUEST)]
        actual = [node_cpu + pod_cpu]
        caps = [cap_cpu]
        pod_mem = 0
        if self._mem is not None:
            pod_mem = int(round(p.demand[w, self._mem] * MIB))
            node_mem = np.rint(state.allocated[candidates, self._mem] * MIB).astype(np.int64)
            req.append(node_mem + (pod_mem or DEFAULT_MEMORY_REQUEST_BYTES))
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

        # NodeAffinity: weights of matching preferred terms.
        affinity_raw = np.zeros(candidates.size, dtype=np.int64)
        for term in wl.preferred:
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
