"""Review of the Rainbow update and of ``--resume`` against the papers and the config they claim.

* NoisyNet (Fortunato et al. 2018, Alg. 1): the target network's values use their own noise sample,
  drawn anew for every update (``learn`` resampled it, but the target sat in eval mode: no noise).
* Prioritized replay (Schaul et al. 2016): without C51 a transition's priority is its |TD error|
  (it was the Huber loss: 0.5 * delta**2 for small errors).
* ``train(resume=...)``: the config's learning rate applies (the optimizer state brought the old one
  back), and a checkpoint of another network is refused by name (a different ``attention_heads`` or
  C51 support was taken silently; a different width crashed with torch's RuntimeError).
"""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from torch.nn import functional as F  # noqa: E402

from solvers.dqn.agent import DQNAgent, to_tensors  # noqa: E402
from solvers.dqn.checkpoint import load_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402
from solvers.dqn.network import NoisyLinear  # noqa: E402
from solvers.dqn.train import train  # noqa: E402
from tests.solvers.test_dqn_train import PickBestEnv  # noqa: E402  (its K, F, C are K, CF, XF here)

K, CF, XF = 4, 3, 2
SMALL = DQNConfig(top_k=K, defer_action=False, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11,
                  v_min=-4.0, v_max=4.0, batch_size=16, buffer_size=500, learning_starts=16, n_step=2, gamma=0.5,
                  learning_rate=2e-3)


def _batch(seed: int = 0, size: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for part in ("obs", "next"):
        mask = rng.random((size, K)) < 0.7
        mask[:, 0] = True
        out[f"{part}.candidates"] = rng.random((size, K, CF), dtype=np.float32)
        out[f"{part}.context"] = rng.random((size, XF), dtype=np.float32)
        out[f"{part}.mask"] = mask
    out["action"] = np.zeros(size, dtype=np.int64)
    # TD errors below and above 1, where |delta| and the Huber loss differ
    out["reward"] = np.linspace(-6.0, 6.0, size).astype(np.float32)
    out["discount"] = np.full(size, 0.9, dtype=np.float32)
    out["weights"] = np.ones(size, dtype=np.float32)
    return out


# --- NoisyNet: the target network's noise -------------------------------------------------------


def _noisy_agent(target_sigma: float) -> DQNAgent:
    """The same agent every call; the online net's noise scale 0 (its noise cannot matter), the
    target's ``target_sigma``."""
    agent = DQNAgent(SMALL, CF, XF, seed=0)
    with torch.no_grad():
        for net, sigma in ((agent.online, 0.0), (agent.target, target_sigma)):
            for module in net.modules():
                if isinstance(module, NoisyLinear):
                    module.weight_sigma.fill_(sigma)
                    module.bias_sigma.fill_(sigma)
    return agent


def _loss_with_noise_seed(target_sigma: float, seed: int) -> float:
    agent = _noisy_agent(target_sigma)
    agent.noise_generator.manual_seed(seed)  # the noise samples drawn inside learn() (the agent's own stream)
    return agent.learn(_batch())["loss"]


def test_the_target_network_values_the_next_state_with_its_own_noise_sample() -> None:
    # the losses differ only through the target network's noise sample ...
    assert _loss_with_noise_seed(0.5, 1) != pytest.approx(_loss_with_noise_seed(0.5, 2), rel=1e-6)
    # ... since with no noise in the target either, the noise draws change nothing
    assert _loss_with_noise_seed(0.0, 1) == _loss_with_noise_seed(0.0, 2)


def test_acting_greedily_stays_deterministic_with_a_noisy_target() -> None:
    agent = _noisy_agent(0.5)
    obs = {k[4:]: v for k, v in _batch(3).items() if k.startswith("obs.")}
    first = agent.q_values(obs)
    agent.learn(_batch())
    torch.manual_seed(9)
    agent.online.reset_noise()
    assert np.array_equal(agent.act(obs, explore=False), agent.act(obs, explore=False))
    assert np.array_equal(agent.q_values(obs), agent.q_values(obs)) and first.shape == (8, K)


# --- prioritized replay without C51 --------------------------------------------------------------


def test_priorities_without_c51_are_the_absolute_td_errors() -> None:
    cfg = SMALL.replace(distributional=False, noisy=False, double=True)
    agent = DQNAgent(cfg, CF, XF, seed=0)
    batch = _batch()
    obs = to_tensors({k[4:]: v for k, v in batch.items() if k.startswith("obs.")}, agent.device)
    nxt = to_tensors({k[5:]: v for k, v in batch.items() if k.startswith("next.")}, agent.device)
    rows = torch.arange(len(batch["action"]))
    with torch.no_grad():  # double DQN by hand, before the step changes the weights
        q = agent.online(*obs)[rows, torch.as_tensor(batch["action"])]
        best = agent.online.q_values(*nxt).argmax(dim=1)
        target = torch.as_tensor(batch["reward"]) + torch.as_tensor(batch["discount"]) * agent.target(*nxt)[rows, best]
        delta = (target - q).numpy()
    stats = agent.learn(batch)
    assert np.abs(delta).min() < 1.0 < np.abs(delta).max()  # both sides of the Huber loss's kink
    np.testing.assert_allclose(stats["priorities"], np.abs(delta), rtol=1e-5, atol=1e-6)
    # the loss itself stays the Huber loss
    huber = F.smooth_l1_loss(torch.as_tensor(q), torch.as_tensor(target), reduction="mean").item()
    assert stats["loss"] == pytest.approx(huber, rel=1e-5)


# --- resume --------------------------------------------------------------------------------------


def _train(cfg: DQNConfig, steps: int, **kwargs):
    torch.set_num_threads(1)
    return train([PickBestEnv], cfg, steps=steps, progress=False, track_emissions=False, **kwargs)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "policy.pt"
    _, result = _train(SMALL, 80, out=out)
    assert result.updates > 0  # the optimizer state holds moments
    return out


def test_resume_learns_at_the_configured_learning_rate(checkpoint) -> None:
    tiny = SMALL.replace(learning_rate=1e-12, adam_eps=1e-3)
    agent, result = _train(tiny, 60, resume=checkpoint)
    assert result.updates > 0
    group = agent.optimizer.param_groups[0]
    assert group["lr"] == 1e-12 and group["eps"] == 1e-3
    assert agent.optimizer.state[agent.online.encoder[0].weight]["step"] > result.updates  # moments kept
    # with that rate the weights stay where the checkpoint left them (2e-3 moved them ~1e-2)
    saved, _ = load_checkpoint(checkpoint)
    drift = max((agent.online.state_dict()[k] - v).abs().max().item() for k, v in saved.items()
                if not k.endswith((".eps_in", ".eps_out")))
    assert drift < 1e-6


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"attention_heads": 4}, "attention_heads"),  # same weight shapes, another function: was taken
        ({"v_max": 8.0}, "v_max"),  # the checkpoint's support replaced the configured one silently
        ({"embed_dim": 32, "hidden_dim": 32}, "embed_dim"),  # torch's RuntimeError
        ({"noisy": False}, "noisy"),
        ({"atoms": 21}, "atoms"),
    ],
)
def test_resume_refuses_a_checkpoint_of_another_network_naming_the_setting(checkpoint, tmp_path, change,
                                                                           named) -> None:
    out = tmp_path / "more.pt"
    with pytest.raises(ValueError, match=named) as info:
        _train(SMALL.replace(**change), 20, resume=checkpoint, out=out)
    assert str(checkpoint) in str(info.value)
    assert not out.exists()


