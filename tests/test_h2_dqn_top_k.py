"""The ``dqn`` solver's ``top_k`` setting: bounded (a huge one was a 160 GB allocation and a traceback),
and a decision pads the network input to its candidates, not to ``top_k``, with the same Q-values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState
from iro_fed.cli import main
from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, candidate_features, context_features, preselect
from iro_fed.limits import MAX_TOP_K
from iro_fed.testing import random_problem
from solvers.base import InvalidSettingError

BANK = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "bank-three-zone.json")
K = 4  # the small test policy's trained top_k


def test_top_k_over_the_limit_is_refused_naming_the_setting() -> None:
    assert solvers.make("dqn", top_k=MAX_TOP_K).top_k == MAX_TOP_K  # no torch yet: the policy loads lazily
    with pytest.raises(InvalidSettingError, match=rf"setting 'top_k': must be <= {MAX_TOP_K}, got {MAX_TOP_K + 1}"):
        solvers.make("dqn", top_k=MAX_TOP_K + 1)


def test_iro_solve_with_a_huge_top_k_exits_2_naming_it(capsys) -> None:
    # Was: a RuntimeError traceback, the attention asking for 160 GB (100,000 x 100,000 slots x 4 heads).
    assert main(["solve", BANK, "--solver", "dqn", "--set", "top_k=100000"]) == 2
    err = capsys.readouterr().err
    assert f"solver 'dqn' setting 'top_k': must be <= {MAX_TOP_K}, got 100000" in err
    assert "Traceback" not in err


def _policy(tmp_path) -> str:
    pytest.importorskip("torch")
    from solvers.dqn.agent import DQNAgent
    from solvers.dqn.checkpoint import save_checkpoint
    from solvers.dqn.config import DQNConfig

    # attention, dueling and C51 on: the heads where padding could matter
    cfg = DQNConfig(top_k=K, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11)
    agent = DQNAgent(cfg, len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES), seed=3)
    meta = {"config": cfg.to_dict(), "candidate_features": len(CANDIDATE_FEATURES),
            "context_features": len(CONTEXT_FEATURES),
            "feature_names": {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}}
    return str(save_checkpoint(tmp_path / "policy.pt", agent.online.state_dict(), meta))


def _padded_to_k(solver, state: ClusterState, w: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates and their Q-values with the input padded to all ``k`` slots (the old way)."""
    nodes, gains, num_feasible = preselect(state, w, k)
    mask = np.zeros(k + 1, dtype=np.int8)  # + the defer slot, masked
    mask[: nodes.size] = 1
    q = solver.loaded.q_values(candidate_features(state, w, nodes, gains, k),
                               context_features(state, w, num_feasible, nodes.size, k, {"deferrable": 0.0}), mask)
    return nodes, q[: nodes.size]


@pytest.mark.parametrize("top_k", [None, 2, 6, MAX_TOP_K])
def test_a_decision_pads_to_its_candidates_with_the_q_values_of_k_slots(tmp_path, top_k: int | None) -> None:
    solver = solvers.make("dqn", policy=_policy(tmp_path), top_k=top_k)
    k = top_k or K
    widths: list[int] = []
    inner = solver.loaded.q_values

    def recording(cand: np.ndarray, ctx: np.ndarray, mask: np.ndarray) -> np.ndarray:
        widths.append(cand.shape[0])
        return inner(cand, ctx, mask)

    checked = 0
    for pseed in range(3):
        p = random_problem(700 + pseed, nodes=12, pods=6, gpus=False, constraints=False)
        solver.reset(p)
        state = ClusterState(p)
        for w in range(p.num_workloads):
            nodes, expected = _padded_to_k(solver, state, w, k)
            if nodes.size == 0:
                continue
            widths.clear()
            solver.loaded.q_values = recording  # the instance's, for this decision only
            try:
                node = solver.decide(state, w).node
                scores = solver.score(state, w, nodes)
            finally:
                del solver.loaded.q_values
            # at most the trained width or one padding slot past the candidates (was: k slots, 1000 here)
            assert widths and max(widths) <= max(K, nodes.size + 1)
            assert max(widths) >= min(k, nodes.size + 1)
            assert scores.tolist() == pytest.approx(expected.tolist(), rel=1e-5, abs=1e-6)
            assert node == int(nodes[int(np.argmax(expected))])
            checked += 1
    assert checked >= 6
