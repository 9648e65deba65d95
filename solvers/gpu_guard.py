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

Cost: what does not depend on the pod (each node's free GPU milli, stranded milli before the
placement, free resources, full and partly used cards, whether it keeps room) is one row per
node in ``table``, kept from the state's journal (``OnlineSolver.sync``: a placement recomputes
its node's row; a group's cover of its nodes starting or ending, the rows where that changes).
A call gathers the candidates' rows once and evaluates the pod's part as a few vector
expressions, or in Python floats for a handful of candidates (the same IEEE operations in the
same order, so the same answers). Whole-card stranding is integer arithmetic: with one
multi-card size k, a share breaks a copy where no partly used card fits it and the full cards
are a multiple of k, j whole cards where ``full % k < j % k``; with several sizes (openb has 2, 4
and 8 cards) the copies lost per size m are summed in int64 (``k // m + (full % m < k % m)``, for
a share ``(full % m == 0) & (partial < milli)``).
"""

from __future__ import annotations

import numpy as np

from iro_fed.feasibility import fit_tolerance, static_filter
from iro_fed.model import GPU_MILLI, ClusterState, Problem

#: Stranded GPU milli that a placement may add and still count as not stranding (float rounding).
STRAND_TOL_MILLI = 1e-6

# Columns of GpuStrandingGuard.table: free GPU milli, the stranded milli before any placement
# plus the tolerance (inf where the node keeps no room), full cards, the most milli free on a
# partly used card, full cards % the multi-card size and whether a multi-card pod waits for
# the node (with one multi-card size), then per needed resource its free amount, inverse need
# and padding.
_LEFT, _LIMIT, _FULL, _PARTIAL, _REM, _WAITS, _FREE = range(7)
#: Up to this many changed nodes are refreshed one by one in Python, more as arrays.
_FEW_NODES = 8


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
        # Per needed column c: fed milli = free_c * inv_c (+ inf where the node needs none of c).
        # One row per node (see _LEFT...): a call gathers the candidates' rows once, not a dozen
        # arrays one by one, and what does not depend on the pod is worked out when a node changes.
        n = self.problem.num_nodes
        self.cols = np.flatnonzero((self.need > 0).any(axis=0)).astype(np.int64)
        self._cols = self.cols.tolist()
        self._group_of = self.group_of.tolist()
        c = self.cols.size
        needed = self.need[:, self.cols] > 0
        padded = bool(c) and not needed.all()
        self._free = slice(_FREE, _FREE + c)
        self._inv = slice(_FREE + c, _FREE + 2 * c)
        self._pad = slice(_FREE + 2 * c, _FREE + 3 * c) if padded else None
        #: [columns, N]: a node's values down a column, so that gathered rows are contiguous
        self.table = np.zeros((_FREE + (3 if padded else 2) * c, n))
        self.table[self._inv] = np.where(needed, 1.0 / np.where(needed, self.need[:, self.cols], 1.0), 0.0).T
        if padded:
            self.table[self._pad] = np.where(needed, 0.0, np.inf).T
        #: [C, W] the pods' requests of the needed resources
        self._demand = np.ascontiguousarray(self.problem.demand[:, self.cols].T)
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
                row = self.waiting_multi[self.group_multi[g]]
                np.subtract(row, self.runs[g] * sign, out=row)
                more.append(np.flatnonzero(self.runs[g] & (row == (0 if sign > 0 else 1))))
        if more:
            touched.update(np.concatenate(more).tolist())
        if len(touched) <= _FEW_NODES:
            for n in sorted(touched):
                self._refresh_node(state, n)
        else:
            self._refresh(state, np.array(sorted(touched), dtype=np.int64))

    def _refresh_node(self, state: ClusterState, n: int) -> None:
        """:meth:`_refresh` of one node in Python floats (the same IEEE operations in the same
        order, so the same row): a dozen numpy calls on one-element arrays cost more."""
        row = self.table[:, n].tolist()
        left = int(state.gpu_left[n])
        keepable = left > 0 and (self.online or bool(self.covered[n] > 0))
        row[_LEFT] = left
        c = self.cols.size
        if c:
            fed = []
            free_row = state.free[n].tolist()
            for i, col in enumerate(self._cols):
                free = max(free_row[col], 0.0)
                row[_FREE + i] = free
                before = free * row[_FREE + c + i]
                if self._pad is not None:
                    before += row[_FREE + 2 * c + i]
                fed.append(before)
            row[_LIMIT] = max(left - min(fed), 0.0) + STRAND_TOL_MILLI if keepable else np.inf
        full = int(state.gpu_full[n])
        row[_FULL] = full
        row[_PARTIAL] = max((v for v in state.gpu_free[n].tolist() if 0 <= v < GPU_MILLI), default=-1)
        if self.multi_cards.size == 1:
            row[_REM] = full % int(self.multi_cards[0])
            row[_WAITS] = keepable and bool(self.waiting_multi[0, n] > 0)
        self.table[:, n] = row
        self.keepable[n] = keepable

    def _refresh(self, state: ClusterState, nodes: np.ndarray | None) -> None:
        """The rows of ``nodes`` (all when None) from the state and the unplaced counts: a
        placement changes its node's row, and all rows only when a group's counts change."""

        def take(a: np.ndarray) -> np.ndarray:
            return a if nodes is None else a[nodes]

        rows = self.table if nodes is None else np.take(self.table, nodes, axis=1)
        left = take(state.gpu_left)
        rows[_LEFT] = left
        keepable = left > 0
        if not self.online:
            keepable &= take(self.covered) > 0
        if nodes is None:
            self.keepable = keepable
        else:
            self.keepable[nodes] = keepable
        if self.cols.size:
            free = np.maximum(take(state.free)[:, self.cols], 0.0).T
            rows[self._free] = free
            before = free * rows[self._inv]
            if self._pad is not None:
                before += rows[self._pad]
            stranded = np.maximum(left - _column_min(before), 0.0)
            # placing w strands where max(left - gpu_w - fed_after, 0) > stranded + tol; the
            # threshold is inf where the node keeps no room
            rows[_LIMIT] = np.where(keepable, stranded + STRAND_TOL_MILLI, np.inf)
        full = take(state.gpu_full).astype(np.int64)
        rows[_FULL] = full
        # the most milli free on a partly used card (-1 when none): a share takes a full card
        # only where this is below its milli (ClusterState.default_cards)
        cards = take(state.gpu_free)
        rows[_PARTIAL] = np.where((cards >= 0) & (cards < GPU_MILLI), cards, -1).max(axis=1, initial=-1)
        if self.multi_cards.size == 1:
            # the whole-card copies of the one multi-card size k: full % k, and whether an
            # unplaced k-card pod could run on the node while it keeps room
            k = int(self.multi_cards[0])
            rows[_REM] = full % k
            rows[_WAITS] = keepable & (take(self.waiting_multi[0]) > 0)
        if nodes is not None:
            self.table[:, nodes] = rows

    def strands(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray | None:
        """Per candidate, whether placing ``w`` there strands GPU milli; None when none does."""
        if not self.cols.size and not self.multi_cards.size:
            return None
        if candidates.size <= _FEW_NODES:
            few = self._grown_few(state, w, candidates.tolist())
            return np.array(few) if any(few) else None
        # Most nodes: one pass over all rows (views, no gathers), then the candidates'.
        dense = 2 * candidates.size > self.problem.num_nodes
        grown = self._grown(state, w, None if dense else candidates)
        if dense:
            grown = grown[candidates]
        return grown if grown.any() else None

    def _grown_few(self, state: ClusterState, w: int, nodes: list[int]) -> list[bool]:
        """:meth:`_grown` of a few nodes in Python floats (the same IEEE operations in the same
        order, so the same answers: a few dozen numpy calls on tiny arrays cost more)."""
        p = self.problem
        g = self._group_of[w]
        own_group = g if g >= 0 and state.assignment[w] < 0 else -1
        k, milli = p.gpu_shape[w]
        gpu = int(p.wl_gpu_total[w])
        cards = bool(gpu) and self.multi_cards.size > 0
        own_multi = int(self.group_multi[own_group]) if own_group >= 0 else -1
        one = self.multi_cards.size == 1 and own_multi < 0  # _card_growth's one-size shortcut
        share = k == 1 and milli < GPU_MILLI
        ks = self.multi_cards.tolist()
        m = ks[0] if one else 0
        gpu_milli = float(p.wl_gpu_total[w])
        last = own_group >= 0 and self.remaining[own_group] == 1
        c = self.cols.size
        demand = self._demand[:, w].tolist()
        padded = self._pad is not None
        out = []
        for n, row in zip(nodes, self.table[:, nodes].T.tolist(), strict=True):
            grown = False
            if c:
                fed = []
                for i in range(c):
                    after = max(row[_FREE + i] - demand[i], 0.0) * row[_FREE + c + i]
                    if padded:
                        after += row[_FREE + 2 * c + i]
                    fed.append(after)
                grown = (row[_LEFT] - gpu) - min(fed) > row[_LIMIT]
            if cards and not grown:
                if one:
                    if row[_WAITS] > 0:
                        grown = row[_REM] == 0 and row[_PARTIAL] < milli if share else row[_REM] < k % m
                elif self.keepable[n]:  # as _card_growth's general case, size by size
                    full_before = row[_FULL]
                    full_after = full_before - (row[_PARTIAL] < milli) if share else full_before - k
                    pods = self.waiting_multi[:, n].tolist()
                    if own_multi >= 0:
                        pods[own_multi] -= int(self.runs[own_group, n])
                    total = 0.0
                    for size, count in zip(ks, pods, strict=True):
                        total += count * ((size * GPU_MILLI) * (full_before // size - full_after // size) - gpu_milli)
                    grown = total > STRAND_TOL_MILLI
            if grown and last:
                grown = bool(self.covered[n] - self.runs[own_group, n] > 0)
            out.append(bool(grown))
        return out

    def _grown(self, state: ClusterState, w: int, nodes: np.ndarray | None) -> np.ndarray:
        """Per node (all, or ``nodes``): placing ``w`` there strands GPU milli."""
        p = self.problem
        rows = self.table if nodes is None else np.take(self.table, nodes, axis=1)
        g = int(self.group_of[w])
        own_group = g if g >= 0 and state.assignment[w] < 0 else -1  # w keeps no room for itself
        gpu = int(p.wl_gpu_total[w])
        if self.cols.size:
            after = rows[self._free] - self._demand[:, w : w + 1]
            np.maximum(after, 0.0, out=after)
            after *= rows[self._inv]
            if self._pad is not None:
                after += rows[self._pad]
            # max(x, 0) > limit is x > limit: the limit is positive
            grown = (rows[_LEFT] - gpu) - _column_min(after) > rows[_LIMIT]
        else:
            grown = np.zeros(rows.shape[1], dtype=bool)
        if gpu and self.multi_cards.size:
            grown |= self._card_growth(rows, w, nodes, own_group)
        if own_group >= 0 and self.remaining[own_group] == 1:
            # w is its group's last unplaced pod: its nodes keep room only for the other groups
            runs = self.runs[own_group] if nodes is None else self.runs[own_group, nodes]
            covered = self.covered if nodes is None else self.covered[nodes]
            grown &= covered - runs > 0
        return grown

    def _card_growth(self, rows: np.ndarray, w: int, nodes: np.ndarray | None, own_group: int) -> np.ndarray:
        """Per node (all, or ``nodes``: ``rows``) that keeps room, whether the whole-card copies
        the unplaced multi-card pods lose exceed w's own milli, summed over those pods."""
        k, milli = self.problem.gpu_shape[w]
        share = k == 1 and milli < GPU_MILLI
        if self.multi_cards.size == 1 and (own_group < 0 or self.group_multi[own_group] < 0):
            # One multi-card size m, w not of it: the pods lose m * 1000 * (copies lost) per
            # pod, more than w's milli exactly when a copy is lost beyond w's own cards (all
            # integers): a share takes a full card where no partly used card fits it, and
            # breaks a copy where the full cards are a multiple of m; k whole cards break
            # floor(k / m) copies (no more than their milli) and one more where full % m < k % m.
            m = int(self.multi_cards[0])
            waits = rows[_WAITS] > 0
            if share:
                return waits & (rows[_REM] == 0) & (rows[_PARTIAL] < milli)
            if k % m == 0:
                return np.zeros(rows.shape[1], dtype=bool)
            return waits & (rows[_REM] < k % m)
        # All integers (cards, milli, pod counts), so int64 gives the float expression's answers
        # exactly: a copy of m cards is lost per m cards taken, and one more where the full
        # cards' remainder mod m falls below what is taken mod m (a share takes a full card
        # only where no partly used card fits it).
        ks = self.multi_cards[:, None]
        rem = rows[_FULL].astype(np.int64) % ks  # [K, nodes]
        if share:
            copies = (rem == 0) & (rows[_PARTIAL] < milli)
        else:
            copies = k // ks + (rem < k % ks)
        lost = ks * GPU_MILLI * copies - int(self.problem.wl_gpu_total[w])
        pods = self.waiting_multi if nodes is None else np.take(self.waiting_multi, nodes, axis=1)  # [K, nodes]
        if own_group >= 0 and self.group_multi[own_group] >= 0:
            pods = pods.copy()
            pods[self.group_multi[own_group]] -= self.runs[own_group] if nodes is None else self.runs[own_group, nodes]
        keepable = self.keepable if nodes is None else self.keepable[nodes]
        # the float sum exceeded STRAND_TOL_MILLI exactly when the integer sum is positive
        return ((pods * lost).sum(axis=0) > 0) & keepable


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
