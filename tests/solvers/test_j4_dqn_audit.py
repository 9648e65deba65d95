"""RL audit j4: resuming or fine-tuning from a policy of another feature layout is refused up front,
``fit`` without ``out`` decides with what it trained, ``defer_action=false`` names the setting, and
``train_every`` behaves as its docstring says."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from iro_fed.cli import main  # noqa: E402
from iro_fed.features import (  # noqa: E402
    CANDIDATE_FEATURES,
    CONTEXT_FEATURES,
    candidate_features,
    context_features,
    feature_layout,
    preselect,
)
from iro_fed.model import ClusterState  # noqa: E402
from iro_fed.testing import random_problem  # noqa: E402
from solvers.dqn.agent import DQNAgent  # noqa: E402
from solvers.dqn.checkpoint import CheckpointError, save_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402
from solvers.dqn.train import train  # noqa: E402

K = 4
SMALL = {"top_k": K, "embed_dim": 16, "hidden_dim": 16, "attention_heads": 2, "atoms": 11}
#: the --set flags of `iro train` that describe SMALL's network (the architecture a resume needs)
SMALL_SET = [a for key, value in SMALL.items() for a in ("--set", f"{key}={value}")]
F, C = len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)


def _swapped_layout() -> dict[str, list[str]]:
    """This version's feature names with two candidate columns swapped: same counts, another order."""
    names = feature_layout()
    names["candidates"][1], names["candidates"][2] = names["candidates"][2], names["candidates"][1]
    return names


def _policy(path, names: dict | None, cfg: DQNConfig | None = None) -> str:
    cfg = cfg or DQNConfig(**SMALL)
    agent = DQNAgent(cfg, F, C, seed=0)
    meta = {"config": cfg.to_dict(), "candidate_features": F, "context_features": C, "steps": 0}
    if names is not None:
        meta["feature_names"] = names
    return str(save_checkpoint(path, agent.online.state_dict(), meta))


class FeatureEnv(gym.Env):
    """Random observations of the real feature shapes, K candidates plus the defer action (as
    PlacementEnv's); the reward favours a hidden mix of the chosen candidate's first columns."""

    def __init__(self, defer: bool = True) -> None:
        self.observation_space = gym.spaces.Dict({
            "candidates": gym.spaces.Box(-1.0, 1.0, (K, F), np.float32),
            "context": gym.spaces.Box(-1.0, 1.0, (C,), np.float32),
            "mask": gym.spaces.MultiBinary(K + int(defer)),
        })
        self.action_space = gym.spaces.Discrete(K + int(defer))
        self.defer = defer

    def _obs(self) -> dict[str, np.ndarray]:
        mask = np.zeros(K + int(self.defer), np.int8)
        mask[:K] = 1
        self.current = {"candidates": self.np_random.random((K, F), dtype=np.float32),
                        "context": self.np_random.random(C, dtype=np.float32), "mask": mask}
        return self.current

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int):
        c = self.current["candidates"][min(int(action), K - 1)]
        self.t += 1
        return self._obs(), float(c[0] - c[3]), self.t >= 8, False, {}


TRAIN_CFG = {**SMALL, "learning_starts": 32, "batch_size": 16, "buffer_size": 500, "n_step": 2}


# --- 1. --resume refuses a checkpoint of another feature layout -----------------------------


def test_resume_refuses_a_checkpoint_trained_on_other_feature_names(tmp_path) -> None:
    start = tmp_path / "start.pt"
    cfg = DQNConfig(**TRAIN_CFG)
    train([FeatureEnv], cfg, steps=40, out=start, progress=False, track_emissions=False,
          metadata={"feature_names": _swapped_layout()})
    out = tmp_path / "resumed.pt"
    built = []

    def env() -> FeatureEnv:
        built.append(1)
        return FeatureEnv()

    with pytest.raises(CheckpointError, match=r"trained on other features .*candidates\[1\]"):
        train([env], cfg, steps=40, out=out, resume=start, progress=False, track_emissions=False,
              metadata={"feature_names": feature_layout()})
    assert not out.exists() and not built  # refused before any env was built
    # the same layout resumes, and so does a run that states none (other envs: nothing to compare)
    train([FeatureEnv], cfg, steps=40, out=out, resume=start, progress=False, track_emissions=False,
          metadata={"feature_names": _swapped_layout()})
    train([FeatureEnv], cfg, steps=40, resume=start, progress=False, track_emissions=False)


