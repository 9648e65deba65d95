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
  the pending pods, ``Problem.initial_nonzero`` per node from the bound ones; after a what-if,
  ``ClusterState.set_node_usage``, the state's ``initial_nonzero``). Pods this solver
  placed add their non-zero request to their node's ``NonZeroRequested`` too
  (``NodeInfo.update``), so best-effort pods spread. Memory is computed in bytes. Every amount
  is rounded up as ``resource.Quantity`` rounds (``MilliValue`` / ``Value``: cpu to a whole
  millicore, memory to a whole byte; :func:`kube_units`): the snapshot's numbers are whole
  already, a problem file's fractional ones (``100.5`` millicores -> 101m) round up per pod, as
  ``NodeInfo`` adds each pod's rounded request, and once per node for its allocatable, its
  initial usage and ``nonzero_allocated``. Float noise is not a fraction (100.0000000001 stays
  100m), so a snapshot written as a problem file scores the same. A capacity of
  :data:`iro_fed.problem_io.MIN_CAPACITY` or less is an allocatable of 0 (the resource is not
  scored on that node, as upstream): the snapshot's stand-in for a node with none of it.
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
* ``plugins/podtopologyspread/scoring.go`` (``Problem.pod_scoring``, from the Kubernetes
  snapshot): per ScheduleAnyway constraint ``count * log(size + 2) + maxSkew - 1`` summed, rounded
  (``math.Round``), then ``100 * (max + min - s) / max`` over the scored nodes; ``count`` is the
  matching pods (the pod's namespace, not being deleted) in the node's domain over the nodes the
  constraint's inclusion policies keep (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore by
  default), or on the node itself for ``kubernetes.io/hostname``; ``size`` is the number of the
  candidates' domains (of candidates for hostname). With the pod's own constraints a candidate
  lacking one of their keys is ignored (scores 0) and nodes lacking one are not counted; a pod
  without constraints gets the system defaults (hostname maxSkew 3, zone maxSkew 5) when a
  ReplicaSet, StatefulSet or ReplicationController controls it, and then a node lacking a key only
  misses that constraint (its missing key is one more domain). minDomains does not score.
* ``plugins/interpodaffinity/scoring.go`` (``Problem.pod_scoring``): per candidate the sum over
  topology domains of +weight (preferred affinity) / -weight (preferred anti-affinity) per pod
  matching the pod's term in the node's domain, plus the existing pods' terms that match the
  pod (their preferred terms with their weights, their required affinity with
  ``hardPodAffinityWeight`` 1), then ``int64(100 * (s - min) / (max - min))`` (all 0 when equal).
  Pods this solver placed earlier in the run count for both plugins, as kube-scheduler assumes each
  pod before the next cycle.
* ``apis/config/v1/default_plugins.go``: weights TaintToleration 3, NodeAffinity 2,
  NodeResourcesFit 1, NodeResourcesBalancedAllocation 1, PodTopologySpread 2, InterPodAffinity 2,
  ImageLocality 1. ImageLocality scores equally on every node here (the model has no images) and
  is left out of the sum (a constant does not change the choice); so are PodTopologySpread and
  InterPodAffinity for a problem without ``pod_scoring`` (problem files, traces): the model then
  has no pod labels, owners or pod (anti-)affinity. The simulator gives its pods controllers and
  fills ``pod_scoring`` with the system default spreading (``iro_fed.sim.engine``).
* ``schedule_one.go``: ``numFeasibleNodesToFind`` (adaptive ``percentageOfNodesToScore`` =
  ``50 - N/125`` %, floor 5 %, at least 100 nodes; all nodes below 100), the filter scan starting
  at ``nextStartNodeIndex`` and advancing it by the nodes processed, and ``selectHost`` (uniform
  among the highest total: a seeded draw here, reservoir sampling upstream; same distribution,
  different random stream).
* ``backend/cache/node_tree.go``: the node list interleaves zones round-robin (zone key as
  ``GetZoneKey``, ``component-helpers/node/topology``: the ``failure-domain.beta.kubernetes.io``
  region / zone labels first, ``topology.kubernetes.io`` only where the beta label is absent).
