"""Online heuristics: pods in the given order, each on the best-scoring feasible node.

Resource shares are normalized by each node's capacity and averaged over the resources the
objective counts (cpu, memory, other additive resources and GPU milli when the cluster has
GPUs), so no single unit dominates.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from iro_fed.model import ClusterState, Problem, Weights
from iro_fed.objective import marginal
from solvers.base import OnlineSolver, Param, SolverProperties
from solvers.gpu_guard import GpuStrandingGuard

#: How many best fits of a tie greedy-objective asks the guard about at once when the best one
#: strands, before it asks about the whole tie (GreedyObjective._first_kept), in ties of more than
#: _CHUNK_FROM nodes: in smaller ones asking about the whole tie at once costs less than a chunk
#: that keeps none (openb-shaped stream: ties of 550-1,100 nodes at 5,000 nodes, 3-8 % faster
#: without the chunk at 1,000 and 5,000 nodes, 9 % slower at 20,000).
_FIT_CHUNK = 32
_CHUNK_FROM = 2048


def free_share_after(state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """Per node (all, or ``nodes``), the mean share of each util resource left free after placing ``w``."""
    p = state.problem
    if nodes is None:
        return (state.free_share - p.util_inv_capacity @ p.util_demand[w]) / p.util_valid_count
    # take: a row gather of the [N, R] matrix in a third to a half of the time of [nodes]
    return (state.free_share[nodes] - p.util_inv_capacity.take(nodes, axis=0) @ p.util_demand[w]) / p.util_valid_count[nodes]


class DenseScorer(OnlineSolver):
    """A heuristic whose score is one vector expression over all nodes (no gathers): cheaper
    than indexing when most nodes are feasible, and the same cost whatever the feasible count."""

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        raise NotImplementedError

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return self.score_all(state, w)[candidates]


class FirstFit(DenseScorer):
    name = "first-fit"
    properties = SolverProperties("online", False, "The first feasible node in node order.")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return -candidates.astype(np.float64)


class BestFit(DenseScorer):
    name = "best-fit"
    properties = SolverProperties("online", False, "The feasible node with the least free capacity left (packing).")

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        return -free_share_after(state, w)


class WorstFit(DenseScorer):
    name = "worst-fit"
    properties = SolverProperties("online", False, "The feasible node with the most free capacity left (spreading).")

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        return free_share_after(state, w)


class DotProduct(DenseScorer):
    """Tetris (Grandl et al., SIGCOMM'14): the node whose free vector best aligns with the
    demand, both as shares of the node's capacity."""

    name = "dot-product"
    properties = SolverProperties("online", False, "Alignment of demand and free capacity (Tetris dot product).")

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        inv = state.problem.util_inv_capacity
        return (state.util_free * inv * inv) @ state.problem.util_demand[w]


class RandomFit(OnlineSolver):
    name = "random"
    properties = SolverProperties("online", False, "A uniformly random feasible node (seeded).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return self.rng.random(candidates.size)


class GreedyObjective(DenseScorer):
    """Argmax of the objective's marginal change; ties (within ``tie_rtol`` times the weights'
    sum) go to the best fit.

    GPU-stranding guard (``solvers.gpu_guard``; a ranking rule, the objective still scores every
    node): a node where the pod would leave free GPUs without the CPU or memory to feed them, or
    break the whole cards an unplaced multi-GPU pod could take, is ranked below every node where
    it would not (``score`` lowers it below them all), so it is chosen only when every feasible
    node strands. Without GPUs in the cluster the guard is off: CPU-only problems place and rank
    exactly as the plain argmax. Why: under the GPU-aware power model a core on a GPU node costs
    no more than elsewhere, and the plain argmax packed CPU pods onto GPU nodes. Measured
    2026-12-06 (2-CPU container shared with other work): greedy-objective >= first-fit on 10 ->
    16 of the 20 random GPU problems of tests/solvers/test_conformance.py; promo-surge pending
    during the surge 6.74 -> 2.19 % over seeds 1-3 (kube-default 1.89 %), 8.61 -> 2.91 % over
    seeds 1-10 (2.65 %), carbon vs kube-default -3.0 -> +1.3 % (seeds 1-3); openb (seed 1)
    pending 0.00 % both, carbon -17.8 -> -17.7 %. Cost: the openb pod stream's best fit
    strands in about 4 of 5 decisions and its ties span hundreds of nodes (550-1,100 at 5,000
    nodes); the guard keeps what does not depend on the pod per node from the journal (the
    whole-card sums too, so its card rule is a comparison or two), and decide asks it about the
    best fit of the tie first, then about the whole tie (in ties of more than 2,048 nodes about
    the 32 best fits before). Measured 2026-12-07 (same container, runs interleaved, three each;
    benchmarks/decision_throughput.py, greedy-objective row): 5,000 nodes 3,890-5,219 ->
    6,064-6,878 decisions/s (p50 0.18-0.22 -> 0.14 ms), 1,000 nodes 4,174-5,379 -> 6,916-8,029/s;
    without the guard 9,500-11,800/s at 5,000 nodes.
    """

    name = "greedy-objective"
    properties = SolverProperties("online", False, "Argmax of the marginal change of the objective R.")
    parameters: ClassVar[dict[str, Param]] = {
        **OnlineSolver.parameters,
        # The guard costs about 40 % of a decision where GPU nodes strand often (openb-shaped 5,000
        # nodes: 6,100-6,900 against 9,500-11,800 decisions/s without it); false trades the
        # stranding for speed.
        "gpu_guard": Param(True, bool, "Rank nodes where the pod would strand GPUs last (see the class docs); "
                           "false: the plain argmax of R."),
    }
    tie_rtol: ClassVar[float] = 1e-12

    def reset(self, problem: Problem) -> None:
        super().reset(problem)
        self.guard = GpuStrandingGuard(problem) if problem.has_gpus and self.gpu_guard else None

    def rebuild_caches(self, state: ClusterState) -> None:
        if self.guard is not None:
            self.guard.rebuild(state)

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        if self.guard is not None:
            self.guard.apply(state, entries)

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        return marginal(state.problem, state, w)

    def tie_tolerance(self, problem: Problem) -> float:
        """Scores closer than this to the best tie. R's terms are each in [0, 1] times their
        weight, so the rounding error of a score scales with the weights' sum (not with the
        score, which may cancel to ~0): rounding the scores to fixed decimals split values 1e-16
        apart at a rounding boundary, and made every node tie when all weights were ~1e-13."""
        wts = problem.weights
        return self.tie_rtol * sum(getattr(wts, k) for k in Weights.__dataclass_fields__)

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        """The marginal of R, with the candidates the GPU-stranding guard ranks last moved below
        all the others (by the same amount, so ties among them stay ties)."""
        scores = self.score_all(state, w)[candidates]
        strands = self.strands(state, w, candidates)
        if strands is None:
            return scores
        keep = scores[~strands]
        # below the lowest kept score by more than any tie tolerance: R's terms are each in
        # [0, 1] times their weight, so the weights' sum is the scale of a score
        drop = float(scores.max() - keep.min()) + self.tie_tolerance(state.problem) / self.tie_rtol
        return np.where(strands, scores - (drop if drop > 0 else 1.0), scores)

    def strands(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray | None:
        """Per candidate, whether the guard ranks it last (placing ``w`` there strands GPUs);
        None when the guard is off, no candidate strands or every one does (then R decides)."""
        if self.guard is None:
            return None
        self.sync(state)
        strands = self.guard.strands(state, w, candidates)
        return None if strands is None or strands.all() else strands

    def choose(self, state: ClusterState, w: int, candidates: np.ndarray) -> int:
        """``select`` on ``score`` (see :meth:`_guarded_choice`)."""
        return self._guarded_choice(state, w, candidates, self.score_all(state, w)[candidates])

    def _guarded_choice(self, state: ClusterState, w: int, cand: np.ndarray, scores: np.ndarray) -> int:
        """``select(state, w, cand, score(...))`` from the plain marginals ``scores``, asking the
        guard about the best-scoring candidates first: the best non-stranding candidate found
        among them is the best of all (every better one was asked), so the guard sees only the
        nodes tied with it besides (the whole candidate list only when the best 512 strand)."""
        if self.guard is None:
            return self.select(state, w, cand, scores)
        self.sync(state)
        tol = self.tie_tolerance(state.problem)
        top = scores.max()
        cut = top - tol
        asked = np.flatnonzero(scores >= cut)  # first the tie for the best marginal
        if asked.size < cand.size and type(self).select is GreedyObjective.select:  # its order
            pick = self._first_kept(state, w, cand, scores, asked, top)
            if pick is not None:
                return pick
        for size in [asked.size] + [n for n in (64, 512) if n > asked.size]:
            if size >= cand.size:
                break
            if size > asked.size:  # the `size` best, and all candidates tied with the last of them
                cut = scores[np.argpartition(-scores, size - 1)[size - 1]]
                asked = np.flatnonzero(scores >= cut)
            strands = self.guard.strands(state, w, cand[asked])
            ok = asked if strands is None else asked[~strands]
            if ok.size == 0:
                continue
            best = top if strands is None else scores[ok].max()  # asked holds the best marginal
            if best - tol == cut:
                # the candidates tied with the best kept one are the asked ones (the same
                # comparison), so ok is select's tie already, in node order (the common case)
                return int(ok[self.select(state, w, cand[ok], scores[ok])])
            tied = np.flatnonzero(scores >= best - tol)
            if tied.size > asked.size or (tied.size == asked.size and not np.array_equal(tied, asked)):
                seen = np.zeros(cand.size, dtype=bool)
                seen[asked] = True
                more = tied[~seen[tied]]  # tied with the best kept candidate, not yet asked
            else:
                more = tied[:0]
            if more.size:
                extra = self.guard.strands(state, w, cand[more])
                ok = np.concatenate([ok, more if extra is None else more[~extra]])
            ok = np.sort(ok[scores[ok] >= best - tol])  # in node order, as select's ties
            return int(ok[self.select(state, w, cand[ok], scores[ok])])
        return self.select(state, w, cand, self.score(state, w, cand))

    def _first_kept(self, state: ClusterState, w: int, cand: np.ndarray, scores: np.ndarray, asked: np.ndarray,
                    top: float) -> int | None:
        """The loop's answer when it keeps a candidate of the best marginal ``top``; None when
        it cannot tell (then the loop runs).

        Then every kept candidate of the tie ``asked`` is select's tie, which goes to the best
        fit (the first in node order among equals). The ties span hundreds of nodes and about
        half of them strand, so the guard is asked about the best fit alone first (in Python,
        a few microseconds), then (in ties of more than _CHUNK_FROM nodes) about the _FIT_CHUNK
        best, and about the whole tie only when they all strand."""
        nodes = cand[asked]
        fit = -free_share_after(state, w, nodes)  # select's key
        j = int(fit.argmax())  # the first best fit: select's choice when it is kept
        if fit[j] != fit[j]:  # NaN (argmax stops at the first): argmax's order, not this one
            return None
        if not self.guard.strands_at(state, w, int(nodes[j])):
            return self._kept(int(asked[j]), scores, top)
        if fit.size > max(_FIT_CHUNK, _CHUNK_FROM):  # then the _FIT_CHUNK best fits (and all equal to the last)
            kth = fit.size - _FIT_CHUNK
            chunk = np.flatnonzero(fit >= np.partition(fit, kth)[kth])
            strands = self.guard.strands(state, w, nodes[chunk])
            kept = chunk if strands is None else chunk[~strands]
            if kept.size:  # every better fit is in the chunk
                return self._kept(int(asked[kept[int(np.argmax(fit[kept]))]]), scores, top)
        # then the whole tie at once: its best kept fit (the first in node order; fit has no NaN)
        strands = self.guard.strands(state, w, nodes)
        i = int(np.where(strands, -np.inf, fit).argmax()) if strands is not None else j
        if strands is not None and strands[i]:  # all strand (or the best kept fit is -inf: the loop tells)
            return None
        return self._kept(int(asked[i]), scores, top)

    @staticmethod
    def _kept(i: int, scores: np.ndarray, top: float) -> int | None:
        """The best fit kept, when it has the best marginal: then it is also the loop's best kept
        marginal, and the tie of that marginal is the asked one (see _guarded_choice)."""
        return i if scores[i] == top else None

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        tied = np.flatnonzero(scores >= scores.max() - self.tie_tolerance(state.problem))
        if tied.size == 1:
            return int(tied[0])
        return int(tied[np.argmax(-free_share_after(state, w, candidates[tied]))])

    def rank_order(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        # The order of select: groups of scores within the tolerance of the group's best (the
        # first group is select's tie), then best fit (least share left), then node order.
        tol = self.tie_tolerance(state.problem)
        order = np.argsort(-scores, kind="stable")
        desc = scores[order]
        # the group each position would lead: up to the first score below its own minus tol
        # (negation is exact, so this is select's `scores >= best - tol` comparison)
        ends = np.searchsorted(-desc, -(desc - tol), side="right").tolist()
        leaders = []
        i = 0
        while i < desc.size:
            leaders.append(i)
            i = ends[i]
        starts = np.zeros(desc.size, dtype=np.int64)
        starts[leaders] = 1
        group = np.empty(desc.size, dtype=np.int64)
        group[order] = np.cumsum(starts)
        return np.lexsort((free_share_after(state, w, candidates), group))


HEURISTICS = (FirstFit, BestFit, WorstFit, DotProduct, RandomFit, GreedyObjective)
