"""The GPU-stranding guard of ``greedy-objective``: which placements leave free GPUs unusable.

The objective's power model charges a core on a GPU node no more than a core elsewhere (less
where the node is already on), so the myopic argmax of the marginal packs CPU pods onto GPU
nodes and leaves later GPU pods without the CPU or memory to run beside the free cards. The
guard names the placements that do that; ``GreedyObjective`` ranks them after every placement
that does not (the objective still scores every node; the guard only reorders).

A placement of pod ``w`` on node ``n`` *strands* when it grows either of:

* **fed-resource stranding**: the node's free GPU milli beyond what its free resources can feed,
  ``max(0, gpu_left - min_r free_r / need_r)``, where ``need[n, r]`` is what one GPU milli needs
  of resource r. With GPU pods in the problem, ``need`` is their requests per GPU milli (summed
  over the pods that could run on n: its static filters admit them, they fit its free resources
  and cards before any placement), and a node counts only while one of those pods other than
  ``w`` is still unplaced. A problem without GPU pods (an online decision: one pod from the
  Kubernetes scheduler, a simulator step of CPU pods) cannot say what the GPUs will need, so
  each card is taken to need its share of the node as provisioned (capacity / cards).
* **whole-card stranding**: for the unplaced multi-card pods (k >= 2 whole cards) that could
  run on the node, the GPU milli their whole copies can take (``k * 1000 * floor(full cards /
  k)``, the ``copies`` fragmentation of ``iro_fed.fragmentation`` without CPU and memory) falls
  by more than ``w``'s own GPU milli, summed over those pods: a 1-GPU pod that breaks a node's
  only pair of free cards while a 2-GPU pod waits.

Everything is integer counts and vector expressions over the candidate nodes (over all nodes
when most are candidates); the unplaced counts per node and the nodes' partly used cards follow
the state's journal (``OnlineSolver.sync``).
"""

from __future__ import annotations

import numpy as np

from iro_fed.feasibility import fit_tolerance, static_filter
from iro_fed.model import GPU_MILLI, ClusterState, Problem

#: Stranded GPU milli that a placement may add and still count as not stranding (float rounding).
STRAND_TOL_MILLI = 1e-6


