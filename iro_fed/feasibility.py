"""Feasibility: which nodes can take a pod, and why the others cannot.

Filters are numpy expressions over all nodes at once. They split in two, as in
kube-scheduler's framework:

* static filters, which depend only on the pod's constraints and the node's labels, taints,
  domain and GPU model (cached per distinct constraint set, so a batch of similar pods pays
  once): allowed domains, taints (``NoSchedule`` / ``NoExecute`` filter; ``PreferNoSchedule``
  only scores), node selector, ``max_latency_ms`` from the pod's user region to the node's
  domain, GPU model and GPU card count;
* resource filters against the current :class:`~iro_fed.model.ClusterState`: every additive
  resource fits what is free (up to float rounding relative to the node's capacity,
  :func:`fit_tolerance`, which check_placement and the solvers' capacity rows allow too); a GPU
  share (``count`` 1, ``milli`` < 1000) needs one card with at least ``milli`` free; ``count`` k
  needs k fully free cards.

A pod that fits nowhere gets a reason in kube-scheduler's words
(``pkg/scheduler/framework/types.go`` ``FitError.Error``): each node contributes the reasons of
its first failing filter in plugin order (NodeAffinity's PreFilter node-name set, a cordoned
node, taints, node selector, our allowed domains / latency / GPU-model filters, then resources,
where every insufficient resource counts; a node's untolerated taint is the first in the node's
own taint list), the histogram is sorted as strings and joined: ``0/12 nodes are available: 5
Insufficient cpu, 3 node(s) had untolerated taint {dedicated: batch}.``

Two conventions carry what kube reads from the Node and pod objects themselves:

* a cordoned node (``spec.unschedulable``) is one whose label :data:`UNSCHEDULABLE_LABEL` is
  ``"true"``, or, without that label (a problem file), one with the taint
  :data:`UNSCHEDULABLE_TAINT` (``node.kubernetes.io/unschedulable:NoSchedule``, what the node
  lifecycle controller adds); the Kubernetes snapshot sets the label to ``"false"`` on an
  uncordoned node that still has the taint, which is then an ordinary taint (TaintToleration);
* a ``node_selector`` key starting with :data:`NODE_NAMES_LABEL_PREFIX` is the node-name set of a
  required node affinity whose every term has ``matchFields`` ``metadata.name In [...]`` (how a
  DaemonSet pins its pods), which NodeAffinity's PreFilter turns into the only nodes filtered;
  one starting with :data:`NODE_NAMES_CONFLICT_PREFIX` says that those sets conflict (empty):
  PreFilter fails and the message is its own (``0/3 nodes are available: pod affinity terms
  conflict.``), no node counted;
* a ``node_selector`` key with a prefix of :data:`POD_FILTER_PREFIXES` is the verdict of a plugin
  that reads the pods on a node (NodePorts, PodTopologySpread, InterPodAffinity), which the
  Kubernetes snapshot evaluates against the bound pods: a node without the label fails with that
  plugin's reason. NodePorts is tried before NodeResourcesFit, the others after it (a node short
  of a resource is reported for that, as kube's plugin order does).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iro_fed.model import GPU_MILLI, ClusterState, Problem, Taint, Workload

#: Absolute float tolerance for comparisons that are not capacities (a latency bound).
EPS = 1e-9
#: The capacity tolerance, relative to a node's capacity of each resource (:func:`fit_tolerance`):
#: a pod fits where ``free + tol >= demand``. Relative because float rounding is: an absolute
#: 1e-9 let a 1e-9 pod onto a full 1e-6 node (100.1 % used), and at 1e8-1e10 units it is below
#: one rounding step, so the last pod of an exact fill was refused while check_placement accepted
#: the whole fill. 1e-12 of the capacity covers the rounding of thousands of pods subtracted one by
#: one (about 1.1e-16 of the amounts each) and stays far below one unit up to the loader's largest
#: amount (1e10: 0.01).
FIT_REL = 1e-12
#: :func:`check_placement`'s extra slack beyond the filters' tolerance, relative to the amounts it
#: totals: it sums a node's pods in index order, the filters subtracted them from what was free in
#: placement order, and the two roundings differ by about 1e-16 of the amounts per pod (nine pods
#: with two decimals filling a 1e8 node were once flagged "over capacity (100000000 > 100000000)").
ROUNDING_REL = 1e-12

#: The static filters; a ``first_fail`` code is an index into this tuple. New filters go at the
#: end, so the codes that callers keep (``GPU_CARDS_FILTER``) stay what they were.
_FILTERS = (
    "allowed_domains",
    "taints",
    "node_selector",
    "latency",
    "gpu_model",
    "gpu_cards",
    "node_names",
    "unschedulable",
    "node_ports",
    "spread_label",
    "spread",
    "pod_affinity",
    "pod_anti_affinity",
    "existing_anti_affinity",
)
#: ``first_fail`` of a node with fewer GPU cards than the pod asks for (NodeResourcesFit then
#: lists its other shortages too).
GPU_CARDS_FILTER = _FILTERS.index("gpu_cards")
TAINTS_FILTER = _FILTERS.index("taints")
#: ``first_fail`` of a node outside the pod's ``matchFields`` node-name set (NodeAffinity PreFilter).
NODE_NAMES_FILTER = _FILTERS.index("node_names")
#: ``first_fail`` of a cordoned node the pod does not tolerate (NodeUnschedulable).
UNSCHEDULABLE_FILTER = _FILTERS.index("unschedulable")
#: The filters of the plugins that read the pods already on a node (NodePorts, PodTopologySpread,
#: InterPodAffinity), each a ``node_selector`` key prefix (:data:`POD_FILTER_PREFIXES`).
NODE_PORTS_FILTER = _FILTERS.index("node_ports")
SPREAD_LABEL_FILTER = _FILTERS.index("spread_label")
SPREAD_FILTER = _FILTERS.index("spread")
POD_AFFINITY_FILTER = _FILTERS.index("pod_affinity")
POD_ANTI_AFFINITY_FILTER = _FILTERS.index("pod_anti_affinity")
EXISTING_ANTI_AFFINITY_FILTER = _FILTERS.index("existing_anti_affinity")
#: The filters whose plugins kube runs after NodeResourcesFit: a node failing one of them and short
#: of a resource is reported for the resource (:func:`explain`).
AFTER_FIT_FILTERS = (SPREAD_LABEL_FILTER, SPREAD_FILTER, POD_AFFINITY_FILTER, POD_ANTI_AFFINITY_FILTER,
                     EXISTING_ANTI_AFFINITY_FILTER)
#: The order in which a node's failing filters are tried (indices into ``_FILTERS``):
#: kube-scheduler's. Nodes outside NodeAffinity's PreFilter node-name set are never filtered at
#: all; then the plugin order: NodeUnschedulable, TaintToleration, NodeAffinity (node selector,
#: and the allowed domains, which would be node affinity on a domain label in Kubernetes), our
#: latency and GPU-model filters, NodePorts, the card count (NodeResourcesFit), then
#: PodTopologySpread and InterPodAffinity. A node's reason is that of the first one that fails.
_PRECEDENCE = np.array([NODE_NAMES_FILTER, UNSCHEDULABLE_FILTER, TAINTS_FILTER, 2, 0, 3, 4, NODE_PORTS_FILTER, 5,
                        *AFTER_FIT_FILTERS], dtype=np.int8)

#: The taint of a cordoned node: the node lifecycle controller adds it for ``spec.unschedulable``
#: and the Kubernetes snapshot does too. A node without :data:`UNSCHEDULABLE_LABEL` that has it
#: is read as cordoned ("node(s) were unschedulable"): a problem file says so; one with a value
#: is an ordinary taint.
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
#: A node label that says whether the node is cordoned (``spec.unschedulable``): ``"true"`` is a
#: cordon (NodeUnschedulable), any other value is not, whatever the taints; the Kubernetes
#: snapshot sets ``"false"`` on a node that still has :data:`UNSCHEDULABLE_TAINT` after an
#: uncordon (until the node lifecycle controller removes it), which kube reports as the taint it
#: is: "node(s) had untolerated taint {node.kubernetes.io/unschedulable: }".
UNSCHEDULABLE_LABEL = "iro-fed.io/unschedulable"
#: ``node_selector`` keys with this prefix hold a NodeAffinity PreFilter node-name set (the
#: snapshot labels the named nodes): a node without the label is "didn't satisfy plugin(s)
#: [NodeAffinity]", ahead of every other filter.
NODE_NAMES_LABEL_PREFIX = "iro-fed.io/node-names-"
#: ``node_selector`` keys with this prefix (no node has the label) are a required node affinity
#: whose ``matchFields`` node-name sets conflict (NodeAffinity's PreFilter finds none): kube's
#: FitError is then the PreFilter's message alone, :data:`PREFILTER_CONFLICT`.
NODE_NAMES_CONFLICT_PREFIX = NODE_NAMES_LABEL_PREFIX + "conflict-"
#: nodeaffinity ``errReasonConflict``.
PREFILTER_CONFLICT = "pod affinity terms conflict"
#: ``node_selector`` key prefixes of the plugins that read the pods on a node: the Kubernetes
#: snapshot evaluates them against the pods bound there and labels the nodes that pass (a node
#: without the label fails), each node failing at most one key of a plugin (its first reason).
POD_FILTER_PREFIXES = {
    "iro-fed.io/host-ports-": NODE_PORTS_FILTER,
    "iro-fed.io/spread-label-": SPREAD_LABEL_FILTER,
    "iro-fed.io/spread-skew-": SPREAD_FILTER,
    "iro-fed.io/pod-affinity-": POD_AFFINITY_FILTER,
    "iro-fed.io/pod-anti-affinity-": POD_ANTI_AFFINITY_FILTER,
    "iro-fed.io/existing-anti-affinity-": EXISTING_ANTI_AFFINITY_FILTER,
}
#: Kubernetes' name of the GPU count (``Problem.resource_names``' ``gpu``).
GPU_RESOURCE_NAME = "nvidia.com/gpu"
#: kube's ``GetZoneKey`` (``component-helpers/node/topology``) lookup order, shared by the
#: Kubernetes snapshot and ``solvers.kube_default`` (here, not in iro_fed.k8s, so that the solvers
#: do not load the Kubernetes adapter): the deprecated beta label wins over the GA one when a node
#: has both.
ZONE_LABELS = ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone")
REGION_LABELS = ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region")
#: kube-scheduler's reasons (``pkg/scheduler/...``) for the static filters, by code; taints and the
#: latency bound carry details (:func:`static_reasons`).
_STATIC_REASONS = {
    0: "node(s) were not in the pod's allowed domains",
    2: "node(s) didn't match Pod's node affinity/selector",
    4: "node(s) didn't have an allowed GPU model",
    GPU_CARDS_FILTER: f"Insufficient {GPU_RESOURCE_NAME}",
    NODE_NAMES_FILTER: "node(s) didn't satisfy plugin(s) [NodeAffinity]",  # schedule_one.go, absent nodes
    UNSCHEDULABLE_FILTER: "node(s) were unschedulable",  # nodeunschedulable ErrReasonUnschedulable
    NODE_PORTS_FILTER: "node(s) didn't have free ports for the requested pod ports",  # nodeports ErrReason
    # podtopologyspread ErrReasonNodeLabelNotMatch, ErrReasonConstraintsNotMatch
    SPREAD_LABEL_FILTER: "node(s) didn't match pod topology spread constraints (missing required label)",
    SPREAD_FILTER: "node(s) didn't match pod topology spread constraints",
    # interpodaffinity ErrReasonAffinityRulesNotMatch, ErrReasonAntiAffinityRulesNotMatch,
    # ErrReasonExistingAntiAffinityRulesNotMatch
    POD_AFFINITY_FILTER: "node(s) didn't match pod affinity rules",
    POD_ANTI_AFFINITY_FILTER: "node(s) didn't match pod anti-affinity rules",
    EXISTING_ANTI_AFFINITY_FILTER: "node(s) didn't satisfy existing pods anti-affinity rules",
}


def topology_label(labels: Mapping[str, str], keys: Sequence[str]) -> str:
    """The first of ``keys`` the node has (even if empty, as ``GetZoneKey``), else ``""``."""
    return next((labels[k] for k in keys if k in labels), "")


def insufficient(resource: str) -> str:
    """NodeResourcesFit's reason for a node short of ``resource`` (a problem resource, or ``gpu``
    for the GPU cards): ``Too many pods`` for the pod count (fit.go), else ``Insufficient <name>``
    in Kubernetes' resource name."""
    if resource == "pods":
        return "Too many pods"
    return f"Insufficient {GPU_RESOURCE_NAME if resource == 'gpu' else resource}"