def test_resume_takes_learning_settings_that_do_not_shape_the_network(checkpoint) -> None:
    _, result = _train(SMALL.replace(gamma=0.9, n_step=3, noisy_sigma0=0.1, batch_size=8), 20, resume=checkpoint)
    assert result.steps == 100


def test_iro_train_resume_of_another_network_exits_2_naming_the_setting(tmp_path, capsys) -> None:
    from iro_fed.cli import main
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, feature_layout
    from solvers.dqn.checkpoint import save_checkpoint

    cfg = DQNConfig(top_k=4, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11)
    cand_f, ctx_f = len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)
    old = tmp_path / "old.pt"
    save_checkpoint(old, DQNAgent(cfg, cand_f, ctx_f).online.state_dict(),
                    {"config": cfg.to_dict(), "candidate_features": cand_f, "context_features": ctx_f, "steps": 10,
                     "feature_names": feature_layout()})
    out = tmp_path / "new.pt"
    argv = ["train", "--scenario", "bank", "--steps", "10", "--envs", "1", "--hours", "1", "--eval-episodes", "0",
            "--no-emissions", "--resume", str(old), "--out", str(out), "--set", "top_k=4", "--set", "hidden_dim=16",
            "--set", "attention_heads=2", "--set", "atoms=11"]
    assert main([*argv, "--set", "embed_dim=32"]) == 2  # was torch's RuntimeError, a traceback
    err = capsys.readouterr().err
    assert "embed_dim 16 there, 32 here" in err and str(old) in err
    assert not out.exists()