class GpuStrandingGuard:
    """Per problem: what its GPUs need, and how many of its unplaced GPU pods could use each node."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        n = problem.num_nodes
        gpu_pods = np.flatnonzero(problem.wl_gpu_total > 0)
        #: [W] the group of each GPU pod (-1 for the others)
        self.group_of = np.full(problem.num_workloads, -1, dtype=np.int64)
        self._run_index: dict[int, np.ndarray] = {}
        #: whole-card counts k >= 2 of the multi-card groups, ascending
        self.multi_cards = np.zeros(0, dtype=np.int64)
        if gpu_pods.size == 0:
            self.need = provisioned_need(problem)
            self.runs = np.zeros((0, n), dtype=bool)
            self.group_multi = np.zeros(0, dtype=np.int64)
            self.remaining = np.zeros(0, dtype=np.int64)
            self._invert_need()
            return
        free = problem.capacity - problem.allocated + fit_tolerance(problem)
        keys: dict[tuple, int] = {}
        first: list[int] = []
        for w in gpu_pods.tolist():
            # pods alike in filters, requests and GPU shape can run on the same nodes
            key = (id(static_filter(problem, w)), problem.demand[w].tobytes(), problem.gpu_shape[w])
            g = keys.setdefault(key, len(first))
            if g == len(first):
                first.append(w)
            self.group_of[w] = g
        size = np.bincount(self.group_of[gpu_pods], minlength=len(first))
        #: [G, N] the group's pods could run on the node (static filters, free resources and cards at the start)
        self.runs = np.array([static_filter(problem, w).mask & _fits_at_start(problem, free, w) for w in first])
        reps = np.array(first, dtype=np.int64)
        requests = np.zeros((n, len(problem.resources)))
        milli = np.zeros(n)
        for g, w in enumerate(first):  # per group, not one [N, G] matrix: G x N floats can be large
            requests[self.runs[g]] += size[g] * problem.demand[w]
            milli[self.runs[g]] += size[g] * float(problem.wl_gpu_total[w])
        self.need = requests / np.maximum(milli, 1.0)[:, None]
        k, per_card = problem.wl_gpu_count[reps], problem.wl_gpu_milli[reps]
        multi = np.where((k >= 2) & (per_card >= GPU_MILLI), k, 0)
        self.multi_cards = np.unique(multi[multi > 0]).astype(np.int64)
        #: [G] row of the group in the multi-card counts (-1: not a multi-card group)
        self.group_multi = np.where(multi > 0, np.searchsorted(self.multi_cards, multi), -1).astype(np.int64)
        self.remaining = size.astype(np.int64)
        self._invert_need()
        self._count()

    def _invert_need(self) -> None:
        # Per needed column c: fed milli = free_c * inv_c (+ inf where the node needs none of c)
        self.columns: list[tuple[int, np.ndarray, np.ndarray | None]] = []
        for c in np.flatnonzero((self.need > 0).any(axis=0)).tolist():
            needed = self.need[:, c] > 0
            inv = np.where(needed, 1.0 / np.where(needed, self.need[:, c], 1.0), 0.0)
            self.columns.append((c, inv, None if needed.all() else np.where(needed, 0.0, np.inf)))

    @property
    def online(self) -> bool:
        """No GPU pods in the problem: the provisioned need, on every GPU node."""
        return self.runs.shape[0] == 0

    def _count(self) -> None:
        # [N] unplaced GPU pods that could run on the node; [K, N] those of k = multi_cards[i] whole cards
        n = self.problem.num_nodes
        self.waiting = np.zeros(n, dtype=np.int64)
        self.waiting_multi = np.zeros((self.multi_cards.size, n), dtype=np.int64)
        for g in np.flatnonzero(self.remaining).tolist():
            self.waiting[self.runs[g]] += self.remaining[g]
            if self.group_multi[g] >= 0:
                self.waiting_multi[self.group_multi[g], self.runs[g]] += self.remaining[g]

    def rebuild(self, state: ClusterState) -> None:
        """The unplaced counts and the per-node card summary, from the state."""
        cards = state.gpu_free
        #: [N] the most milli free on a partly used card (-1 when none): a share takes a full card
        #: only where this is below its milli (ClusterState.default_cards)
        self.partial_max = np.where((cards >= 0) & (cards < GPU_MILLI), cards, -1).max(axis=1, initial=-1)
        if not self.online:
            open_ = (state.assignment < 0) & (self.group_of >= 0)
            self.remaining = np.bincount(self.group_of[open_], minlength=self.runs.shape[0]).astype(np.int64)
            self._count()

    def apply(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        """Journal entries (w, node, +1 placed / -1 removed)."""
        for w, n, sign in entries:
            row = state.gpu_free[n]
            self.partial_max[n] = max((int(v) for v in row if 0 <= v < GPU_MILLI), default=-1)
            g = int(self.group_of[w]) if w >= 0 else -1
            if g >= 0:
                self.remaining[g] -= sign
                where = self._run_nodes(g)
                self.waiting[where] -= sign
                if self.group_multi[g] >= 0:
                    self.waiting_multi[self.group_multi[g], where] -= sign

    def _run_nodes(self, g: int) -> np.ndarray:
        """The nodes group g could run on, as indices (cached: updates by index beat a mask)."""
        where = self._run_index.get(g)
        if where is None:
            where = self._run_index[g] = np.flatnonzero(self.runs[g])
        return where

    def strands(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray | None:
        """Per candidate, whether placing ``w`` there strands GPU milli; None when none does."""
        if not self.columns and not self.multi_cards.size:
            return None
        # Many candidates: one pass over all nodes (views, no gathers), then the candidates' rows.
        dense = 4 * candidates.size > self.problem.num_nodes
        grown = self._grown(state, w, None if dense else candidates)
        if dense:
            grown = grown[candidates]
        return grown if grown.any() else None

    def _grown(self, state: ClusterState, w: int, nodes: np.ndarray | None) -> np.ndarray:
        """Per node (all, or ``nodes``): placing ``w`` there strands GPU milli."""

        def take(a: np.ndarray) -> np.ndarray:
            return a if nodes is None else a[nodes]

        p = self.problem
        left = take(state.gpu_left)
        g = int(self.group_of[w])
        own_group = g if g >= 0 and state.assignment[w] < 0 else -1  # w keeps no room for itself
        keep = left > 0
        if not self.online:
            waiting = take(self.waiting)
            if own_group >= 0:
                waiting = waiting - take(self.runs[own_group])
            keep &= waiting > 0
        gpu = int(p.wl_gpu_total[w])
        grown = np.zeros(left.size, dtype=bool)
        if self.columns:
            fed_before = fed_after = None
            for c, inv_all, pad_all in self.columns:  # column by column: a min over a short axis is slow
                free, inv = np.maximum(take(state.free[:, c]), 0.0), take(inv_all)
                before = free * inv
                after = np.maximum(free - p.demand[w, c], 0.0) * inv
                if pad_all is not None:
                    pad = take(pad_all)
                    before += pad
                    after += pad
                fed_before = before if fed_before is None else np.minimum(fed_before, before)
                fed_after = after if fed_after is None else np.minimum(fed_after, after)
            stranded = np.maximum(left - fed_before, 0.0)
            grown = np.maximum(left - gpu - fed_after, 0.0) > stranded + STRAND_TOL_MILLI
        if gpu and self.multi_cards.size:
            grown |= self._card_growth(state, w, nodes, own_group) > STRAND_TOL_MILLI
        return grown & keep

    def _card_growth(self, state: ClusterState, w: int, nodes: np.ndarray | None, own_group: int) -> np.ndarray:
        """Per node (all, or ``nodes``), the whole-card copies the unplaced multi-card pods lose
        beyond w's own milli, summed over those pods."""

        def take(a: np.ndarray) -> np.ndarray:
            return a if nodes is None else a[..., nodes]

        k, milli = self.problem.gpu_shape[w]
        full_before = take(state.gpu_full).astype(np.int64)
        if k == 1 and milli < GPU_MILLI:
            full_after = full_before - (take(self.partial_max) < milli)
        else:
            full_after = full_before - k
        pods = take(self.waiting_multi)  # [K, nodes]
        if own_group >= 0 and self.group_multi[own_group] >= 0:
            pods = pods.copy()
            pods[self.group_multi[own_group]] -= take(self.runs[own_group])
        ks = self.multi_cards[:, None]
        lost = ks * GPU_MILLI * (full_before // ks - full_after // ks) - float(self.problem.wl_gpu_total[w])
        return (pods * lost).sum(axis=0)


def provisioned_need(problem: Problem) -> np.ndarray:
    """[N, R] each node's resources per GPU milli as provisioned (0 without cards)."""
    milli = problem.gpu_count.astype(np.float64) * GPU_MILLI
    return problem.capacity / np.maximum(milli, 1.0)[:, None] * (milli > 0)[:, None]


def _fits_at_start(problem: Problem, free: np.ndarray, w: int) -> np.ndarray:
    """[N] w fits each node's free resources and cards before any placement."""
    k, milli = problem.gpu_shape[w]
    cards = problem.gpu_free
    if k == 1 and milli < GPU_MILLI:
        room = (cards >= milli).any(axis=1)
    else:
        room = (cards == GPU_MILLI).sum(axis=1) >= k
    return room & (free >= problem.demand[w]).all(axis=1)
