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
from solvers.base import OnlineSolver, SolverProperties


def free_share_after(state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """Per node (all, or ``nodes``), the mean share of each util resource left free after placing ``w``."""
    p = state.problem
    if nodes is None:
        return (state.free_share - p.util_inv_capacity @ p.util_demand[w]) / p.util_valid_count
    return (state.free_share[nodes] - p.util_inv_capacity[nodes] @ p.util_demand[w]) / p.util_valid_count[nodes]


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
    sum) go to the best fit."""

    name = "greedy-objective"
    properties = SolverProperties("online", False, "Argmax of the marginal change of the objective R.")
    tie_rtol: ClassVar[float] = 1e-12

    def score_all(self, state: ClusterState, w: int) -> np.ndarray:
        return marginal(state.problem, state, w)

    def tie_tolerance(self, problem: Problem) -> float:
        """Scores closer than this to the best tie. R's terms are each in [0, 1] times their
        weight, so the rounding error of a score scales with the weights' sum (not with the
        score, which may cancel to ~0): rounding the scores to fixed decimals split values 1e-16
        apart at a rounding boundary, and made every node tie when all weights were ~1e-13."""
        wts = problem.weights
        return self.tie_rtol * sum(getattr(wts, k) for k in Weights.__dataclass_fields__)

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
