"""``iro-frag``: our fragmentation-aware online policy for GPU-sharing clusters.

It starts from FGD (solvers/fgd.py) and changes what the replay on the openb trace showed to
matter:

* **No truncation.** FGD scores ``int(100 * sigmoid(-dF / 1000))``, so every node whose
  fragmentation changes by less than about 20 milli ties at the same integer and the winner is
  a random node. We rank by the fragmentation change ``dF`` itself.
* **Packing among equals.** Nodes whose ``dF`` is within ``tolerance_milli`` of the best are
  ranked by how little GPU and CPU they have left after the pod (best fit), so pods fill
  already-used nodes before they open fresh ones; fresh nodes stay whole for multi-GPU pods.
* **Memory-aware fragmentation** (``memory_aware``): a typical task also counts as unable to
  run on a node that lacks its memory, so free GPUs stranded by exhausted memory count as
  fragmented (the paper's definition looks at CPU and GPU only).

It is online (one pod at a time, each tried once) and uses only what FGD uses: the current
cluster and the typical-task distribution of the workload.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from iro_fed.model import GPU_MILLI, ClusterState
from solvers.base import SEED, Param, SolverProperties
from solvers.fgd import MAX_CPU, MAX_GPU, Fgd, pod_numbers


class IroFrag(Fgd):
    name = "iro-frag"
    properties = SolverProperties(
        "online", False, "FGD without score truncation, best-fit among near-equal fragmentation, memory-aware."
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "order": Param("given", str, "Pod order.", choices=("given", "priority", "largest-first")),
        "memory_aware": Param(True, bool, "Count GPUs stranded by exhausted memory as fragmented."),
        "tolerance_milli": Param(
            20.0, float, "Nodes within this many milli of the least fragmentation growth are ranked by best fit.", minimum=0.0
        ),
        "gpu_weight": Param(1.0, float, "Weight of GPU left (vs CPU left) in the best-fit ranking.", minimum=0.0),
        "frag_model": Param("copies", str, "Fragmentation: the paper's, or GPU that copies of each typical task can still use.", choices=("fgd", "copies")),
        "weighting": Param("count", str, "Typical-task weights: share of pods or of GPU milli.", choices=("count", "gpu")),
        "scoring": Param("continuous", str, "Rank by the fragmentation growth, or by FGD's integer sigmoid score.", choices=("continuous", "fgd")),
        "tie_break": Param(
            "best-fit", str, "Among near-equal nodes: best fit, same GPU kind then best fit, or the seeded node order.",
            choices=("best-fit", "kind", "rank"),
        ),
    }

    def reset(self, problem) -> None:
        super().reset(problem)
        k = problem.wl_gpu_count
        share = (k == 1) & (problem.wl_gpu_milli < GPU_MILLI)
        self.kind = np.where(k == 0, 0, np.where(share, 1, 1 + k)).astype(np.int64)
        self.num_kinds = int(self.kind.max(initial=0)) + 1

    def rebuild_caches(self, state: ClusterState) -> None:
        super().rebuild_caches(state)
        self.kind_count = np.zeros((state.problem.num_nodes, self.num_kinds), dtype=np.int64)
        placed = np.flatnonzero(state.assignment >= 0)
        np.add.at(self.kind_count, (state.assignment[placed], self.kind[placed]), 1)

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        super().apply_changes(state, entries)
        for w, n, sign in entries:
            self.kind_count[n, self.kind[w]] += sign

    def _left_after(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        cpu, _, _, gpu = pod_numbers(state.problem, w)
        cpu_left = state.free[candidates, state.problem.cpu_index] - cpu
        return self.gpu_weight * (state.gpu_left[candidates] - gpu) / MAX_GPU + cpu_left / MAX_CPU

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        if self.scoring == "fgd":
            return Fgd.score(self, state, w, candidates)
        self.sync(state)
        after, fits = self.frag_after(state, w, candidates)
        before = self.frag[candidates]
        if after.ndim == 2:
            growth = after - before[:, None]
            # Best card: least growth, then the fitting card with the least milli left.
            left = np.where(fits, state.gpu_free[candidates], GPU_MILLI + 1)
            key = np.where(fits, np.round(growth / max(self.tolerance_milli, 1e-9)), np.inf)
            best = np.lexsort((left, key), axis=1)[:, 0] if candidates.size else np.zeros(0, dtype=np.int64)
            self._best_card = dict(zip(candidates.tolist(), best.tolist(), strict=True))
            growth = growth[np.arange(candidates.size), best]
        else:
            growth = after - before
        return -growth

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        if self.scoring == "fgd":
            if self.tie_break == "rank":
                return Fgd.select(self, state, w, candidates, scores)
            near = np.flatnonzero(scores == scores.max())
        else:
            near = np.flatnonzero(scores >= scores.max() - self.tolerance_milli)
        if near.size == 1:
            return int(near[0])
        if self.tie_break == "rank":
            return int(near[np.argmin(self.tie_rank[candidates[near]])])
        if self.tie_break == "kind" and self.kind[w] > 0:
            counts = self.kind_count[candidates[near], 1:]
            mine = counts[:, self.kind[w] - 1] > 0
            pure = mine & ((counts > 0).sum(axis=1) == 1)
            empty = (counts > 0).sum(axis=1) == 0
            rank = np.where(pure, 3, np.where(mine, 2, np.where(empty, 1, 0)))
            near = near[rank == rank.max()]
            if near.size == 1:
                return int(near[0])
        left = self._left_after(state, w, candidates[near])
        tight = near[np.flatnonzero(left <= left.min() + 1e-12)]
        return int(tight[np.argmin(self.tie_rank[candidates[tight]])])