def prefilter_conflict(workload: Workload) -> bool:
    """The workload's node-name sets conflict (:data:`NODE_NAMES_CONFLICT_PREFIX`): NodeAffinity's
    PreFilter rejects it before any node is filtered."""
    return any(key.startswith(NODE_NAMES_CONFLICT_PREFIX) for key in workload.node_selector)


def static_reasons(problem: Problem, w: int) -> dict[int, str]:
    """kube's reason for each static filter code but the taints (whose message is per taint:
    ``StaticFilter.taint_messages``), for workload ``w``."""
    wl = problem.workloads[w]
    out = dict(_STATIC_REASONS)
    if prefilter_conflict(wl):  # every node gets PreFilter's status (SetAbsentNodesStatus)
        out[NODE_NAMES_FILTER] = PREFILTER_CONFLICT
    out[3] = (
        f"node(s) exceeded max latency {wl.max_latency_ms:g} ms from {wl.user_region}"
        if wl.max_latency_ms is not None
        else ""
    )
    return out


@dataclass(frozen=True)
class StaticFilter:
    """The static verdict for one constraint set: ``mask[n]`` and, per node, the index into
    ``_FILTERS`` of its first failing filter (-1 when it passes)."""

    mask: np.ndarray
    first_fail: np.ndarray
    taint_reason: np.ndarray  # per node, index into ``taint_messages`` (-1 when not failing on taints)
    taint_messages: tuple[str, ...]