* ``plugins/queuesort/priority_sort.go``: pods by priority, highest first, then arrival order.

Known differences (deliberate, the model does not carry what upstream reads):

* Only for problems without ``nonzero_demand`` (problem files, traces; the Kubernetes snapshot
  has it): a zero cpu / memory demand (after rounding up: 0.4m is 1m, not missing) is taken as
  a *missing* request and gets :data:`iro_fed.model.NONZERO_DEFAULTS` (one number per pod);
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
  checks in parallel chunks and may process a few more). ``nextStartNodeIndex`` is kept across
  solves of one solver object (the simulator's steps, as upstream keeps it across scheduling
  cycles), modulo the node count when nodes are added or removed, and starts at 0 for a new
  solver or a node list sharing no name with the last one; every ``solve``
  reseeds, so a new solver with the same seed gives the same answer. This only matters above
  100 nodes.
* Pod scoring (``Problem.pod_scoring``, from the Kubernetes snapshot or the simulator): the system default
  spreading's selector is approximated by the pod's controller ownerReference (upstream: the
  selectors of the Services, ReplicaSets, StatefulSets and ReplicationControllers that select the
  pod; the snapshot sees none of those objects), so a bare pod that only a Service selects is not
  spread, and pods matching a controller's selector but owned by another are not counted. A
  ``namespaceSelector`` is read against the namespace's ``kubernetes.io/metadata.name`` label
  only. A node labelled with a topology key and an empty value shares upstream's "" domain with
  the nodes lacking the key when counting a default constraint's domains; here they are two.
* The model's own filters (domains, latency, GPU cards) run as filter plugins would; pods that
  fit nowhere stay unplaced (no preemption, no retry queue).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

# GetZoneKey, one copy for this and the Kubernetes snapshot, in the core: `import solvers` must
# not load the Kubernetes adapter
from iro_fed.feasibility import REGION_LABELS, ZONE_LABELS, resource_fit, static_filter, topology_label, untolerated
from iro_fed.model import (
    HOSTNAME_KEY,
    NONZERO_DEFAULTS,
    NONZERO_RESOURCES,
    ClusterState,
    PodScoring,
    Problem,
)
from iro_fed.problem_io import MIN_CAPACITY
from solvers.base import SEED, OnlineSolver, Param, SolverProperties

MAX_NODE_SCORE = 100
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
MIB = 1024 * 1024
#: kube's integer unit per model unit of each scored resource: cpu millicores (MilliValue),
#: memory bytes (Value) from MiB.
KUBE_UNITS = {"cpu": 1, "memory": MIB}
#: Float noise below a whole unit that is not a fraction to round up (as ``solvers.cpsat``'s
#: ``INTEGRAL_TOL``), relative to the amount (at least 1 unit).
ROUND_UP_TOL = 1e-12
#: ... but never a whole unit: at 1 TiB (1.1e12 bytes) 1e-12 relative is 1.1 bytes, which took a
#: whole amount one byte down; float noise there is about 1e-4 bytes.
MAX_NOISE_UNITS = 1e-3
PLUGIN_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "NodeResourcesBalancedAllocation": 1,
                  "PodTopologySpread": 2, "InterPodAffinity": 2}


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """``Scheduler.numFeasibleNodesToFind`` (percentage 0 = adaptive)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * percentage // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


def kube_units(amount: np.ndarray | float, scale: np.ndarray | float, magnitude: np.ndarray | float | None = None) -> np.ndarray:
    """Model amounts in kube's integer unit (``scale`` of them per model unit: :data:`KUBE_UNITS`;
    an array of scales applies per column), rounded up as ``resource.Quantity``'s ``MilliValue``
    / ``Value`` round: 100.5 millicores is 101m, 1.5 bytes is 2. Float noise is not a fraction:
    what lies within :data:`ROUND_UP_TOL` of ``magnitude`` (default: the amount; pass the
    operands' size for a difference) above a whole unit stays that unit (100.0000000001
    millicores is 100m, 0.1 + 0.2 - 0.3 is 0)."""
    scaled = np.asarray(amount, dtype=np.float64) * scale
    size = np.abs(scaled) if magnitude is None else np.abs(np.asarray(magnitude, dtype=np.float64)) * scale
    return _ceil_units(scaled, size)


def _ceil_units(scaled: np.ndarray, size: np.ndarray) -> np.ndarray:
    """:func:`kube_units` of amounts already in kube units (``size``: their magnitude)."""
    return np.ceil(scaled - np.minimum(ROUND_UP_TOL * np.maximum(1.0, size), MAX_NOISE_UNITS)).astype(np.int64)


def _ceil_unit(scaled: float, size: float) -> int:
    """:func:`_ceil_units` of one amount in Python floats (the same operations, so the same result)."""
    return math.ceil(scaled - min(ROUND_UP_TOL * max(1.0, size), MAX_NOISE_UNITS))


def _sum_by_node(where: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per node, the sum of ``values`` at ``where``, in ``values``' dtype: int64 sums exact past
    2**53 (bincount adds in float64), and a float sum a float array even when nothing is placed
    (bincount of no weights is int64, and ``+=`` of a fractional demand would then truncate it)."""
    out = np.zeros(n, dtype=values.dtype)
    np.add.at(out, where, values)
    return out


