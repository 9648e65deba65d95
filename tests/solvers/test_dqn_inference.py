"""The ``dqn`` solver at decision time: only real candidates, the no-fit fallback, no noise, and
policies trained on another feature layout refused with the difference named."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from iro_fed import ClusterState, problem_from_dict  # noqa: E402
from iro_fed.feasibility import feasible_nodes  # noqa: E402
from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, observation  # noqa: E402
from iro_fed.testing import random_problem  # noqa: E402
from solvers.base import InvalidSettingError  # noqa: E402
from solvers.dqn.agent import DQNAgent  # noqa: E402
from solvers.dqn.checkpoint import save_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402
from solvers.dqn.network import QNetwork  # noqa: E402

SMALL = DQNConfig(top_k=4, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11)
NAMES = {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}
CF, XF = len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)


def _save(path, agent: DQNAgent, names=NAMES, cfg: DQNConfig = SMALL) -> str:
    meta = {"config": cfg.to_dict(), "candidate_features": CF, "context_features": XF, "feature_names": names}
    return str(save_checkpoint(path, agent.online.state_dict(), meta))


def _noisy_policy(tmp_path, seed: int = 0) -> tuple[str, DQNAgent]:
    """A checkpoint whose noisy layers hold a live noise sample (as one saved mid-training does)."""
    agent = DQNAgent(SMALL, CF, XF, seed=seed)
    agent.online.train()
    agent.online.reset_noise()
    assert any(b.abs().sum() > 0 for n, b in agent.online.named_buffers() if n.endswith("eps_in"))
    return _save(tmp_path / f"noisy-{seed}.pt", agent), agent


def _pinned_padding_problem():
    """Two nodes fit the pod, the policy has four slots: two are padding."""
    return problem_from_dict({
        "resources": ["cpu", "memory"],
        "domains": [{"name": "z", "kind": "zone"}],
        "nodes": [{"name": f"n{i}", "domain": "z", "capacity": {"cpu": c, "memory": 8192}}
                  for i, c in enumerate([500, 4000, 500, 8000])],
        "workloads": [{"name": "w", "requests": {"cpu": 1000, "memory": 1024}},
                      {"name": "huge", "requests": {"cpu": 64000, "memory": 1024}}],
    })


@pytest.mark.parametrize("seed", range(6))
def test_only_real_candidates_are_chosen_and_a_pod_that_fits_nowhere_stays_unplaced(tmp_path, seed: int) -> None:
    path, _ = _noisy_policy(tmp_path, seed)
    p = _pinned_padding_problem()
    solver = solvers.make("dqn", policy=path)
    state = ClusterState(p)
    q = solver.score(state, 0, np.array([1, 3]))
    assert q.shape == (2,) and np.isfinite(q).all()  # the padding slots' -inf never reach a caller
    decision = solver.decide(state, 0)
    assert decision.node in (1, 3) and decision.node == [1, 3][int(np.argmax(q))]
    none = solver.decide(state, 1)
    assert none.node == -1 and none.cards == () and "Insufficient cpu" in none.reason
    result = solver.solve(p)
    assert result.assignment[1] == -1 and result.assignment[0] in (1, 3)


def test_inference_uses_the_mean_weights_whatever_noise_the_checkpoint_holds(tmp_path) -> None:
    path, agent = _noisy_policy(tmp_path, seed=3)
    p = random_problem(7, nodes=12, pods=8)
    state = ClusterState(p)
    net = QNetwork(SMALL, CF, XF)
    net.load_state_dict(agent.online.state_dict())
    net.eval()  # noise off: the mean weights
    solver = solvers.make("dqn", policy=path)
    for w in range(p.num_workloads):
        if not feasible_nodes(state, w).any():
            continue
        obs, slots = observation(state, w, 4, context={"deferrable": 0.0})
        obs["mask"][-1] = 0  # the solver never defers
        with torch.no_grad():
            mean_q = net.q_values(*(torch.as_tensor(obs[k])[None] for k in ("candidates", "context", "mask")))[0]
        m = int((slots >= 0).sum())
        expected = int(slots[int(torch.argmax(mean_q[:m]))])
        assert solver.decide(state, w).node == expected
    a = solvers.make("dqn", policy=path, seed=1).solve(p)
    b = solvers.make("dqn", policy=path, seed=1).solve(p)
    assert np.array_equal(a.assignment, b.assignment)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        # same sizes, two columns swapped: the sizes alone cannot tell
        ({"candidates": [*CANDIDATE_FEATURES[:2], CANDIDATE_FEATURES[3], CANDIDATE_FEATURES[2],
                         *CANDIDATE_FEATURES[4:]], "context": list(CONTEXT_FEATURES)},
         "candidates\\[2\\]: 'gpu_free_after' in the policy, 'memory_free_after' here"),
        ({"candidates": list(CANDIDATE_FEATURES), "context": [*CONTEXT_FEATURES[:-1], "pressure_disk"]},
         f"context\\[{XF - 1}\\]: 'pressure_disk' in the policy, 'pressure_gpu' here"),
        ({"candidates": list(CANDIDATE_FEATURES)}, "context: missing"),
        (["valid"], "feature_names is list"),  # was an AttributeError traceback
    ],
)
def test_a_policy_of_another_feature_layout_is_refused_naming_the_difference(tmp_path, names, message) -> None:
    path = _save(tmp_path / "p.pt", DQNAgent(SMALL, CF, XF, seed=0), names=names)
    with pytest.raises(InvalidSettingError, match=f"setting 'policy'.*other features.*{message}"):
        solvers.make("dqn", policy=path).solve(random_problem(0))
