"""The FGD paper's placement policies (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23), as online solvers.

Formulas, integer scores and the tie rule follow shared/spec/fgd-replay.md, which was read from
the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, ``pkg/simulator/plugin``):
every policy gives each feasible node an integer score 0..100 (truncated), the highest wins,
and ties go to the first node in a seeded random order of the node names. MaxCPU = 128,000
milli and MaxGPU = 8,000 milli normalize CPU and GPU. GPU cards: whole-GPU pods take the
lowest-index fully free cards, share pods the fitting card with the least milli left, except
``fgd`` (the card that minimizes fragmentation) and ``fgd-random`` (a random fitting card).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from iro_fed.fragmentation import TypicalTasks, fragmentation, fragmentation_after_share, typical_tasks
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from solvers.base import SEED, OnlineSolver, Param, SolverProperties

MAX_CPU = 128_000.0
MAX_GPU = 8_000.0
MAX_SCORE = 100
#: |x| beyond which sigmoid's exp would under- or overflow for nothing.
SIGMOID_CLIP = 700.0


def _truncate(x: np.ndarray) -> np.ndarray:
    return np.trunc(x).astype(np.int64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Clipped: past +-700 the value is 1.0 or below 1e-304 either way, and exp(768) overflowed
    # (a FloatingPointError under np.errstate(all="raise"): a node of 1e15 cores, cpsat's iro-frag hint).
    return 1.0 / (1.0 + np.exp(-np.clip(x, -SIGMOID_CLIP, SIGMOID_CLIP)))


class PaperPolicy(OnlineSolver):
    """Shared parts: the pod's numbers, node-name tie order (per-node caches: :meth:`OnlineSolver.sync`)."""

    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "order": Param("given", str, "Pod order (the paper replays the given arrival order).", choices=("given", "priority", "largest-first")),
    }

    def reset(self, problem: Problem) -> None:
        super().reset(problem)
        by_name = np.argsort(np.array([n.name for n in problem.nodes], dtype=object), kind="stable")
        order = by_name[self.rng.permutation(problem.num_nodes)] if problem.num_nodes else by_name
        self.tie_rank = np.empty(problem.num_nodes, dtype=np.int64)
        self.tie_rank[order] = np.arange(problem.num_nodes)

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        tied = np.flatnonzero(scores == scores.max())
        return int(tied[np.argmin(self.tie_rank[candidates[tied]])]) if tied.size > 1 else int(tied[0])

    def rank_order(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        # rank() must lead with decide()'s node: ties by the seeded node order, not by index, and
        # select's own winner first (iro-frag's tolerance and best-fit rules pick within a margin).
        order = np.lexsort((self.tie_rank[candidates], -np.asarray(scores, dtype=np.float64)))
        if order.size > 1:
            winner = self.select(state, w, candidates, scores)
            order = np.concatenate(([winner], order[order != winner]))
        return order


#: Most numbers :meth:`Fgd.frag_after` keeps across shapes (8 bytes each: 32 MiB; 5,000 nodes
#: with 8 cards give 100 share shapes).
AFTER_CACHE_CELLS = 4_000_000


def pod_numbers(problem: Problem, w: int) -> tuple[float, int, int, int]:
    """(cpu milli, cards, per-card milli, total GPU milli) of workload w."""
    k = int(problem.wl_gpu_count[w])
    milli = int(problem.wl_gpu_milli[w]) if k else 0
    return float(problem.demand[w, problem.cpu_index]), k, milli, k * milli


class FgdRandom(PaperPolicy):
    name = "fgd-random"
    properties = SolverProperties("online", False, "FGD paper baseline: a random feasible node and a random fitting card.")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return self.rng.random(candidates.size)

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        return int(np.argmax(scores))

    def choose_cards(self, state: ClusterState, w: int, node: int) -> tuple[int, ...]:
        _, k, milli, _ = pod_numbers(state.problem, w)
        if k == 1 and milli < GPU_MILLI:
            fits = np.flatnonzero(state.gpu_free[node] >= milli)
            return (int(fits[self.rng.integers(fits.size)]),)
        return state.default_cards(w, node)


class FgdDotProduct(PaperPolicy):
    name = "fgd-dotprod"
    properties = SolverProperties("online", False, "FGD paper baseline: 100 * (1 - <left, request> / 2) over (cpu, gpu).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        cpu, _, _, gpu = pod_numbers(state.problem, w)
        cpu_left = state.free[candidates, state.problem.cpu_index]
        dot = (cpu_left / MAX_CPU) * (cpu / MAX_CPU) + (state.gpu_left[candidates] / MAX_GPU) * (gpu / MAX_GPU)
        return _truncate(MAX_SCORE * (1 - dot / 2))


class FgdBestFit(PaperPolicy):
    name = "fgd-bestfit"
    properties = SolverProperties("online", False, "FGD paper baseline: least (cpu, gpu) left after placement.")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        cpu, _, _, gpu = pod_numbers(state.problem, w)
        cpu_left = state.free[candidates, state.problem.cpu_index]
        left = 0.5 * (cpu_left - cpu) / MAX_CPU + 0.5 * (state.gpu_left[candidates] - gpu) / MAX_GPU
        return _truncate(MAX_SCORE * (1 - left))


class FgdPacking(PaperPolicy):
    """GpuPacking: shared cards first, then free cards of used nodes, then idle nodes."""

    name = "fgd-packing"
    properties = SolverProperties("online", False, "FGD paper baseline: GPU packing (used cards, then used nodes, then idle).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        p = state.problem
        _, k, milli, _ = pod_numbers(p, w)
        if k == 0:
            return np.zeros(candidates.size, dtype=np.int64)
        full = state.gpu_full[candidates].astype(np.int64)
        cards = p.gpu_count[candidates].astype(np.int64)
        all_free = np.maximum(33 - full, full)
        if milli >= GPU_MILLI:
            used = np.full(candidates.size, max(50 - k, 33))  # k fully free cards
        else:
            rows = state.gpu_free[candidates]
            smallest = np.where(rows >= milli, rows, GPU_MILLI + 1).min(axis=1)
            shared = np.maximum(100 - (smallest * 100 // GPU_MILLI) // 10, 50)
            used = np.where(smallest == GPU_MILLI, 49, shared)
        return np.where(full == cards, all_free, used)


class FgdClustering(PaperPolicy):
    """GpuClustering: pods of one GPU kind ("share" or "k-gpu") gather on the same nodes."""

    name = "fgd-clustering"
    properties = SolverProperties("online", False, "FGD paper baseline: cluster pods of the same GPU kind on nodes.")

    def reset(self, problem: Problem) -> None:
        super().reset(problem)
        k = problem.wl_gpu_count
        share = (k == 1) & (problem.wl_gpu_milli < GPU_MILLI)
        # Kind 0 = no GPU, 1 = share, 1 + c = whole c-GPU pods.
        self.kind = np.where(k == 0, 0, np.where(share, 1, 1 + k)).astype(np.int64)
        self.num_kinds = int(self.kind.max(initial=0)) + 1

    def rebuild_caches(self, state: ClusterState) -> None:
        p = state.problem
        self.kind_count = np.zeros((p.num_nodes, self.num_kinds), dtype=np.int64)
        placed = np.flatnonzero(state.assignment >= 0)
        np.add.at(self.kind_count, (state.assignment[placed], self.kind[placed]), 1)

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        for w, n, sign in entries:
            self.kind_count[n, self.kind[w]] += sign

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        kind = int(self.kind[w])
        if kind == 0:
            return np.zeros(candidates.size, dtype=np.int64)
        self.sync(state)
        counts = self.kind_count[candidates, 1:]  # GPU kinds only
        kinds_here = (counts > 0).sum(axis=1)
        same = counts[:, kind - 1] > 0
        used = 25 * (int(MAX_GPU) - state.gpu_left[candidates].astype(np.int64))
        # Go's integer division truncates toward zero: a node with more than 8 free cards gets 0, not -1.
        base = np.sign(used) * (np.abs(used) // int(MAX_GPU))
        bonus = np.where(same, np.where(kinds_here == 1, 75, 50), np.where(kinds_here == 0, 25, 0))
        return base + bonus


class Fgd(PaperPolicy):
    """Fragmentation Gradient Descent: the node (and card) whose fragmentation grows least,
    ``100 * sigmoid((F_before - F_after) / 1000)``, F over the workload's typical tasks (in the
    trace replay those of the original pod list, given by :meth:`use_typical_tasks`)."""

    name = "fgd"
    properties = SolverProperties("online", False, "FGD: minimize the growth of GPU fragmentation for the typical tasks.")
    memory_aware: ClassVar[bool] = False
    frag_model: ClassVar[str] = "fgd"
    #: The copies model's weight in a "blend" (iro-frag's setting; unused by FGD's own model).
    copies_weight: ClassVar[float] = 0.5

    #: Typical tasks given by :meth:`use_typical_tasks` (None: those of the problem's workloads).
    given_tasks: TypicalTasks | None = None

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:
        """Score against ``tasks`` from the next :meth:`reset` on. The trace replay hands over the
        typical tasks of the original pod list, as the paper's simulator does, rather than those
        of the tuned arrival sequence (whose copies and removals shift the distribution)."""
        self.given_tasks = tasks

    def reset(self, problem: Problem) -> None:
        super().reset(problem)
        given = self.given_tasks
        if given is not None and given.access.shape[1] != problem.num_nodes:
            raise ValueError(
                f"typical tasks: computed for {given.access.shape[1]} nodes, the problem has {problem.num_nodes}"
            )
        self.tasks: TypicalTasks = given if given is not None else typical_tasks(problem)
        self._best_card: dict[int, int] = {}

    def node_frag(self, state: ClusterState, nodes: np.ndarray) -> np.ndarray:
        p = state.problem
        mem = state.free[nodes, p.resource_index["memory"]] if self.memory_aware and "memory" in p.resource_index else None
        return self.fragment(nodes, state.free[nodes, p.cpu_index], state.gpu_free[nodes], mem)

    def fragment(self, nodes: np.ndarray, cpu_left: np.ndarray, cards: np.ndarray, memory_left: np.ndarray | None) -> np.ndarray:
        """Fragmented GPU milli of each row (``iro_fed.fragmentation.fragmentation`` with this policy's model)."""
        return fragmentation(self.tasks, nodes, cpu_left, cards, memory_left, self.frag_model, self.copies_weight)

    def fragment_after_share(
        self, nodes: np.ndarray, cpu_left: np.ndarray, cards: np.ndarray, milli: int, memory_left: np.ndarray | None
    ) -> np.ndarray:
        """[R, G]: :meth:`fragment` of row r after a share of ``milli`` takes card g, inf where it
        does not fit (``iro_fed.fragmentation.fragmentation_after_share``, the same model)."""
        return fragmentation_after_share(
            self.tasks, nodes, cpu_left, cards, milli, memory_left, self.frag_model, self.copies_weight
        )

    def rebuild_caches(self, state: ClusterState) -> None:
        n = state.problem.num_nodes
        self.frag = self.node_frag(state, np.arange(n))
        # Fragmentation after a pod of each shape, per node (see frag_after); a node's row is
        # valid while its version, raised whenever a pod lands on or leaves it, is unchanged.
        self._after: dict[tuple[float, int, int, float | None], tuple[np.ndarray, np.ndarray]] = {}
        self._after_cells = 0
        self._version = np.zeros(n, dtype=np.int64)

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        changed = np.unique(np.array([n for _, n, _ in entries], dtype=np.int64))
        self.frag[changed] = self.node_frag(state, changed)
        self._version[changed] += 1

    def frag_after(self, state: ClusterState, w: int, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fragmentation after placing w on each candidate: [C] for CPU-only and whole-GPU pods
        (and -1 cards), or [C, G] per card for share pods (inf where the card does not fit).

        It depends only on the pod's shape (cpu, cards, milli, memory where memory-aware) and
        the node, so each shape keeps its rows and recomputes only those of nodes changed since
        (a decision changes one node): the same numbers, computed row by row as before. At
        1,000 pods x 5,000 nodes (82 shapes) iro-frag's whole run went from 5.7 s to 1.8 s; the
        openb replay (default list, seed 42) fgd 8.4 -> 5.7 s, iro-frag 16.6 -> 11.6 s, the
        same placements. The rows kept are bounded by :data:`AFTER_CACHE_CELLS` (the shapes
        least recently used go first)."""
        self.sync(state)
        p = state.problem
        cpu, k, milli, _ = pod_numbers(p, w)
        mem_col = p.resource_index.get("memory")
        mem = float(p.demand[w, mem_col]) if self.memory_aware and mem_col is not None else None
        share = k == 1 and milli < GPU_MILLI
        key = (cpu, k, milli, mem)
        entry = self._after.pop(key, None)
        if entry is None:
            cells = p.num_nodes * (state.gpu_free.shape[1] if share else 1)
            while self._after and self._after_cells + cells > AFTER_CACHE_CELLS:
                dropped = self._after.pop(next(iter(self._after)))  # the least recently used shape
                self._after_cells -= dropped[0].size
            shape = (p.num_nodes, state.gpu_free.shape[1]) if share else (p.num_nodes,)
            entry = (np.empty(shape), np.full(p.num_nodes, -1, dtype=np.int64))
            self._after_cells += entry[0].size
        self._after[key] = entry  # (re)inserted last: the most recently used
        values, at = entry
        stale = candidates[at[candidates] != self._version[candidates]]
        if stale.size:
            values[stale] = self._frag_after_rows(state, cpu, k, milli, mem, mem_col, stale)
            at[stale] = self._version[stale]
        after = values[candidates]
        if share:
            return after, state.gpu_free[candidates] >= milli
        return after, np.ones(candidates.size, dtype=bool)

    def _frag_after_rows(
        self, state: ClusterState, cpu: float, k: int, milli: int, mem: float | None, mem_col: int | None,
        nodes: np.ndarray,
    ) -> np.ndarray:
        """:meth:`frag_after`'s numbers for ``nodes``, computed."""
        p = state.problem
        cpu_after = state.free[nodes, p.cpu_index] - cpu
        mem_after = state.free[nodes, mem_col] - mem if mem is not None and mem_col is not None else None
        cards = state.gpu_free[nodes]
        if k == 1 and milli < GPU_MILLI:
            # Once per distinct free milli of a node, not once per card: many-card nodes stay cheap.
            return self.fragment_after_share(nodes, cpu_after, cards, milli, mem_after)
        if k > 0:
            # The lowest-index fully free cards (which ones does not change fragmentation).
            take = (cards == GPU_MILLI) & (np.cumsum(cards == GPU_MILLI, axis=1) <= k)
            cards = np.where(take, 0, cards)
        return self.fragment(nodes, cpu_after, cards, mem_after)

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        self.sync(state)
        p = state.problem
        if not p.demand[w].any() and p.wl_gpu_count[w] == 0:
            return np.full(candidates.size, MAX_SCORE, dtype=np.int64)
        after, _ = self.frag_after(state, w, candidates)
        before = self.frag[candidates]
        if after.ndim == 2:
            card_scores = np.where(np.isfinite(after), _truncate(MAX_SCORE * sigmoid((before[:, None] - np.where(np.isfinite(after), after, 0)) / 1000.0)), -1)
            best = np.argmax(card_scores, axis=1)  # first card with the best score, as upstream
            self._best_card = dict(zip(candidates.tolist(), best.tolist(), strict=True))
            return card_scores[np.arange(candidates.size), best]
        return _truncate(MAX_SCORE * sigmoid((before - after) / 1000.0))

    def choose_cards(self, state: ClusterState, w: int, node: int) -> tuple[int, ...]:
        _, k, milli, _ = pod_numbers(state.problem, w)
        if k == 1 and milli < GPU_MILLI and node in self._best_card:
            return (int(self._best_card[node]),)
        return state.default_cards(w, node)


PAPER_POLICIES = (FgdRandom, FgdDotProduct, FgdBestFit, FgdPacking, FgdClustering, Fgd)
