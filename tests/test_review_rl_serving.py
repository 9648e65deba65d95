"""RL review: the ``dqn`` solver's ``score`` (what the Kubernetes extender asks for) shows the policy
the inputs it was trained on, K candidate slots, so its best node is ``decide``'s."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import solvers  # noqa: E402
from iro_fed import ClusterState  # noqa: E402
from iro_fed.feasibility import feasible_nodes  # noqa: E402
from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, candidate_features, context_features, preselect  # noqa: E402
from iro_fed.testing import random_problem  # noqa: E402
from solvers.dqn.agent import DQNAgent  # noqa: E402
from solvers.dqn.checkpoint import save_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402

K = 4
SMALL = DQNConfig(top_k=K, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11)


def _policy(tmp_path, seed: int) -> str:
    agent = DQNAgent(SMALL, len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES), seed=seed)
    meta = {"config": SMALL.to_dict(), "candidate_features": len(CANDIDATE_FEATURES),
            "context_features": len(CONTEXT_FEATURES),
            "feature_names": {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}}
    return str(save_checkpoint(tmp_path / f"policy-{seed}.pt", agent.online.state_dict(), meta))


@pytest.mark.parametrize("seed", range(3))
def test_score_of_all_feasible_nodes_gives_the_policys_k_slot_values_and_decides_alike(tmp_path, seed: int) -> None:
    solver = solvers.make("dqn", policy=_policy(tmp_path, seed))
    checked = 0
    for pseed in range(4):
        p = random_problem(100 * seed + pseed, nodes=12, pods=6, gpus=False, constraints=False)
        solver.reset(p)
        state = ClusterState(p)
        for w in range(p.num_workloads):
            cand = np.flatnonzero(feasible_nodes(state, w))
            if cand.size <= K:
                continue
            scores = solver.score(state, w, cand)
            # the best K by marginal gain carry the Q-values of the K-slot input decide() uses
            # (before: every candidate went into one forward pass, 12 slots for a 4-slot policy)
            nodes, gains, num_feasible = preselect(state, w, K)
            mask = np.zeros(K + 1, dtype=np.int8)
            mask[: nodes.size] = 1
            q = solver.loaded.q_values(candidate_features(state, w, nodes, gains, K),
                                       context_features(state, w, num_feasible, nodes.size, K, {"deferrable": 0.0}),
                                       mask)[: nodes.size]
            by_node = dict(zip(cand.tolist(), scores.tolist(), strict=True))
            assert [by_node[int(n)] for n in nodes] == pytest.approx(q.tolist(), rel=1e-5, abs=1e-6)
            # so the extender's best node is the one the solver places the pod on; the rest rank below
            assert int(cand[int(np.argmax(scores))]) == solver.decide(state, w).node
            rest = [by_node[int(n)] for n in cand if int(n) not in set(nodes.tolist())]
            assert max(rest) < q.min()
            assert [n for n, _ in solver.rank(state, w, cand.size)] == cand[np.argsort(-scores, kind="stable")].tolist()
            checked += 1
    assert checked >= 5
