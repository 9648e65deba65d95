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

cpsat's ``gpu_guard`` mask takes the fed-resource rule alone from here
(:meth:`GpuStrandingGuard.fed_strands`): its model places the batch's multi-card pods itself.

Cost: what does not depend on the pod (each node's free GPU milli, stranded milli before the
placement, free resources, full and partly used cards, whether it keeps room, its whole-card
sums) is one row per node, stored node by node (``table`` is its [rows, N] view), kept from the
state's journal (``OnlineSolver.sync``: a placement recomputes its node's row; a group's cover
of its nodes starting or ending, the rows where that changes). Whole-card stranding needs no
per-call work over the multi-card sizes: per node, the unplaced multi-card pods' sums are kept
(integers, exact in floats): a k-card placement breaks ``k // m + (full % m < k % m)`` copies of
m cards, so the milli the pods lose beyond the pod's own, ``sum_m pods_m * (m * 1000 * copies -
k * 1000)``, is one row per whole-card count k of the problem; a share breaks a copy where no
partly used card fits it and ``full % m == 0``, so it strands where ``partial < milli`` and
``shared > milli * waiting`` (shared: ``sum_m pods_m * m * 1000 * (full % m == 0)``, waiting:
``sum_m pods_m``). A multi-card pod's own size loses exactly its own milli, so its own group
needs no correction. When a multi-card pod is placed or removed its term is added on the nodes
its group could run on (a few vector operations); a node's row is recounted when the node
changes. A call gathers the candidates' rows once and evaluates the fed-resource rule as a few
one-dimensional vector operations and the whole-card rule as one or two comparisons, or all in
Python floats for a handful of candidates (the same IEEE operations in the same order, so the
same answers).
"""

from __future__ import annotations

import numpy as np

from iro_fed.feasibility import fit_tolerance, static_filter
from iro_fed.model import GPU_MILLI, ClusterState, Problem

#: Stranded GPU milli that a placement may add and still count as not stranding (float rounding).
STRAND_TOL_MILLI = 1e-6

# Rows of GpuStrandingGuard.table (one column per node; a call gathers its candidates'): the
# most milli free on a partly used card, the milli of the copies a share would break summed over
# the unplaced multi-card pods that could run on the node (0 where it keeps no room) and their
# count (_card_sums), full cards, free GPU milli, the stranded milli before any placement plus
# the tolerance (inf where the node keeps no room), per needed resource its free amount and
# inverse need (both inf where the node needs none of it); then per whole-card count k of the
# problem's GPU pods the milli the multi-card pods would lose beyond the pod's own (0 where the
# node keeps no room).
_PARTIAL, _SHARED, _WAITING, _FULL, _LEFT, _LIMIT, _FREE = range(7)
#: Up to this many changed nodes are refreshed one by one in Python, more as arrays.
_FEW_NODES = 8
#: Most entries of the memo of _card_sums (then it starts again).
_MEMO = 4096


class GpuStrandingGuard:
    """Per problem: what its GPUs need, and how many of its unplaced GPU pods could use each node."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        n = problem.num_nodes
        gpu_pods = np.flatnonzero(problem.wl_gpu_total > 0)
        #: [W] the group of each GPU pod (-1 for the others)
        self.group_of = np.full(problem.num_workloads, -1, dtype=np.int64)
        #: whole-card counts k >= 2 of the multi-card groups, ascending
        self.multi_cards = np.zeros(0, dtype=np.int64)
        if gpu_pods.size == 0:
            self.need = provisioned_need(problem)
            self.runs = np.zeros((0, n), dtype=bool)
            self.group_multi = np.zeros(0, dtype=np.int64)
            self.remaining = np.zeros(0, dtype=np.int64)
            self._invert_need()
            self._count()
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
        # Per needed column c: fed milli = free_c * inv_c (inf where the node needs none of c:
        # free and inverse both inf). One column per node (see _PARTIAL...): a call gathers the
        # candidates' columns once, not a dozen arrays one by one, and what does not depend on
        # the pod is worked out when a node changes.
        p = self.problem
        n = p.num_nodes
        self.cols = np.flatnonzero((self.need > 0).any(axis=0)).astype(np.int64)
        self._cols = self.cols.tolist()
        self._group_of = self.group_of.tolist()
        c = self.cols.size
        self._needed = (self.need[:, self.cols] > 0).T  # [C, N]
        self._needed_at = self._needed.T.tolist()  # per node, as Python bools (_refresh_node)
        self._free = slice(_FREE, _FREE + c)
        self._inv = slice(_FREE + c, _FREE + 2 * c)
        first = _FREE + 2 * c  # the whole-card rows follow the inverse needs
        # the whole-card counts k of the problem's GPU pods (shares aside), each with a row (see
        # _card_sums); none without multi-card pods, where no placement breaks a copy
        share = (p.wl_gpu_count == 1) & (p.wl_gpu_milli < GPU_MILLI)
        whole = (p.wl_gpu_total > 0) & ~share
        ks = np.unique(p.wl_gpu_count[whole]) if self.multi_cards.size else []
        self.whole_cards = np.asarray(ks, dtype=np.int64)
        self._whole = slice(first, first + self.whole_cards.size)
        # per pod, what the rules read as Python values (a call would spend more on numpy
        # scalars): its GPU milli, the milli of a share (0 otherwise), its whole-card count's
        # row (-1: a share, no GPUs or no multi-card pods) and its requests of the needed resources
        self._gpu = p.wl_gpu_total.tolist()
        self._share = np.where(share, p.wl_gpu_milli, 0).tolist()
        rows = first + np.searchsorted(self.whole_cards, p.wl_gpu_count)
        self._card_row = np.where(whole & bool(self.whole_cards.size), rows, -1).tolist()
        #: per full-card count f, [K, 1 + len(whole_cards)] the terms of one unplaced pod of each
        #: multi-card size in _card_sums (int64: exact)
        f = np.arange(p.gpu_free.shape[1] + 1)[:, None, None]
        m = self.multi_cards[None, :, None]
        ks = self.whole_cards[None, None, :]
        shared = (m * GPU_MILLI) * (f % m == 0)
        lost = (m * GPU_MILLI) * (ks // m + (f % m < ks % m)) - ks * GPU_MILLI
        self._terms = np.concatenate([shared, lost], axis=2).astype(np.int64)
        self._terms_at = self._terms.tolist()
        self._sums_memo: dict[tuple[int, ...], list[int]] = {}
        self._runs_at: dict[int, np.ndarray] = {}
        self._active = bool(c or self.multi_cards.size)
        # stored node by node (a node's values in one or two cache lines: a call gathers them for a
        # few hundred scattered nodes, a placement rewrites one node); ``table`` is the [rows, N] view
        self._by_node = np.zeros((n, first + self.whole_cards.size))
        #: [rows, N] the per-node values (a view of the node-major store)
        self.table = self._by_node.T
        self.table[self._inv] = np.where(self._needed, 1.0 / np.where(self._needed, self.need[:, self.cols].T, 1.0), np.inf)
        self._demand_of = p.demand[:, self.cols].tolist()  # per pod, its requests of the needed resources
        #: [N] the node keeps room: free GPU milli and (with GPU pods) an unplaced GPU pod that could run there
        self.keepable = np.zeros(n, dtype=bool)

    @property
    def online(self) -> bool:
        """No GPU pods in the problem: the provisioned need, on every GPU node."""
        return self.runs.shape[0] == 0

    def _count(self) -> None:
        # [N] groups with unplaced pods that could run on the node (a node keeps room while one
        # does); [K, N] unplaced pods of k = multi_cards[i] whole cards that could run there
        n = self.problem.num_nodes
        self.covered = np.zeros(n, dtype=np.int64)
        self.waiting_multi = np.zeros((self.multi_cards.size, n), dtype=np.int64)
        for g in np.flatnonzero(self.remaining).tolist():
            self.covered += self.runs[g]
            if self.group_multi[g] >= 0:
                self.waiting_multi[self.group_multi[g], self.runs[g]] += self.remaining[g]

    def rebuild(self, state: ClusterState) -> None:
        """The unplaced counts and the per-node rows, from the state."""
        if not self.online:
            open_ = (state.assignment < 0) & (self.group_of >= 0)
            self.remaining = np.bincount(self.group_of[open_], minlength=self.runs.shape[0]).astype(np.int64)
            self._count()
        self._refresh(state, None)

    def apply(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        """Journal entries (w, node, +1 placed / -1 removed)."""
        touched = {n for _, n, _ in entries}
        more: list[np.ndarray] = []  # nodes whose cover by unplaced pods starts or ends
        for w, _, sign in entries:
            g = self._group_of[w] if w >= 0 else -1
            if g < 0:
                continue
            before = int(self.remaining[g])
            self.remaining[g] = before - sign
            if (before > 0) != (before - sign > 0):  # the group starts or stops covering its nodes
                if before > 0:
                    self.covered -= self.runs[g]
                else:
                    self.covered += self.runs[g]
                more.append(np.flatnonzero(self.runs[g] & (self.covered == (0 if before > 0 else 1))))
            if self.group_multi[g] >= 0:
                self._add_waiting(state, g, -sign)
        if more:
            touched.update(np.concatenate(more).tolist())
        if len(touched) <= _FEW_NODES:
            for n in sorted(touched):
                self._refresh_node(state, n)
        else:
            self._refresh(state, np.array(sorted(touched), dtype=np.int64))

    def _add_waiting(self, state: ClusterState, g: int, change: int) -> None:
        """Multi-card group ``g``'s unplaced count changes by ``change``: its count and its terms
        in the sums of _card_sums on each node it could run on (the nodes a journal entry names
        are recounted after, with their new full cards)."""
        i = int(self.group_multi[g])
        nodes = self._runs_at.get(g)
        if nodes is None:
            nodes = self._runs_at[g] = np.flatnonzero(self.runs[g])
        self.waiting_multi[i, nodes] += change
        self.table[_WAITING, nodes] += change
        # where the node keeps room (elsewhere the sums are 0 until it is refreshed)
        terms = (change * self._terms[state.gpu_full[nodes], i].T) * self.keepable[nodes]
        self.table[_SHARED, nodes] += terms[0]
        self.table[self._whole, nodes] += terms[1:]

    def _card_sums(self, pods: list[int], full: int) -> list[int]:
        """One node's [shared, lost per whole-card count k] from its unplaced multi-card pods per
        size (``pods``) and its full cards, summed over those pods (the table keeps them where
        the node keeps room, 0 elsewhere; :meth:`_add_waiting` as the counts change).

        A pod of m cards has ``floor(full / m)`` whole copies. A share that takes a full card (no
        partly used card fits it) breaks one where ``full % m == 0``: shared sums those m * 1000
        milli (a call subtracts the share's own milli per pod, the _WAITING count). k whole cards
        break ``k // m + (full % m < k % m)`` copies: lost sums m * 1000 per copy less the pod's
        own k * 1000 (0 for m = k: a multi-card pod's own group needs no correction for itself).
        Memoized: the counts change only as multi-card pods come and go, so nodes repeat them."""
        key = (full, *pods)
        sums = self._sums_memo.get(key)
        if sums is None:
            sums = [0] * (1 + self.whole_cards.size)
            for count, terms in zip(pods, self._terms_at[full], strict=True):
                if count:
                    sums = [s + count * t for s, t in zip(sums, terms, strict=True)]
            if len(self._sums_memo) >= _MEMO:
                self._sums_memo.clear()
            self._sums_memo[key] = sums
        return sums

    def _refresh_node(self, state: ClusterState, n: int) -> None:
        """:meth:`_refresh` of one node in Python floats (the same IEEE operations in the same
        order, so the same column): a dozen numpy calls on one-element arrays cost more."""
        col = self._by_node[n].tolist()
        left = int(state.gpu_left[n])
        keepable = left > 0 and (self.online or bool(self.covered[n] > 0))
        col[_LEFT] = left
        c = len(self._cols)
        if c:
            least = np.inf
            free_row = state.free[n].tolist()
            needed = self._needed_at[n]
            for i, r in enumerate(self._cols):
                free = max(free_row[r], 0.0) if needed[i] else np.inf
                col[_FREE + i] = free
                fed = free * col[_FREE + c + i]
                if fed < least:
                    least = fed
            col[_LIMIT] = max(left - least, 0.0) + STRAND_TOL_MILLI if keepable else np.inf
        full = int(state.gpu_full[n])
        col[_FULL] = full
        partial = -1  # the most milli free on a partly used card (see _refresh)
        for v in state.gpu_free[n].tolist():
            if partial < v < GPU_MILLI:
                partial = v
        col[_PARTIAL] = partial
        if self.multi_cards.size:
            pods = self.waiting_multi[:, n].tolist()
            col[_WAITING] = sum(pods)
            sums = self._card_sums(pods, full) if keepable else [0] * (1 + self.whole_cards.size)
            col[_SHARED] = sums[0]
            col[self._whole] = sums[1:]
        self._by_node[n] = col
        self.keepable[n] = keepable

    def _refresh(self, state: ClusterState, nodes: np.ndarray | None) -> None:
        """The columns of ``nodes`` (all when None) from the state and the unplaced counts: a
        placement changes its node's column, and all columns only when a group's counts change."""

        def take(a: np.ndarray) -> np.ndarray:
            return a if nodes is None else a[nodes]

        at = slice(None) if nodes is None else nodes
        rows = self.table if nodes is None else np.take(self._by_node, nodes, axis=0).T  # (as _grown)
        left = take(state.gpu_left)
        rows[_LEFT] = left
        keepable = left > 0
        if not self.online:
            keepable &= take(self.covered) > 0
        self.keepable[at] = keepable
        if self.cols.size:
            free = np.where(self._needed[:, at], np.maximum(take(state.free)[:, self.cols], 0.0).T, np.inf)
            rows[self._free] = free
            stranded = np.maximum(left - _column_min(free * rows[self._inv]), 0.0)
            # placing w strands where max(left - gpu_w - fed_after, 0) > stranded + tol; the
            # threshold is inf where the node keeps no room
            rows[_LIMIT] = np.where(keepable, stranded + STRAND_TOL_MILLI, np.inf)
        full = take(state.gpu_full).astype(np.int64)
        rows[_FULL] = full
        # the most milli free on a partly used card (-1 when none): a share takes a full card
        # only where this is below its milli (ClusterState.default_cards)
        cards = take(state.gpu_free)
        rows[_PARTIAL] = np.where((cards >= 0) & (cards < GPU_MILLI), cards, -1).max(axis=1, initial=-1)
        if self.multi_cards.size:
            pods = self.waiting_multi[:, at]  # [K, nodes]
            rows[_WAITING] = pods.sum(axis=0)
            # _card_sums of each node (int64: exact) where it keeps room
            sums = np.einsum("kn,nkj->jn", pods, self._terms[full]) * keepable
            rows[_SHARED] = sums[0]
            rows[self._whole] = sums[1:]
        if nodes is not None:
            self._by_node[nodes] = rows.T

    def strands(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray | None:
        """Per candidate, whether placing ``w`` there strands GPU milli; None when none does."""
        if not self._active:
            return None
        if candidates.size <= _FEW_NODES:
            few = self._grown_few(state, w, candidates.tolist())
            return np.array(few) if True in few else None
        # Most nodes: one pass over all rows (views, no gathers), then the candidates'.
        dense = 2 * candidates.size > self.problem.num_nodes
        grown = self._grown(state, w, None if dense else candidates)
        if dense:
            grown = grown[candidates]
        return grown if grown.any() else None

    def strands_at(self, state: ClusterState, w: int, node: int) -> bool:
        """Whether placing ``w`` on ``node`` strands GPU milli (:meth:`strands` of one node)."""
        return self._active and self._grown_few(state, w, [node])[0]

    def _grown_few(self, state: ClusterState, w: int, nodes: list[int]) -> list[bool]:
        """:meth:`_grown` of a few nodes in Python floats (the same IEEE operations in the same
        order, so the same answers: a few dozen numpy calls on tiny arrays cost more)."""
        gpu, share, card_row, demand = self._gpu[w], self._share[w], self._card_row[w], self._demand_of[w]
        g = self._group_of[w]
        last = g >= 0 and state.assignment[w] < 0 and self.remaining[g] == 1
        cards = bool(gpu) and self.multi_cards.size > 0
        c = len(demand)
        out = []
        for n in nodes:
            col = self._by_node[n].tolist()
            grown = False
            if c:
                least = np.inf
                for i in range(c):
                    after = max(col[_FREE + i] - demand[i], 0.0) * col[_FREE + c + i]
                    if after < least:
                        least = after
                grown = (col[_LEFT] - gpu) - least > col[_LIMIT]
            if cards and not grown:  # _card_growth
                if share:
                    grown = col[_PARTIAL] < share and col[_SHARED] > share * col[_WAITING]
                else:
                    grown = col[card_row] > 0
            if grown and last:
                grown = bool(self.covered[n] - self.runs[g, n] > 0)
            out.append(grown)
        return out

    def fed_strands(self, state: ClusterState, w: int) -> np.ndarray:
        """[N] per node, whether placing ``w`` there strands GPU milli by the fed-resource rule
        alone (the whole-card rule left out; :meth:`strands` applies both), with the same
        exception for a group's last unplaced pod: cpsat's ``gpu_guard`` mask, whose model
        places the batch's multi-card pods itself. Reads the table: :meth:`rebuild` (or the
        journal's :meth:`apply`) for ``state`` first. Not filtered by where ``w`` fits."""
        grown = self._fed_grown(self.table, w)
        return self._keep_own_room(state, w, None, grown)

    def _fed_grown(self, rows: np.ndarray, w: int) -> np.ndarray:
        """Per column of ``rows`` (the table, or the gathered columns of some nodes): placing
        ``w`` there grows the node's fed-resource stranding past its limit."""
        c = len(self._cols)
        if not c:
            return np.zeros(rows.shape[1], dtype=bool)
        # fed milli after the placement, resource by resource (one-dimensional operations on
        # the gathered rows), and its least
        least = None
        for i, d in enumerate(self._demand_of[w]):
            after = rows[_FREE + i] - d
            np.maximum(after, 0.0, out=after)
            after *= rows[_FREE + c + i]
            least = after if least is None else np.minimum(least, after, out=least)
        # max(x, 0) > limit is x > limit: the limit is positive
        return (rows[_LEFT] - self._gpu[w]) - least > rows[_LIMIT]

    def _keep_own_room(self, state: ClusterState, w: int, nodes: np.ndarray | None, grown: np.ndarray) -> np.ndarray:
        """``grown`` (per node: all, or ``nodes``), in place, where a node keeps room for a group
        other than ``w``'s when ``w`` is its group's last unplaced pod."""
        own_group = self._group_of[w]  # while w is unplaced it keeps no room for itself
        if own_group >= 0 and state.assignment[w] < 0 and self.remaining[own_group] == 1:
            # w is its group's last unplaced pod: its nodes keep room only for the other groups
            runs = self.runs[own_group] if nodes is None else self.runs[own_group, nodes]
            covered = self.covered if nodes is None else self.covered[nodes]
            grown &= covered - runs > 0
        return grown

    def _grown(self, state: ClusterState, w: int, nodes: np.ndarray | None) -> np.ndarray:
        """Per node (all, or ``nodes``): placing ``w`` there strands GPU milli."""
        rows = self.table if nodes is None else np.take(self._by_node, nodes, axis=0).T
        grown = self._fed_grown(rows, w)
        if self._gpu[w] and self.multi_cards.size:
            grown |= self._card_growth(rows, w)
        return self._keep_own_room(state, w, nodes, grown)

    def _card_growth(self, rows: np.ndarray, w: int) -> np.ndarray:
        """Per column of ``rows`` (the table, or some nodes' gathered columns) whose node keeps room,
        whether the whole-card copies the unplaced multi-card pods lose exceed w's own milli, summed
        over those pods: a comparison of the node's sums (_card_sums; w's own group adds nothing:
        a pod's own size loses exactly its own milli)."""
        share = self._share[w]
        if share:
            # the pods lose m * 1000 per copy broken, less the share's milli each
            return (rows[_PARTIAL] < share) & (rows[_SHARED] > share * rows[_WAITING])
        return rows[self._card_row[w]] > 0


def _column_min(a: np.ndarray) -> np.ndarray:
    """[m] the least of a's few rows ([C, m]; row by row: a min over a short axis is slow)."""
    least = a[0]
    for j in range(1, a.shape[0]):
        least = np.minimum(least, a[j])
    return least


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
