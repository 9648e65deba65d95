"""The learner: action selection under the mask, and one Rainbow gradient step.

Observations are dicts of arrays with a leading batch axis: ``candidates[B, K, F]``,
``context[B, C]`` and ``mask[B, A]`` (A = K, plus the defer action when configured).
An invalid action is never chosen: masked Q-values are -inf and random exploration draws only
among valid actions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from solvers.dqn.config import DQNConfig
from solvers.dqn.network import QNetwork
from solvers.dqn.replay import numpy_generator


def project_distribution(
    next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor,
) -> torch.Tensor:
    """C51's categorical projection of ``r + discount * Z`` back onto the fixed support.

    ``next_probs[B, atoms]``, ``rewards[B]``, ``discounts[B]`` (0 ends the episode) and
    ``support[atoms]`` (evenly spaced). Each shifted atom's mass is split between its two
    neighbouring support points in proportion to closeness (Bellemare et al. 2017, Alg. 1).
    """
    atoms = support.numel()
    v_min, v_max = float(support[0]), float(support[-1])
    delta = (v_max - v_min) / (atoms - 1)
    tz = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    # float32 rounding can put an atom at v_max a hair above atoms - 1 (atoms 11 on [-7.3, 2.9]):
    # an index out of range without the clamp.
    b = ((tz - v_min) / delta).clamp(0, atoms - 1)
    lower, upper = b.floor().long(), b.ceil().long()
    same = (lower == upper).to(next_probs.dtype)  # b fell exactly on an atom: all mass goes there
    out = torch.zeros_like(next_probs)
    out.scatter_add_(1, lower, next_probs * (upper.to(b.dtype) - b + same))
    out.scatter_add_(1, upper, next_probs * (b - lower.to(b.dtype)))
    return out


class NonFiniteLoss(ValueError):
    """A gradient step whose loss, priorities or gradient are not finite (training diverged)."""


def to_tensors(obs: dict[str, np.ndarray], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(obs["candidates"], dtype=torch.float32, device=device),
        torch.as_tensor(obs["context"], dtype=torch.float32, device=device),
        torch.as_tensor(obs["mask"], device=device).bool(),
    )


class DQNAgent:
    """Online and target Q-networks, the optimizer and the update rule the config switches on."""

    def __init__(self, cfg: DQNConfig, candidate_features: int, context_features: int, seed: int = 0,
                 device: str = "cpu") -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        # The initial weights are the draws of torch's CPU generator seeded with `seed` (the networks
        # are built on the CPU), made on a fork of it: building an agent leaves the caller's stream
        # as it was (it was reseeded), and a seed gives the weights it gave then.
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            online = QNetwork(cfg, candidate_features, context_features)
            target = QNetwork(cfg, candidate_features, context_features)
            after_init = torch.get_rng_state()
        self.rng = np.random.default_rng(seed)
        self.online = online.to(self.device)
        self.target = target.to(self.device)
        self.target.load_state_dict(self.online.state_dict())
        # NoisyNet (Fortunato et al. 2018, Alg. 1): the target values the next state with its own
        # noise sample, drawn in each update; eval mode would drop it (the net has no dropout or
        # batch norm, so the mode changes nothing else).
        self.target.train(cfg.noisy)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
        self.updates = 0
        #: FedProx (Li et al., MLSys 2020): ``(mu, anchor)`` adds ``mu/2 * ||w - anchor||^2`` over the
        #: trainable parameters to every gradient step's loss; None: plain DQN loss.
        self.proximal: tuple[float, dict[str, Any]] | None = None
        #: The agent's own generator (on its device) that its noisy layers draw their noise from: on
        #: the CPU the continuation of the seeded stream the weights were drawn from, elsewhere one
        #: seeded with ``seed``, the draws torch's global generators gave when the agent seeded them.
        #: It continues across :func:`~solvers.dqn.train.train` and any updates after it (a federated
        #: site's steps on its experience store), reproducible from the seed whatever the host draws.
        #: None: torch's global generator.
        self.noise_generator: torch.Generator | None
        if self.device.type == "cpu":
            self.noise_generator = torch.Generator()
            self.noise_generator.set_state(after_init)
        else:
            self.noise_generator = torch.Generator(device=self.device)
            self.noise_generator.manual_seed(seed)

    def random_state(self) -> dict[str, Any]:
        """The agent's random streams as they stand: ``noise`` (its noise generator's state, a uint8
        tensor; absent when it draws from torch's global generator) and ``epsilon`` (the state of the
        numpy generator epsilon-greedy draws from). :meth:`load_random_state` continues them."""
        out: dict[str, Any] = {"epsilon": self.rng.bit_generator.state}
        if self.noise_generator is not None:
            out["noise"] = self.noise_generator.get_state()
        return out

    def load_random_state(self, state: dict[str, Any]) -> None:
        """Continue the streams :meth:`random_state` returned; ``ValueError`` naming the entry
        (``noise`` or ``epsilon``) that is missing or does not fit, and then nothing is changed."""
        rng = numpy_generator(state.get("epsilon"), self.rng, "epsilon")
        if self.noise_generator is not None:
            raw = state.get("noise")
            if raw is None:
                raise ValueError("noise: missing")
            if not isinstance(raw, torch.Tensor) or raw.dtype != torch.uint8:
                raise ValueError(f"noise: expected a torch generator's state (a uint8 tensor), got "
                                 f"{type(raw).__name__ if not isinstance(raw, torch.Tensor) else raw.dtype}")
            scratch = torch.Generator(device=self.noise_generator.device)  # a bad state leaves the agent's alone
            try:
                scratch.set_state(raw)
            except RuntimeError as exc:  # another size, or not a valid state of this device's generator
                raise ValueError(f"noise: not a state of a {scratch.device} generator ({exc})") from exc
            self.noise_generator.set_state(raw)  # both checked: nothing below can fail
        self.rng = rng

    def set_proximal(self, mu: float) -> None:
        """Anchor the proximal term at the current online weights (e.g. a federated round's global
        policy); ``mu`` 0 removes it."""
        if not (mu >= 0 and mu < float("inf")):
            raise ValueError(f"proximal_mu: expected a finite number >= 0, got {mu!r}")
        if mu == 0:
            self.proximal = None
            return
        self.proximal = (float(mu), {
            name: param.detach().clone() for name, param in self.online.named_parameters() if param.requires_grad
        })

    # --- acting --------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: dict[str, np.ndarray], epsilon: float = 0.0, explore: bool = True) -> np.ndarray:
        """One valid action per row; ``explore`` uses the noisy layers' noise or epsilon."""
        cand, ctx, mask = to_tensors(obs, self.device)
        if explore and self.cfg.noisy:
            self.online.train()
            self.online.reset_noise(self.noise_generator)
        else:
            self.online.eval()
        q = self.online.q_values(cand, ctx, mask).cpu().numpy()
        self.online.train()
        actions = q.argmax(axis=1)
        valid = np.asarray(obs["mask"]).astype(bool)
        if explore and not self.cfg.noisy and epsilon > 0:
            for i in np.flatnonzero(self.rng.random(len(actions)) < epsilon):
                choices = np.flatnonzero(valid[i])
                if choices.size:
                    actions[i] = self.rng.choice(choices)
        return actions.astype(np.int64)

    @torch.no_grad()
    def q_values(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Deterministic Q-values (noise off), invalid actions at -inf."""
        self.online.eval()
        try:
            return self.online.q_values(*to_tensors(obs, self.device)).cpu().numpy()
        finally:
            self.online.train()

    # --- learning ------------------------------------------------------------------------------

    def learn(self, batch: dict[str, Any]) -> dict[str, Any]:
        """One gradient step on a replay batch; returns the loss and per-sample priorities."""
        cfg, dev = self.cfg, self.device
        obs = {k[4:]: v for k, v in batch.items() if k.startswith("obs.")}
        nxt = {k[5:]: v for k, v in batch.items() if k.startswith("next.")}
        cand, ctx, mask = to_tensors(obs, dev)
        ncand, nctx, nmask = to_tensors(nxt, dev)
        actions = torch.as_tensor(batch["action"], dtype=torch.int64, device=dev)
        rewards = torch.as_tensor(batch["reward"], dtype=torch.float32, device=dev)
        discounts = torch.as_tensor(batch["discount"], dtype=torch.float32, device=dev)
        weights = torch.as_tensor(batch["weights"], dtype=torch.float32, device=dev)
        if not torch.isfinite(rewards).all():  # C51's projection would index with it (an IndexError)
            raise NonFiniteLoss(f"loss became non-finite at update {self.updates + 1} (the batch holds a "
                                "non-finite reward)")
        # A next state without any valid action cannot be bootstrapped from.
        discounts = torch.where(nmask.any(dim=1), discounts, torch.zeros_like(discounts))
        rows = torch.arange(actions.numel(), device=dev)

        if cfg.noisy:
            self.online.reset_noise(self.noise_generator)
            self.target.reset_noise(self.noise_generator)
        with torch.no_grad():
            selector = self.online if cfg.double else self.target
            next_actions = selector.q_values(ncand, nctx, nmask).argmax(dim=1)
            target_out = self.target(ncand, nctx, nmask)
        out = self.online(cand, ctx, mask)
        if cfg.distributional:
            with torch.no_grad():
                next_probs = target_out[rows, next_actions].exp()
                target = project_distribution(next_probs, rewards, discounts, self.online.support)
            log_p = out[rows, actions]
            per_sample = -(target * log_p).sum(dim=1)
            # Priority = this cross-entropy, as Dopamine's and Kaixhin's Rainbow do; Hessel et al.
            # (2018) name the KL divergence, which is it minus the target's entropy. Kept: the
            # defaults were measured with it (benchmarks/dqn.py) and its gradient is the KL's.
            priorities = per_sample.detach()
        else:
            with torch.no_grad():
                target = rewards + discounts * target_out[rows, next_actions]
            per_sample = F.smooth_l1_loss(out[rows, actions], target, reduction="none")
            # |TD error| (Schaul et al. 2016), not the Huber loss (0.5 * delta**2 below 1)
            priorities = (target - out[rows, actions]).detach()
        loss = (weights * per_sample).mean()
        # A diverged step (e.g. a huge learning rate) would write NaN weights and NaN priorities,
        # which failed later as an obscure overflow in the replay's sampling: stop here, unchanged.
        if not (torch.isfinite(loss) and torch.isfinite(priorities).all()):
            raise NonFiniteLoss(f"loss became non-finite at update {self.updates + 1} (lower learning_rate, "
                                "or check the rewards' scale against v_min/v_max)")
        td_loss = loss
        if self.proximal is not None:
            mu, anchor = self.proximal
            drift = sum(((param - anchor[name]) ** 2).sum() for name, param in self.online.named_parameters()
                        if name in anchor)
            loss = loss + 0.5 * mu * drift
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.online.parameters(), cfg.grad_clip)
        if not torch.isfinite(grad_norm):  # clipping a non-finite norm gives NaN weights
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(f"loss became non-finite at update {self.updates + 1} (its gradient is "
                                f"{float(grad_norm)}; lower learning_rate)")
        self.optimizer.step()
        self.updates += 1
        if self.updates % cfg.target_update_every == 0:
            self.sync_target()
        return {
            "loss": float(td_loss.item()),
            "grad_norm": float(grad_norm.item()),
            "priorities": priorities.abs().cpu().numpy(),
        }

    def sync_target(self) -> None:
        self.target.load_state_dict(self.online.state_dict())