_static_cache: weakref.WeakKeyDictionary[Problem, dict[tuple, StaticFilter]] = weakref.WeakKeyDictionary()
_static_by_w: weakref.WeakKeyDictionary[Problem, dict[int, StaticFilter]] = weakref.WeakKeyDictionary()
_tolerance_cache: weakref.WeakKeyDictionary[Problem, np.ndarray] = weakref.WeakKeyDictionary()
_taint_pos_cache: weakref.WeakKeyDictionary[Problem, np.ndarray] = weakref.WeakKeyDictionary()


def _taint_positions(problem: Problem) -> np.ndarray:
    """``pos[n, t]``: where taint t of ``problem.taint_table`` stands in node n's own taint list
    (a large number where the node does not have it). kube-scheduler reports the first
    untolerated taint in the node's order (``FindMatchingUntoleratedTaint``)."""
    pos = _taint_pos_cache.get(problem)
    if pos is None:
        taints, table = problem.taint_table
        index = {t: i for i, t in enumerate(taints)}
        pos = np.full(table.shape, np.iinfo(np.int32).max, dtype=np.int32)
        for n, node in enumerate(problem.nodes):
            for k, t in enumerate(node.taints):
                pos[n, index[t]] = min(pos[n, index[t]], k)
        pos.setflags(write=False)
        _taint_pos_cache[problem] = pos
    return pos