def zone_interleaved_order(problem: Problem) -> np.ndarray:
    """Node indices in ``nodeTree.list()`` order: one node per zone, round-robin."""
    zones: dict[str, list[int]] = {}
    for i, node in enumerate(problem.nodes):
        zone = topology_label(node.labels, ZONE_LABELS)
        region = topology_label(node.labels, REGION_LABELS)
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


class KubeDefault(OnlineSolver):
    name = "kube-default"
    #: It reads ``Problem.pod_scoring``: the Kubernetes adapters build it only for such a solver
    #: (``solvers.reads_pod_scoring``).
    reads_pod_scoring = True
    properties = SolverProperties(
        "online", False,
        "kube-scheduler's default scoring (LeastAllocated, Balanced, taints, affinity; pod spread and affinity from a "
        "Kubernetes snapshot) and sampling."
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
        # nextStartNodeIndex lives as long as the scheduler: a solver reused on the cluster (the
        # simulator's steps) goes on where its last run stopped, modulo the node count as upstream
        # reads it ((nextStartNodeIndex + i) % len(allNodes)) when nodes come and go; a node list
        # sharing no name with the last one (another cluster) or a new solver starts at 0.
        names = frozenset(node.name for node in problem.nodes)
        last = getattr(self, "_scan_nodes", None)
        if last is None or last.isdisjoint(names):
            self.next_start_node_index = 0
        else:
            self.next_start_node_index %= max(problem.num_nodes, 1)
        self._scan_nodes = names
        self.num_to_find = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, problem.num_nodes)
        # The scored resources (cpu always, memory when the problem has it), in kube's integer
        # unit; per-node arrays are kept one per resource (1-D arrays index fastest per decision).
        names = [r for r in NONZERO_RESOURCES if r in problem.resource_index]
        self._cols = [problem.resource_index[r] for r in names]
        self._scales = [float(KUBE_UNITS[r]) for r in names]
        nz_cols = [NONZERO_RESOURCES.index(r) for r in names]
        # The problem's smallest capacity is the snapshot's stand-in for a node with none of the
        # resource (allocatable 0: upstream leaves it out of both scores); above it, rounded up.
        # What a decision reads per node that no pod changes, one gather per decision ([rows, N]):
        # per resource the allocatable, it as a divisor (1 where 0) and 1 where it is scored; then
        # 1 where both are scored: BalancedAllocation's std is taken there, and the fit average
        # divides by 2 there (else by 1: the sum of non-negative shares // 2 is >> 1).
        cap = np.array([np.where(problem.capacity[:, c] <= MIN_CAPACITY, 0, kube_units(problem.capacity[:, c], s))
                        for c, s in zip(self._cols, self._scales, strict=True)],
                       dtype=np.int64).reshape(len(self._cols), problem.num_nodes)
        self._static_rows = np.vstack((cap, np.where(cap > 0, cap, 1), (cap > 0).astype(np.int64),
                                       ((cap > 0).sum(axis=0) == 2).astype(np.int64)[None]))
        # Per workload the nodes' counts of its untolerated PreferNoSchedule taints (None: none),
        # shared by the workloads with the same taint columns.
        self._taint_counts: dict[int, np.ndarray | None] = {}
        self._taint_counts_by_cols: dict[tuple[int, ...], np.ndarray] = {}
        # The scan's node order twice: a window from any start is one slice; per node its place in it.
        self._order_twice = np.concatenate((self.node_order, self.node_order))
        # Per static filter (by its mask) the mask in the scan's order, twice.
        self._ordered_masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # rebuild_caches' per-node tables of the problem's own cluster (a state with an empty journal).
        self._pristine: np.ndarray | None = None
        # Each pod's actual and non-zero request [W, resources]: the non-zero one exact from the
        # snapshot, else a zero demand taken as a missing request (the model keeps one number per pod).
        scales = np.array(self._scales)
        self._pod_actual = kube_units(problem.demand[:, self._cols], scales)
        if problem.nonzero_demand is not None:
            self._pod_nz = kube_units(problem.nonzero_demand[:, nz_cols], scales)
        else:
            defaults = kube_units(np.array([NONZERO_DEFAULTS[r] for r in names]), scales)
            self._pod_nz = np.where(self._pod_actual == 0, defaults, self._pod_actual)
        # A node's NonZeroRequested = its base + the non-zero requests of the pods placed there
        # (NodeInfo.update). The base is the bound pods' sum when the problem gives it, else what
        # the node holds besides the placed pods (its usage taken as non-zero: see the docstring).
        # The problem's base in kube units, once per run; a state whose base a what-if changed
        # (ClusterState.set_node_usage) has its own, read by rebuild_caches.
        self._nz_cols = nz_cols
        self._problem_nz_of = problem.initial_nonzero
        self._problem_nz = self._nonzero_units(problem.initial_nonzero)
        # What each pod placed on a node adds to that base: its non-zero request, or without a
        # given base only what that adds to its actual request (the usage holds the rest).
        self._pod_add = self._pod_nz if self._problem_nz is not None else self._pod_nz - self._pod_actual
        # The pod's requests as columns against a decision's [resources, candidates] rows.
        self._pod_nz_col = self._pod_nz[:, :, None]
        self._pod_actual_col = self._pod_actual[:, :, None]
        self._best_effort = (~self._pod_actual.any(axis=1)).tolist()
        # Whole demands (every snapshot; most problem files): the placed pods then add a whole
        # number of kube units to a node's usage, and ceil(own + k) = ceil(own) + k, so per
        # decision the usage is rounded up as a whole, not apart from the placed pods' share.
        # Capacity and usage need not be whole: a node's own usage may be fractional (a
        # problem's, or a what-if's from ClusterState.set_node_usage) and still rounds up once.
        self._whole = all(
            bool(np.array_equal(kube_units(problem.demand[:, c], s), problem.demand[:, c] * s))
            for c, s in zip(self._cols, self._scales, strict=True)
        )
        # PodTopologySpread / InterPodAffinity: the groups each workload joins when placed.
        self._ps: PodScoring | None = problem.pod_scoring
        self._groups_of: list[np.ndarray] | None = None
        if self._ps is not None:
            groups, wls = np.nonzero(self._ps.members)
            order = np.argsort(wls, kind="stable")
            self._groups_of = np.split(groups[order], np.searchsorted(wls[order], np.arange(1, problem.num_workloads)))

    def _nonzero_units(self, initial_nonzero: np.ndarray | None) -> list[np.ndarray] | None:
        """Per scored resource, the nodes' NonZeroRequested base ``initial_nonzero[N, 2]`` in kube's units."""
        if initial_nonzero is None:
            return None
        return [kube_units(initial_nonzero[:, j], s) for j, s in zip(self._nz_cols, self._scales, strict=True)]

    def rebuild_caches(self, state: ClusterState) -> None:
        """Per node and scored resource, the NonZeroRequested base of ``state`` (its own after a
        what-if) and what the pods it placed there add to it (kube's units); with fractional
        demands also their rounded actual requests (kube's units) and summed demand (model units,
        to tell the node's own usage from ``state.allocated``) (see :meth:`OnlineSolver.sync`)."""
        # set_node_usage journals (-1, n, 0), which lands here: a what-if's base is read then, and
        # a state still sharing the problem's (every solve) reuses the run's conversion.
        nz = state.initial_nonzero
        self._initial_nz = self._problem_nz if nz is self._problem_nz_of else self._nonzero_units(nz)
        placed = np.flatnonzero(state.assignment >= 0)
        where = state.assignment[placed]
        n = state.problem.num_nodes
        self._placed_add = [_sum_by_node(where, self._pod_add[placed, j], n) for j in range(len(self._cols))]
        # (per-node sums, per-pod values) that apply_changes keeps up to date.
        self._tracked = [(self._placed_add[j], self._pod_add[:, j]) for j in range(len(self._cols))]
        # Per (group, topology) the group's pods per domain, built on first use and kept up to date by
        # apply_changes (a bincount over every node per term per decision was most of a large run).
        self._domains: dict[tuple[int, int], np.ndarray] = {}
        self._domain_topologies: dict[int, list[int]] = {}
        if self._groups_of is not None:  # each group's pods per node: the snapshot's plus the ones placed here
            self._group_count = self._ps.group_counts.astype(np.int64)
            for w, node in zip(placed, where, strict=True):
                self._group_count[self._groups_of[w], node] += 1
        if not self._whole:
            demand = state.problem.demand
            self._placed_actual = [_sum_by_node(where, self._pod_actual[placed, j], n) for j in range(len(self._cols))]
            self._placed_amount = [_sum_by_node(where, demand[placed, c], n) for c in self._cols]
            self._tracked += [(self._placed_actual[j], self._pod_actual[:, j]) for j in range(len(self._cols))]
            self._tracked += [(self._placed_amount[j], demand[:, c]) for j, c in enumerate(self._cols)]
        # Per node what the scores read of it besides the pod, in kube's units ([2 * resources, N]):
        # the NonZeroRequested (base + placed pods) and the actual usage per scored resource;
        # apply_changes recomputes the nodes that changed. A state never changed (empty journal:
        # each new one, as the extender builds per snapshot) is the problem's cluster: its table
        # is copied from the first such state's of the run.
        pristine = not state.journal
        if pristine and self._pristine is not None:
            self._node_rows = self._pristine.copy()
            return
        self._node_rows = np.empty((2 * len(self._cols), n), dtype=np.int64)
        self._refresh_all_nodes(state)
        if pristine:
            self._pristine = self._node_rows.copy()

    def _refresh_all_nodes(self, state: ClusterState) -> None:
        """:attr:`_node_rows` of every node (:meth:`_refresh_node` for one: the same arithmetic)."""
        k = len(self._cols)
        for j, (c, scale) in enumerate(zip(self._cols, self._scales, strict=True)):
            # A node's usage besides the placed pods (state.allocated less their demand: the
            # problem's, or a what-if's) rounds up once, each placed pod adds its own rounded
            # request, as NodeInfo adds pods.
            used = state.allocated[:, c]
            if self._whole:
                scaled = used * scale
                units = _ceil_units(scaled, scaled)
            else:
                units = kube_units(used - self._placed_amount[j], scale, magnitude=used) + self._placed_actual[j]
            base = self._initial_nz[j] if self._initial_nz is not None else units
            self._node_rows[j] = base + self._placed_add[j]
            self._node_rows[k + j] = units

    def _refresh_node(self, state: ClusterState, node: int) -> None:
        """:meth:`_refresh_all_nodes` for one node in Python scalars (a dozen one-element numpy
        operations cost more than the decision saves); the same float operations and rounding."""
        k = len(self._cols)
        row = state.allocated[node].tolist()
        rows = self._node_rows
        for j, (c, scale) in enumerate(zip(self._cols, self._scales, strict=True)):
            used = row[c]
            if self._whole:
                scaled = used * scale
                units = _ceil_unit(scaled, scaled)
            else:
                units = _ceil_unit((used - float(self._placed_amount[j][node])) * scale, abs(used) * scale)
                units += int(self._placed_actual[j][node])
            base = int(self._initial_nz[j][node]) if self._initial_nz is not None else units
            rows[j, node] = base + int(self._placed_add[j][node])
            rows[k + j, node] = units

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        for w, node, sign in entries:
            for sums, values in self._tracked:
                sums[node] += sign * values[w]
        for node in {node for _, node, _ in entries}:
            self._refresh_node(state, node)
        if self._groups_of is not None:
            topology = self._ps.topology
            for w, node, sign in entries:
                groups = self._groups_of[w]
                self._group_count[groups, node] += sign
                for g in groups.tolist():
                    for t in self._domain_topologies.get(g, ()):
                        d = topology[t, node]
                        if d >= 0:
                            self._domains[(g, t)][d] += sign

    def candidates(self, state: ClusterState, w: int) -> np.ndarray:
        """The filter scan: from ``nextStartNodeIndex``, the first ``numFeasibleNodesToFind``
        feasible nodes in node-tree order; advances the start by the nodes processed. The filters
        (``feasible_nodes``: resource fit and the static filters) run on windows of the node order
        from the start, as many as it takes to find them: a pod that fits most nodes is tested on
        about the number to find, not on every node."""
        p = state.problem
        self._ensure(p)  # called on another problem's state without reset: the caches are that one's
        n = p.num_nodes
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        start = self.next_start_node_index
        need = self.num_to_find
        mask = self._ordered_mask(static_filter(p, w).mask)
        found: list[np.ndarray] = []
        total = scanned = 0
        processed = n
        size = min(n, need + need // 4 + 32)  # the first window: about what a pod that fits most nodes needs
        while scanned < n:
            a = start + scanned
            b = a + size
            window = self._order_twice[a:b]
            hits = np.flatnonzero(mask[a:b] & resource_fit(state, w, window))
            if total + hits.size >= need:
                hits = hits[: need - total]
                found.append(self._order_twice[a + hits])
                processed = scanned + int(hits[-1]) + 1
                break
            found.append(self._order_twice[a + hits])
            total += hits.size
            scanned += size
            # The next window from the density seen so far (half again more), else the rest.
            rate = total / scanned
            size = n - scanned if rate <= 0 else min(n - scanned, int((need - total) / rate * 1.5) + 32)
        self.next_start_node_index = (start + processed) % n
        return found[0] if len(found) == 1 else np.concatenate(found)

    def _ordered_mask(self, mask: np.ndarray) -> np.ndarray:
        """A static filter's mask in the scan's order, twice (cached per mask: a problem keeps one
        per constraint shape)."""
        got = self._ordered_masks.get(id(mask))
        if got is None or got[0] is not mask:
            got = (mask, mask[self._order_twice])
            self._ordered_masks[id(mask)] = got
        return got[1]

    def plugin_scores(self, state: ClusterState, w: int, candidates: np.ndarray) -> dict[str, np.ndarray]:
        """Each score plugin's normalized 0..100 scores over ``candidates`` (unweighted)."""
        m = candidates.size
        return {name: v if isinstance(v, np.ndarray) else np.full(m, v, dtype=np.int64)
                for name, v in self._plugin_scores(state, w, candidates).items()}

    def _plugin_scores(self, state: ClusterState, w: int, candidates: np.ndarray) -> dict[str, np.ndarray | int]:
        """:meth:`plugin_scores`, a plugin that scores every candidate alike as one int."""
        p = state.problem
        # The per-problem caches (static rows, taint counts per workload) are the last problem's
        # until reset: score() and plugin_scores() may be called on another problem's state.
        self._ensure(p)
        wl = p.workloads[w]
        # Fit scores the non-zero requests (node: NonZeroRequested; pod: its non-zero request);
        # BalancedAllocation the actual ones (useRequested). Per node both are kept in
        # _node_rows (rebuild_caches / apply_changes); the static rows give the allocatable.
        self.sync(state)
        k = len(self._cols)
        fixed = np.take(self._static_rows, candidates, axis=1)
        cap, safe = fixed[:k], fixed[k : 2 * k]
        rows = np.take(self._node_rows, candidates, axis=1)
        # NodeResourcesFit, LeastAllocated, weight 1 per resource: ``(cap - requested) * 100 /
        # cap``, 0 where requested > cap (the difference is negative: floor division keeps it
        # below 0) or cap is 0 (the scored row); then the sum over the scored resources' count.
        share = (cap - (rows[:k] + self._pod_nz_col[w])) * MAX_NODE_SCORE // safe
        np.maximum(share, 0, out=share)
        share *= fixed[2 * k : 3 * k]
        fit = share[0] if k == 1 else (share[0] + share[1]) >> fixed[3 * k]

        # NodeResourcesBalancedAllocation (skipped for best-effort pods): fractions capped at 1,
        # the std over both resources where both are allocatable.
        balanced: np.ndarray | int
        if self._best_effort[w]:
            balanced = 0
        elif k == 2:
            fractions = (rows[k:] + self._pod_actual_col[w]) / safe
            np.minimum(fractions, 1.0, out=fractions)
            std = np.abs((fractions[0] - fractions[1]) / 2)
            std *= fixed[3 * k]
            balanced = np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)
        else:
            balanced = MAX_NODE_SCORE

        # TaintToleration: intolerable PreferNoSchedule taints, fewer is better
        # (DefaultNormalizeScore, reverse).
        counts = self._taint_node_counts(p, w)
        taint: np.ndarray | int = MAX_NODE_SCORE
        if counts is not None and (counts := counts[candidates]).any():  # counts are >= 0
            taint = default_normalize(counts, reverse=True)

        # NodeAffinity: weights of matching preferred terms. A term with an empty preference
        # matches no node (NewPreferredSchedulingTerms skips it), not every node.
        affinity: np.ndarray | int = 0
        terms = [term for term in wl.preferred if term.match_labels]
        if terms:
            affinity_raw = np.zeros(candidates.size, dtype=np.int64)
            for term in terms:
                match = np.ones(candidates.size, dtype=bool)
                for key, value in term.match_labels.items():
                    codes, values = p.label_codes(key)
                    match &= codes[candidates] == values.get(value, -2)
                affinity_raw += term.weight * match
            affinity = default_normalize(affinity_raw, reverse=False)

        out: dict[str, np.ndarray | int] = {
            "TaintToleration": taint,
            "NodeAffinity": affinity,
            "NodeResourcesFit": fit,
            "NodeResourcesBalancedAllocation": balanced,
        }
        if self._ps is not None:  # (without it both plugins score every node alike: left out)
            out["PodTopologySpread"] = self._spread_scores(w, candidates)
            out["InterPodAffinity"] = self._interpod_scores(w, candidates)
        return out

    def _taint_node_counts(self, p: Problem, w: int) -> np.ndarray | None:
        """Per node the number of PreferNoSchedule taints workload ``w`` does not tolerate (None
        when it tolerates them all), once per workload and taint set per run."""
        if w in self._taint_counts:
            return self._taint_counts[w]
        cols = untolerated(p.workloads[w], p, ("PreferNoSchedule",))
        counts = None
        if cols.size:
            key = tuple(cols.tolist())
            counts = self._taint_counts_by_cols.get(key)
            if counts is None:
                counts = p.taint_table[1][:, cols].sum(axis=1, dtype=np.int64)
                self._taint_counts_by_cols[key] = counts
        self._taint_counts[w] = counts
        return counts

    def _domain_counts(self, group: int, topology: int) -> np.ndarray:
        """Per domain of ``topology``, the group's pods on the nodes it counts (float64, exact;
        counted once per run and state, then kept by :meth:`apply_changes`)."""
        got = self._domains.get((group, topology))
        if got is None:
            dom = self._ps.topology[topology]
            counted = dom >= 0
            got = np.bincount(dom[counted], weights=self._group_count[group][counted], minlength=int(dom.max(initial=-1)) + 1)
            self._domains[(group, topology)] = got
            self._domain_topologies.setdefault(group, []).append(topology)
        return got

    def _spread_scores(self, w: int, candidates: np.ndarray) -> np.ndarray:
        """PodTopologySpread's Score and NormalizeScore (``podtopologyspread/scoring.go``) over
        ``candidates`` (kube's filtered nodes): per soft constraint ``count * log(size + 2) +
        maxSkew - 1``, count the matching pods in the node's domain (on the node itself for
        hostname), size the number of the candidates' domains (of the candidates for hostname);
        rounded, then ``100 * (max + min - s) / max``. With the pod's own constraints a candidate
        lacking one of their keys is ignored (0); with the system defaults it only misses that
        constraint, and its missing key counts as one more domain ("")."""
        ps = self._ps
        terms = [t for t in ps.terms[w] if t.kind in ("spread", "default_spread")]
        m = candidates.size
        if not terms:  # PreScore Skip
            return np.zeros(m, dtype=np.int64)
        require_all = any(t.kind == "spread" for t in terms)
        kept = np.ones(m, dtype=bool)
        if require_all:
            for t in terms:
                kept &= ps.topology[t.topology][candidates] >= 0
        score = np.zeros(m)
        for t in terms:
            dom = ps.topology[t.topology][candidates]
            has = dom >= 0
            if ps.topology_keys[t.topology] == HOSTNAME_KEY:
                count = self._group_count[t.group][candidates].astype(np.float64)
                size = int(kept.sum())
            else:
                count = self._domain_counts(t.group, t.topology)[np.where(has, dom, 0)] if has.any() else np.zeros(m)
                size = np.unique(dom[kept & has]).size + int(bool((kept & ~has).any()))
            score += np.where(has & kept, count * math.log(size + 2) + float(t.value - 1), 0.0)
        raw = np.floor(score + 0.5).astype(np.int64)  # math.Round (scores are >= 0)
        if not kept.any():
            return np.zeros(m, dtype=np.int64)
        low, high = int(raw[kept].min()), int(raw[kept].max())
        if high == 0:
            return np.where(kept, MAX_NODE_SCORE, 0).astype(np.int64)
        return np.where(kept, MAX_NODE_SCORE * (high + low - raw) // high, 0).astype(np.int64)

    def _interpod_scores(self, w: int, candidates: np.ndarray) -> np.ndarray:
        """InterPodAffinity's Score and NormalizeScore (``interpodaffinity/scoring.go``): per
        candidate the sum over its terms of +-weight times the group's pods in its domain (the
        pod's preferred terms, and the existing pods' terms that select it, which the snapshot gives
        as terms of this pod), then ``int64(100 * (s - min) / (max - min))`` (0 when all equal)."""
        ps = self._ps
        terms = [t for t in ps.terms[w] if t.kind in ("affinity", "anti_affinity")]
        m = candidates.size
        raw = np.zeros(m, dtype=np.int64)
        for t in terms:
            dom = ps.topology[t.topology][candidates]
            has = dom >= 0
            if not has.any():
                continue
            count = self._domain_counts(t.group, t.topology)[np.where(has, dom, 0)].astype(np.int64)
            sign = 1 if t.kind == "affinity" else -1
            raw += np.where(has, sign * t.value * count, 0)
        if m == 0:
            return raw
        low, high = int(raw.min()), int(raw.max())
        if high - low <= 0:
            return np.zeros(m, dtype=np.int64)
        return (float(MAX_NODE_SCORE) * ((raw - low) / float(high - low))).astype(np.int64)

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        total = np.zeros(candidates.size, dtype=np.int64)
        for name, s in self._plugin_scores(state, w, candidates).items():
            total += PLUGIN_WEIGHTS[name] * s
        return total.astype(np.float64)

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        best = np.flatnonzero(scores == scores.max())
        return int(best[self.rng.integers(best.size)]) if best.size > 1 else int(best[0])
