"""Online heuristics: pods in the given order, each on the best-scoring feasible node.

Resource shares are normalized by each node's capacity and averaged over the resources the
objective counts (cpu, memory, other additive resources and GPU milli when the cluster has
GPUs), so no single unit dominates.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from iro_fed.model import ClusterState
from iro_fed.objective import marginal
from solvers.base import OnlineSolver, SolverProperties


def free_after(state: ClusterState, w: int, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(free share after placing ``w``, valid resource mask) over ``cand`` x util resources."""
    p = state.problem
    cap = p.util_capacity[cand]
    free = state.free[cand]
    if p.has_gpus:
        free = np.column_stack([free, state.gpu_left[cand]])
    left = free - p.util_demand[w]
    valid = cap > 0
    return np.where(valid, left / np.where(valid, cap, 1.0), 0.0), valid


def mean_free_share(state: ClusterState, w: int, cand: np.ndarray) -> np.ndarray:
    share, valid = free_after(state, w, cand)
    return share.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)


class FirstFit(OnlineSolver):
    name = "first-fit"
    properties = SolverProperties("online", False, "The first feasible node in node order.")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return -candidates.astype(np.float64)


class BestFit(OnlineSolver):
    name = "best-fit"
    properties = SolverProperties("online", False, "The feasible node with the least free capacity left (packing).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return -mean_free_share(state, w, candidates)


class WorstFit(OnlineSolver):
    name = "worst-fit"
    properties = SolverProperties("online", False, "The feasible node with the most free capacity left (spreading).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return mean_free_share(state, w, candidates)


class DotProduct(OnlineSolver):
    """Tetris (Grandl et al., SIGCOMM'14): the node whose free vector best aligns with the demand."""

    name = "dot-product"
    properties = SolverProperties("online", False, "Alignment of demand and free capacity (Tetris dot product).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        p = state.problem
        cap = p.util_capacity[candidates]
        free = state.free[candidates]
        if p.has_gpus:
            free = np.column_stack([free, state.gpu_left[candidates]])
        safe = np.where(cap > 0, cap, 1.0)
        return ((p.util_demand[w] / safe) * (free / safe)).sum(axis=1)


class RandomFit(OnlineSolver):
    name = "random"
    properties = SolverProperties("online", False, "A uniformly random feasible node (seeded).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return self.rng.random(candidates.size)


class GreedyObjective(OnlineSolver):
    """Argmax of the objective's marginal change; ties (to 1e-12) go to the best fit."""

    name = "greedy-objective"
    properties = SolverProperties("online", False, "Argmax of the marginal change of the objective R.")
    tie_decimals: ClassVar[int] = 12

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return marginal(state.problem, state, w, candidates)

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        best = np.round(scores, self.tie_decimals)
        tied = np.flatnonzero(best == best.max())
        if tied.size == 1:
            return int(tied[0])
        return int(tied[np.argmax(-mean_free_share(state, w, candidates[tied]))])


HEURISTICS = (FirstFit, BestFit, WorstFit, DotProduct, RandomFit, GreedyObjective)