def _cordoned(problem: Problem) -> np.ndarray:
    """``cordoned[n]``: node n is cordoned (NodeUnschedulable's test of ``spec.unschedulable``):
    its :data:`UNSCHEDULABLE_LABEL` is ``"true"``, or it has no such label and has
    :data:`UNSCHEDULABLE_TAINT`."""
    taints, table = problem.taint_table
    if UNSCHEDULABLE_TAINT in taints:
        out = table[:, taints.index(UNSCHEDULABLE_TAINT)].copy()
    else:
        out = np.zeros(problem.num_nodes, dtype=bool)
    codes, values = problem.label_codes(UNSCHEDULABLE_LABEL)
    if values:
        labelled = codes >= 0
        out[labelled] = codes[labelled] == values.get("true", -2)
    return out


def fit_tolerance(problem: Problem) -> np.ndarray:
    """``tol[n, r]``: how far what is free of resource r on node n may fall short of a request and
    the pod still fit, for float rounding only (:data:`FIT_REL` of the node's capacity; a
    request of a resource is tested as ``free + tol >= demand`` by every filter and solver).
    Per node, not per resource: in one problem a resource may have 1e-6 and 1e10 nodes, and the
    rounding of a node's sums scales with its own amounts. Read-only, cached per problem."""
    tol = _tolerance_cache.get(problem)
    if tol is None:
        tol = FIT_REL * np.abs(problem.capacity)
        tol.setflags(write=False)
        _tolerance_cache[problem] = tol
    return tol