def test_iro_train_resume_of_another_feature_layout_exits_2(tmp_path, capsys) -> None:
    from iro_fed.sim.signals import data_dir

    if not (data_dir() / "carbon").is_dir():
        pytest.skip("needs ../shared/data")
    swapped = _policy(tmp_path / "swapped.pt", _swapped_layout())
    out = tmp_path / "new" / "p.pt"
    argv = ["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.5", "--eval-episodes", "0",
            "--no-emissions", *SMALL_SET, "--resume", swapped, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--resume: policy" in err and "trained on other features" in err and "candidates[1]" in err
    assert not out.parent.exists()
    # the same checkpoint with this version's names resumes (the flags above are otherwise fine)
    good = _policy(tmp_path / "good.pt", feature_layout())
    argv[argv.index(swapped)] = good
    assert main(argv) == 0
    assert json.loads(out.with_suffix(".json").read_text())["feature_names"] == feature_layout()


# --- 2. train_every: at most one gradient step per vector step (as documented) --------------


def test_train_every_up_to_the_env_count_learns_once_per_vector_step() -> None:
    def updates(train_every: int) -> int:
        cfg = DQNConfig(**{**TRAIN_CFG, "train_every": train_every})
        return train([FeatureEnv, FeatureEnv], cfg, steps=120, progress=False, track_emissions=False)[1].updates

    # 60 vector steps; the buffer holds 32 transitions after 16 of them (the n-step windows lag a step)
    once_per_vector_step = updates(1)
    assert once_per_vector_step == updates(2) > 0
    assert updates(3) == updates(4) < once_per_vector_step  # ceil(3 / 2) = 2 vector steps apart


# --- 3. fit without out decides with the trained weights ------------------------------------


def _trained_q(net, state: ClusterState, w: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, Q-values)`` of ``net`` on the solver's own K-candidate input for pod ``w``."""
    nodes, gains, num_feasible = preselect(state, w, K)
    cand = candidate_features(state, w, nodes, gains, K)
    ctx = context_features(state, w, num_feasible, nodes.size, K, {"deferrable": 0.0})
    mask = np.zeros(K + 1, dtype=bool)
    mask[: nodes.size] = True
    with torch.inference_mode():
        q = net.q_values(torch.from_numpy(cand[None]), torch.from_numpy(ctx[None]), torch.from_numpy(mask[None]))
    return nodes, q[0].numpy()[: nodes.size]


def test_fit_without_out_decides_with_the_trained_agent() -> None:
    solver = solvers.make("dqn", seed=3)
    shipped = solver.loaded  # the policy it decided with before training
    solver.fit([FeatureEnv], 120, config=TRAIN_CFG, progress=False, track_emissions=False)
    assert solver.loaded is not shipped and solver.loaded.path is None
    trained = copy.deepcopy(solver.agent.online).eval()  # what an out= checkpoint of it would serve
    state = ClusterState(random_problem(5, nodes=8, pods=6, constraints=False))
    differ = False
    for w in range(state.problem.num_workloads):
        nodes, q = _trained_q(trained, state, w)
        if nodes.size == 0:
            continue
        decision = solver.decide(state, w)
        assert decision.node == int(nodes[int(np.argmax(q))])
        ranked = solver.rank(state, w, k=K)
        by_node = dict(zip(nodes.tolist(), q.tolist(), strict=True))
        assert [n for n, _ in ranked] == [int(n) for n in nodes[np.argsort(-q, kind="stable")]]
        assert np.allclose([s for _, s in ranked], [by_node[n] for n, _ in ranked], atol=1e-5)
        _, q_shipped = _trained_q(shipped.agent.online, state, w)
        differ |= not np.allclose(q_shipped, q)
    assert differ  # the check above would not tell the two policies apart otherwise
    assert solver.agent.online.training  # the agent itself keeps training's mode


# --- 4. defer_action=false against an env that offers the defer action ----------------------


def test_defer_action_false_names_the_setting() -> None:
    cfg = DQNConfig(**{**TRAIN_CFG, "defer_action": False})
    with pytest.raises(ValueError, match=r"^defer_action: false, but the env offers a defer action"):
        train([FeatureEnv], cfg, steps=8, progress=False, track_emissions=False)
    with pytest.raises(ValueError, match=r"^defer_action: true, but the env offers no defer action"):
        train([lambda: FeatureEnv(defer=False)], DQNConfig(**TRAIN_CFG), steps=8, progress=False,
              track_emissions=False)


def test_iro_train_defer_action_false_is_a_usage_error_naming_it(tmp_path, capsys) -> None:
    from iro_fed.sim.signals import data_dir

    if not (data_dir() / "carbon").is_dir():
        pytest.skip("needs ../shared/data")
    out = tmp_path / "p.pt"
    assert main(["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.5", "--eval-episodes",
                 "0", "--no-emissions", "--set", "top_k=4", "--set", "defer_action=false", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--set defer_action:" in err and "defer action" in err and not out.exists()


# --- 5. a fine-tune's start policy of another feature layout: refused before the run --------


def test_feedback_sim_refuses_a_dqn_policy_of_another_layout_up_front(tmp_path, capsys) -> None:
    from iro_fed.sim.signals import data_dir

    if not (data_dir() / "carbon").is_dir():
        pytest.skip("needs ../shared/data")
    swapped = _policy(tmp_path / "swapped.pt", _swapped_layout())
    registry = tmp_path / "reg"
    # a short run: were the policy accepted it would exit 0 (no drift fires in 0.5 h)
    assert main(["feedback-sim", "--scenario", "bank", "--hours", "0.5", "--dqn-registry", str(registry),
                 "--dqn-policy", swapped]) == 2
    err = capsys.readouterr().err
    assert "--dqn-policy:" in err and "trained on other features" in err and "candidates[1]" in err
    assert not registry.exists()


def test_fine_tune_start_of_another_layout_is_refused_by_the_shared_check(tmp_path) -> None:
    """``iro scheduler --fine-tune-registry`` checks its start policy with the same function."""
    from iro_fed.cli import UsageError
    from iro_fed.sim.cli import check_fine_tune_steps, fine_tune_start

    registry = tmp_path / "reg"
    registry.mkdir()
    _policy(registry / "v1.pt", _swapped_layout())
    (registry / "latest").write_text("v1.pt")
    with pytest.raises(UsageError, match=r"^--fine-tune-registry: policy .*trained on other features"):
        check_fine_tune_steps("--fine-tune-steps", 256, fine_tune_start(("--fine-tune-registry", str(registry))))
    # counts differ, no names recorded (an older checkpoint): refused as well
    old = _policy(tmp_path / "old.pt", None)
    meta = json.loads((tmp_path / "old.json").read_text())
    meta["candidate_features"] = F + 1
    (tmp_path / "old.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match=rf"^--dqn-policy: policy .*{F + 1}\+{C} features"):
        check_fine_tune_steps("--dqn-steps", 256, ("--dqn-policy", old))
    # this version's layout passes
    good = _policy(tmp_path / "good.pt", feature_layout())
    assert check_fine_tune_steps("--dqn-steps", 256, ("--dqn-policy", good)) == 256


def test_fit_without_out_keeps_the_callers_torch_thread_count(tmp_path):
    """docs/reference.md: a program that calls DQNSolver.fit() keeps its torch thread count (serving
    the trained agent set it to 1)."""
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        solvers.make("dqn", seed=3).fit([FeatureEnv], 120, config=TRAIN_CFG, progress=False, track_emissions=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