def room_fits(free: np.ndarray, tol: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Where ``demand``'s additive requests fit what is free (last axis: resources): ``free + tol
    >= demand`` for each resource it asks for (one it asks none of is not checked, as in
    NodeResourcesFit). ``tol`` is :func:`fit_tolerance` of the rows; the arrays broadcast."""
    return ((free + tol >= demand) | (demand <= 0)).all(axis=-1)


def over_capacity(problem: Problem, used: np.ndarray, nodes: np.ndarray | int | slice = slice(None)) -> np.ndarray:
    """Where ``used`` (totals of ``problem.capacity[nodes]``'s shape) is past capacity by more
    than float rounding: the filters' :func:`fit_tolerance` plus :data:`ROUNDING_REL` of the
    amounts. :func:`check_placement`'s test, also the brute-force oracle's."""
    cap = problem.capacity[nodes]
    return used > cap + fit_tolerance(problem)[nodes] + ROUNDING_REL * np.maximum(cap, used)


def untolerated(workload: Workload, problem: Problem, effects: Sequence[str]) -> np.ndarray:
    """Columns of ``problem.taint_table`` with one of ``effects`` that the workload does not tolerate."""
    taints, _ = problem.taint_table
    return np.array(
        [
            i
            for i, t in enumerate(taints)
            if t.effect in effects and not any(tol.tolerates(t) for tol in workload.tolerations)
        ],
        dtype=np.int64,
    )


def static_filter(problem: Problem, w: int) -> StaticFilter:
    """The static filters for workload ``w`` (cached per constraint set and GPU shape, and that
    entry per workload: every feasibility test of a local search asks again)."""
    by_w = _static_by_w.get(problem)
    if by_w is None:
        by_w = _static_by_w.setdefault(problem, {})
    cached = by_w.get(w)
    if cached is not None:
        return cached
    wl = problem.workloads[w]
    key = (wl.constraint_key, int(problem.wl_gpu_count[w]), int(problem.wl_gpu_milli[w]) > 0)
    per_problem = _static_cache.setdefault(problem, {})
    cached = per_problem.get(key)
    if cached is None:
        cached = _compute_static(problem, w)
        per_problem[key] = cached
    by_w[int(w)] = cached
    return cached


def _pod_filter_code(key: str) -> int | None:
    """The filter of a ``node_selector`` key of :data:`POD_FILTER_PREFIXES` (None: another key)."""
    if not key.startswith("iro-fed.io/"):
        return None
    return next((code for prefix, code in POD_FILTER_PREFIXES.items() if key.startswith(prefix)), None)


def _compute_static(problem: Problem, w: int) -> StaticFilter:
    wl = problem.workloads[w]
    n = problem.num_nodes
    fails: list[np.ndarray] = []

    # Allowed domains (ours; kube would express it as node affinity on a domain label).
    if wl.allowed_domains:
        allowed = np.array([problem.domain_index[d] for d in wl.allowed_domains], dtype=np.int32)
        fails.append(~np.isin(problem.node_domain, allowed))
    else:
        fails.append(np.zeros(n, dtype=bool))

    # Taints: NoSchedule and NoExecute filter (TaintToleration plugin).
    taints, table = problem.taint_table
    cols = untolerated(wl, problem, ("NoSchedule", "NoExecute"))
    taint_reason = np.full(n, -1, dtype=np.int32)
    messages: tuple[str, ...] = ()
    if cols.size:
        sub = table[:, cols]
        bad = sub.any(axis=1)
        order = np.where(sub, _taint_positions(problem)[:, cols], np.iinfo(np.int32).max)
        taint_reason[bad] = np.argmin(order[bad], axis=1)
        messages = tuple(f"node(s) had untolerated taint {{{taints[c].key}: {taints[c].value}}}" for c in cols)
        fails.append(bad)
    else:
        fails.append(np.zeros(n, dtype=bool))

    # Node selector (NodeAffinity plugin): every key must be present with the same value. The
    # node-name set keys are NodeAffinity's PreFilter instead (below).
    sel_fail = np.zeros(n, dtype=bool)
    names_fail = np.zeros(n, dtype=bool)
    pod_fails = {code: np.zeros(n, dtype=bool) for code in POD_FILTER_PREFIXES.values()}
    for key, value in wl.node_selector.items():
        codes, values = problem.label_codes(key)
        code = values.get(value)
        miss = codes != (code if code is not None else -2)
        pod_code = _pod_filter_code(key)
        if pod_code is not None:
            pod_fails[pod_code] |= miss
        elif key.startswith(NODE_NAMES_CONFLICT_PREFIX):
            names_fail[:] = True  # PreFilter fails: no node is filtered, whatever its labels
        elif key.startswith(NODE_NAMES_LABEL_PREFIX):
            names_fail |= miss
        else:
            sel_fail |= miss
    fails.append(sel_fail)

    # Latency bound from the pod's user region to the node's domain (unknown latency fails).
    if wl.max_latency_ms is not None and wl.user_region:
        row = problem.latency_ms[problem.region_index[wl.user_region]]
        ok_domain = np.nan_to_num(row, nan=np.inf) <= wl.max_latency_ms + EPS
        fails.append(~ok_domain[problem.node_domain])
    else:
        fails.append(np.zeros(n, dtype=bool))

    # GPU model and card count (a node with too few cards can never run the pod).
    count = int(problem.wl_gpu_count[w])
    model_fail = np.zeros(n, dtype=bool)
    card_fail = np.zeros(n, dtype=bool)
    if count > 0:
        if wl.gpu_models:
            allowed_models = [problem.gpu_models.index(m) for m in wl.gpu_models if m in problem.gpu_models]
            # Nodes without GPUs fail on the card count ("Insufficient nvidia.com/gpu") instead.
            model_fail = ~np.isin(problem.node_gpu_model, np.array(allowed_models, dtype=np.int32)) & (
                problem.gpu_count > 0
            )
        card_fail = problem.gpu_count < count
    fails.append(model_fail)
    fails.append(card_fail)
    fails.append(names_fail)
    fails.append(_cordoned(problem) & ~any(t.tolerates(UNSCHEDULABLE_TAINT) for t in wl.tolerations))
    fails.extend(pod_fails[code] for code in range(NODE_PORTS_FILTER, len(_FILTERS)))

    stacked = np.stack(fails)[_PRECEDENCE]  # [filters, N], in the order they are tried
    any_fail = stacked.any(axis=0)
    first = np.where(any_fail, _PRECEDENCE[np.argmax(stacked, axis=0)], -1).astype(np.int8)
    for a in (any_fail, first, taint_reason):
        a.setflags(write=False)
    mask = ~any_fail
    mask.setflags(write=False)
    # Keep the taint index only where taints are the first failing filter.
    taint_reason = np.where(first == TAINTS_FILTER, taint_reason, -1).astype(np.int32)
    taint_reason.setflags(write=False)
    return StaticFilter(mask, first, taint_reason, messages)


def _is_index(nodes: object) -> bool:
    return isinstance(nodes, np.ndarray) and nodes.dtype.kind in "iu"


def resource_fit(state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """``fit[n]``: the pod's additive resources and GPU request fit what is free now on node n
    (over ``nodes`` when given, else all nodes)."""
    p = state.problem
    if _is_index(nodes) and nodes.shape == (1,):
        return np.array([_fits_node(state, w, int(nodes[0]))])
    free, tol = state.free, fit_tolerance(p)
    if nodes is not None:  # take: a third of the time of free[nodes] for 500 of 5,000 rows
        free, tol = (free.take(nodes, axis=0), tol.take(nodes, axis=0)) if _is_index(nodes) else (free[nodes], tol[nodes])
    ok: np.ndarray | None = None
    for r, amount in p.fit_requests(w):  # (a fresh array from the first comparison, then &= in place)
        fits = free[:, r] + tol[:, r] >= amount
        if ok is None:
            ok = fits
        else:
            ok &= fits
    if ok is None:
        ok = np.ones(p.num_nodes if nodes is None else len(nodes), dtype=bool)
    count, milli = p.gpu_shape[w]
    if count > 0:
        if count == 1 and milli < GPU_MILLI:
            gmax = state.gpu_max_free if nodes is None else state.gpu_max_free[nodes]
            ok &= gmax >= milli
        else:
            full = state.gpu_full if nodes is None else state.gpu_full[nodes]
            ok &= full >= count
    return ok


def _fits_node(state: ClusterState, w: int, n: int) -> bool:
    """:func:`resource_fit` on the one node ``n`` (a local search's move test): the same float
    sums and comparisons on Python floats, without a dozen one-element arrays."""
    p = state.problem
    free = state.free[n].tolist()
    tol = fit_tolerance(p)[n].tolist()
    for r, amount in p.fit_requests(w):
        if not free[r] + tol[r] >= amount:
            return False
    count, milli = p.gpu_shape[w]
    if count <= 0:
        return True
    if count == 1 and milli < GPU_MILLI:
        return int(state.gpu_max_free[n]) >= milli
    return int(state.gpu_full[n]) >= count


def feasible_nodes(state: ClusterState, w: int) -> np.ndarray:
    """``mask[n]``: workload ``w`` can be placed on node n in ``state``."""
    fit = resource_fit(state, w)  # a fresh array: the static mask is and-ed into it
    fit &= static_filter(state.problem, w).mask
    return fit


def feasible_matrix(problem: Problem, state: ClusterState | None = None) -> np.ndarray:
    """``mask[w, n]`` for every workload against the same cluster state (batch filter).

    Each pod is checked alone against ``state`` (default: the problem's initial cluster);
    pods do not see each other's usage, which is what a batch solver's capacity constraints add.
    """
    st = state if state is not None else ClusterState(problem)
    p = problem
    out = np.zeros((p.num_workloads, p.num_nodes), dtype=bool)
    if p.num_workloads == 0 or p.num_nodes == 0:
        return out
    # Additive resources: one broadcast over [W, N, R]; a resource the pod does not request is
    # not checked (as in resource_fit and NodeResourcesFit), even on an overcommitted node.
    out[:] = room_fits(st.free[None, :, :], fit_tolerance(p)[None, :, :], p.demand[:, None, :])
    # As resource_fit: count 1 below a whole card is a share (a Problem refuses milli 0).
    share = (p.wl_gpu_count == 1) & (p.wl_gpu_milli < GPU_MILLI)
    whole = (p.wl_gpu_count >= 1) & ~share
    if share.any():
        out[share] &= st.gpu_max_free[None, :] >= p.wl_gpu_milli[share][:, None]
    if whole.any():
        out[whole] &= st.gpu_full[None, :] >= p.wl_gpu_count[whole][:, None]
    for w in range(p.num_workloads):
        out[w] &= static_filter(p, w).mask
    return out


def pod_key(problem: Problem, w: int) -> tuple:
    """What decides a pod's feasibility and its terms in R: pods with equal keys are identical."""
    return (
        problem.demand[w].tobytes(),
        int(problem.wl_gpu_count[w]),
        int(problem.wl_gpu_milli[w]),
        problem.workloads[w].constraint_key,
    )


def pod_groups(problem: Problem, pods: np.ndarray | None = None) -> list[np.ndarray]:
    """``pods`` (default: all) split into groups that are identical for feasibility and the
    objective (requests, GPU shape and constraints); members in pod order."""
    pods = np.arange(problem.num_workloads) if pods is None else np.asarray(pods, dtype=np.int64)
    keys: dict[tuple, list[int]] = {}
    for w in pods:
        w = int(w)
        keys.setdefault(pod_key(problem, w), []).append(w)
    return [np.array(sorted(m), dtype=np.int64) for m in keys.values()]


def candidate_matrix(problem: Problem, state: ClusterState, between: Callable[[], None] | None = None) -> np.ndarray:
    """:func:`feasible_matrix` of ``state``, computed once per group of identical pods
    (:func:`pod_groups`: equal rows) by :func:`feasible_nodes`, calling ``between()`` before each
    group (a solver's clock, which may raise to stop). The whole-matrix broadcast cannot stop
    midway and took 0.12-0.20 s at 1000 x 5000 (182 groups: 0.003 s this way), past a 0.2 s limit."""
    out = np.zeros((problem.num_workloads, problem.num_nodes), dtype=bool)
    for members in pod_groups(problem):
        if between is not None:
            between()
        out[members] = feasible_nodes(state, int(members[0]))
    return out


def explain(state: ClusterState, w: int) -> str:
    """kube-scheduler's FitError message for a pod against ``state`` (all nodes counted)."""
    p = state.problem
    if prefilter_conflict(p.workloads[w]):  # PreFilter's message replaces the nodes' histogram
        return f"0/{p.num_nodes} nodes are available: {PREFILTER_CONFLICT}."
    sf = static_filter(p, w)
    counts: Counter[str] = Counter()
    static_messages = static_reasons(p, w)
    for code, message in static_messages.items():
        if code in AFTER_FIT_FILTERS:
            continue  # counted below, on the nodes that NodeResourcesFit lets through
        k = int((sf.first_fail == code).sum())  # never the taints' code: static_reasons leaves it out
        if k:
            counts[message] += k
    if sf.taint_messages:
        ti = sf.taint_reason[sf.taint_reason >= 0]
        for idx, k in zip(*np.unique(ti, return_counts=True), strict=True):
            counts[sf.taint_messages[int(idx)]] += int(k)
    # Resources: every insufficient resource of a node that reaches NodeResourcesFit counts; a
    # node with too few GPU cards (static "Insufficient nvidia.com/gpu") reaches it too, so its cpu /
    # memory shortages count beside the gpu one, as kube lists all of a node's shortfalls.
    # A node whose first static failure is a plugin kube runs after NodeResourcesFit (spread,
    # inter-pod affinity) reaches the resource check too, and is reported for its shortages if any.
    late = np.isin(sf.first_fail, AFTER_FIT_FILTERS)
    ok_nodes = np.flatnonzero(sf.mask | late)
    fit_nodes = np.flatnonzero(sf.mask | late | (sf.first_fail == GPU_CARDS_FILTER))
    short = np.zeros(p.num_nodes, dtype=bool)
    if fit_nodes.size:
        demand = p.demand[w]
        tol = fit_tolerance(p)
        for r in np.flatnonzero(demand > 0):
            bad = state.free[fit_nodes, r] + tol[fit_nodes, r] < demand[r]
            short[fit_nodes[bad]] = True
            k = int(bad.sum())
            if k:
                counts[insufficient(p.resources[r])] += k
    if ok_nodes.size:
        count = int(p.wl_gpu_count[w])
        if count > 0:
            milli = int(p.wl_gpu_milli[w])
            if count == 1 and milli < GPU_MILLI:
                bad = state.gpu_max_free[ok_nodes] < milli
            else:
                bad = state.gpu_full[ok_nodes] < count
            short[ok_nodes[bad]] = True
            k = int(bad.sum())
            if k:
                counts[insufficient("gpu")] += k
    if late.any():
        for code in AFTER_FIT_FILTERS:
            k = int(((sf.first_fail == code) & ~short).sum())
            if k:
                counts[static_messages[code]] += k
    available = int(feasible_nodes(state, w).sum())
    reasons = sorted(f"{k} {msg}" for msg, k in counts.items())
    head = f"{available}/{p.num_nodes} nodes are available"
    return f"{head}: {', '.join(reasons)}." if reasons else f"{head}."


def check_placement(problem: Problem, assignment: np.ndarray, gpu_cards: dict[int, tuple[int, ...]]) -> list[str]:
    """Every violated constraint of a placement, in words (empty when it is valid).

    Order-independent: totals per node and per GPU card against the initial cluster, the
    static filters for each placed pod, and the card rules (a share on one card, k distinct
    cards for k GPUs, each taken whole).

    Only violations the placement causes or worsens: a resource over capacity on a node where
    placed pods request some of it. A node already used past its capacity (a cluster snapshot,
    ``Problem.with_cluster``) is not flagged for a resource the placement adds none of there, as
    kube-scheduler's NodeResourcesFit checks only the resources a pod requests
    (``fitsRequest`` skips those it asks 0 of). When placed pods do add some, the last of them
    to arrive, in any order, finds less free than it asks, so the total check is exact (up to
    float rounding: totals may exceed capacity by the filters' :func:`fit_tolerance` plus
    :data:`ROUNDING_REL` of the amounts, so that what the filters accept is accepted here).
    """
    errors: list[str] = []
    assignment = np.asarray(assignment)
    if assignment.shape != (problem.num_workloads,):
        return [f"assignment has shape {assignment.shape}, expected ({problem.num_workloads},)"]
    bad = (assignment < -1) | (assignment >= problem.num_nodes)
    for w in np.flatnonzero(bad):
        errors.append(f"{problem.workloads[w].name}: node index {int(assignment[w])} out of range")
    if errors:
        return errors
    placed = np.flatnonzero(assignment >= 0)
    used = problem.allocated.copy()
    np.add.at(used, assignment[placed], problem.demand[placed])
    adds = np.zeros(used.shape, dtype=bool)
    np.logical_or.at(adds, assignment[placed], problem.demand[placed] > 0)  # repeated nodes: no buffered |=
    over = over_capacity(problem, used) & adds
    for n, r in zip(*np.nonzero(over), strict=True):
        errors.append(
            f"node {problem.nodes[n].name}: {problem.resources[r]} over capacity "
            f"({used[n, r]:.12g} > {problem.capacity[n, r]:.12g})"
        )
    card_take = np.zeros(problem.gpu_free.shape, dtype=np.int64)
    for w in placed:
        name = problem.workloads[w].name
        n = int(assignment[w])
        if not static_filter(problem, w).mask[n]:
            errors.append(f"{name}: node {problem.nodes[n].name} violates a static constraint")
        count = int(problem.wl_gpu_count[w])
        cards = tuple(gpu_cards.get(int(w), ()))
        if count == 0:
            if cards:
                errors.append(f"{name}: has GPU cards {cards} but asks for no GPU")
            continue
        if len(cards) != count or len(set(cards)) != count:
            errors.append(f"{name}: needs {count} distinct GPU card(s), got {cards}")
            continue
        if any(c < 0 or c >= problem.gpu_count[n] for c in cards):
            errors.append(f"{name}: card index out of range on node {problem.nodes[n].name}: {cards}")
            continue
        take = GPU_MILLI if count > 1 else int(problem.wl_gpu_milli[w])
        for c in cards:
            card_take[n, c] += take
    over_card = card_take > np.maximum(problem.gpu_free, 0)
    for n, c in zip(*np.nonzero(over_card), strict=True):
        errors.append(
            f"node {problem.nodes[n].name}: GPU card {c} over capacity "
            f"({card_take[n, c]} milli > {problem.gpu_free[n, c]} free)"
        )
    return errors
