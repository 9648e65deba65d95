"""Hyperparameters of the Rainbow-style placement DQN, one documented field each.

The defaults are the combination that measured best in ``benchmarks/dqn.py`` (ablations there).
Plain data with no torch import, so the CLI can validate settings without loading torch.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, asdict, dataclass, fields
from typing import Any

from iro_fed.limits import MAX_TOP_K


class ConfigError(ValueError):
    """A DQN setting with a wrong name, type or value; the message names the field."""


#: Settings only training reads: no Q-value of a trained network depends on them. A checkpoint's
#: config is read for inference without their checks (``from_dict(..., training=False)``), so a
#: policy written before a training rule existed still places pods.
TRAINING_ONLY = frozenset({
    "double", "gamma", "n_step", "learning_rate", "adam_eps", "batch_size", "buffer_size", "learning_starts",
    "train_every", "target_update_every", "grad_clip", "prioritized", "priority_alpha", "priority_beta0",
    "priority_eps", "epsilon_start", "epsilon_end", "epsilon_fraction",
})


#: Upper bounds of the float settings without a natural one, inside float32 (the network and
#: Adam compute in it: v_max=1e300 overflowed building the C51 support, noisy_sigma0=1e300 filling
#: the noisy layers, learning_rate=1e38 Adam's first step, which is 10 x learning_rate) and past
#: any useful value. Rewards are in units of one unplaced pod, so a return beyond a million is
#: none a scenario gives (the C51 support spans v_min..v_max: its span stays finite in float32).
MAX_RETURN = 1e6
#: 20 times the default noise scale (Fortunato et al. 2018 use 0.5): past it the noise drowns
#: the weights (1e38 made the loss non-finite at the first update).
MAX_NOISY_SIGMA0 = 10.0
#: A learning rate past about 1 already diverges, which training reports (the loss becomes
#: non-finite, a clear error); 1e30 keeps Adam's step inside float32 with room to spare.
MAX_LEARNING_RATE = 1e30
#: Far past any gradient norm: a larger clip is no clip at all, and stays inside float32.
MAX_GRAD_CLIP = 1e30
#: Adam's epsilon is added to the gradients' RMS: past 1 it dwarfs them and the network barely
#: learns (1e300 became inf in float32: no update at all, silently).
MAX_ADAM_EPS = 1.0
#: Added to every priority (a cross-entropy or |TD error| of the rewards' scale): past 1 the
#: sampling is about uniform; use ``prioritized=false`` for that.
MAX_PRIORITY_EPS = 1.0
#: The upper bound of each positive float setting (:data:`MAX_RETURN` bounds v_min and v_max in
#: magnitude).
UPPER_BOUNDS = {
    "noisy_sigma0": MAX_NOISY_SIGMA0,
    "learning_rate": MAX_LEARNING_RATE,
    "adam_eps": MAX_ADAM_EPS,
    "grad_clip": MAX_GRAD_CLIP,
    "priority_eps": MAX_PRIORITY_EPS,
}


@dataclass(frozen=True)
class DQNConfig:
    # --- action space and features -----------------------------------------------------------
    top_k: int = 16
    """Candidate nodes per decision, chosen by feasibility plus a cheap score; the action space."""
    defer_action: bool = True
    """Add a "do not place now" action (valid only for deferrable batch pods)."""

    # --- network -----------------------------------------------------------------------------
    embed_dim: int = 128
    """Width of each candidate's embedding (the seed's 128-d state design)."""
    hidden_dim: int = 128
    """Hidden width of the per-candidate encoder and the heads."""
    attention: bool = True
    """Self-attention across the candidates, so a node's value can depend on the alternatives."""
    attention_heads: int = 4
    """Heads of the attention layer (``embed_dim`` must be divisible by it)."""
    dueling: bool = True
    """Dueling heads: a state value plus per-candidate advantages with the mean advantage removed."""
    noisy: bool = True
    """Noisy linear layers (factorized Gaussian) in the heads replace epsilon-greedy exploration."""
    noisy_sigma0: float = 0.5
    """Initial noise scale of the noisy layers (Fortunato et al. 2018); > 0, at most :data:`MAX_NOISY_SIGMA0`."""
    distributional: bool = True
    """C51: learn a categorical return distribution over ``atoms`` fixed support points."""
    atoms: int = 51
    """Support points of the return distribution (C51)."""
    v_min: float = -10.0
    """Lowest return of the C51 support (at least ``-MAX_RETURN``)."""
    v_max: float = 10.0
    """Highest return of the C51 support (at most :data:`MAX_RETURN`)."""

    # --- learning ----------------------------------------------------------------------------
    double: bool = True
    """Double Q-learning: the online network picks the next action, the target network values it."""
    gamma: float = 0.99
    """Discount per decision."""
    n_step: int = 3
    """Multi-step returns: rewards of n decisions are summed before bootstrapping."""
    learning_rate: float = 2.5e-4
    """Adam learning rate; > 0, at most :data:`MAX_LEARNING_RATE`."""
    adam_eps: float = 1.5e-4
    """Adam epsilon (Rainbow's value); > 0, at most :data:`MAX_ADAM_EPS`."""
    batch_size: int = 64
    """Transitions per gradient step."""
    buffer_size: int = 50_000
    """Replay capacity in transitions; the oldest are overwritten."""
    learning_starts: int = 500
    """Transitions collected before the first gradient step."""
    train_every: int = 1
    """Environment steps (summed over the vectorized envs) between gradient steps, counted in whole
    vector steps (one step of every env): at most one gradient step follows a vector step, the
    first whose count reaches ``train_every``; so once every ``ceil(train_every / n_envs)`` vector
    steps, and 1 to ``n_envs`` all learn once per vector step (``iro train``'s 4 envs: one gradient
    step per 4 env steps at the default 1)."""
    target_update_every: int = 500
    """Gradient steps between copies of the online network into the target network."""
    grad_clip: float = 10.0
    """Max gradient norm; > 0, at most :data:`MAX_GRAD_CLIP`."""
    prioritized: bool = True
    """Prioritized experience replay (proportional, sum tree)."""
    priority_alpha: float = 0.5
    """How strongly priorities skew sampling (0 = uniform)."""
    priority_beta0: float = 0.4
    """Initial importance-sampling correction, annealed to 1 over training."""
    priority_eps: float = 1e-6
    """Added to every priority so no transition is never sampled; > 0, at most :data:`MAX_PRIORITY_EPS`."""
    epsilon_start: float = 1.0
    """Initial exploration rate (used only when ``noisy`` is off)."""
    epsilon_end: float = 0.05
    """Final exploration rate (used only when ``noisy`` is off)."""
    epsilon_fraction: float = 0.3
    """Share of the training steps over which epsilon decays linearly."""

    training: InitVar[bool] = True
    """Check the training-only settings too (:data:`TRAINING_ONLY`); False reads a checkpoint's
    config for inference. Not a setting: not in ``fields()``, ``to_dict()`` or a checkpoint."""

    def __post_init__(self, training: bool = True) -> None:
        positive_int = ("top_k", "embed_dim", "hidden_dim", "attention_heads", "atoms", "n_step", "batch_size",
                        "buffer_size", "train_every", "target_update_every")
        unit = ("gamma", "priority_alpha", "priority_beta0", "epsilon_start", "epsilon_end", "epsilon_fraction")
        positive = ("learning_rate", "adam_eps", "grad_clip", "noisy_sigma0", "priority_eps")
        if not training:
            positive_int, unit, positive = (tuple(n for n in names if n not in TRAINING_ONLY)
                                            for names in (positive_int, unit, positive))
        for name in positive_int:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
        if self.top_k > MAX_TOP_K:
            raise ConfigError(f"top_k: expected at most {MAX_TOP_K}, got {self.top_k!r}")
        if training:
            self._training_rules()
        for name in unit:
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}: expected a number in [0, 1], got {value!r}")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name}: expected a positive number, got {value!r}")
        for f in fields(self):
            if not training and f.name in TRAINING_ONLY:
                continue
            value = getattr(self, f.name)
            # inf passed the checks above and failed deep inside training (v_max: an index error,
            # learning_rate: an overflow in the replay sampling)
            if f.type == "float" and not (isinstance(value, int | float) and not isinstance(value, bool)
                                           and math.isfinite(value)):
                raise ConfigError(f"{f.name}: expected a finite number, got {value!r}")
        # finite, yet past float32 or any use (checked after the rules above, which name inf and nan)
        for name in positive:
            value = getattr(self, name)
            if value > UPPER_BOUNDS[name]:
                raise ConfigError(f"{name}: expected a positive number at most {UPPER_BOUNDS[name]:g}, got {value!r}")
        for name in ("v_min", "v_max"):
            value = getattr(self, name)
            if abs(value) > MAX_RETURN:
                raise ConfigError(f"{name}: expected a number between {-MAX_RETURN:g} and {MAX_RETURN:g} "
                                  f"(a return, in units of one unplaced pod), got {value!r}")
        if self.distributional and (self.atoms < 2 or not self.v_min < self.v_max):
            raise ConfigError(f"atoms/v_min/v_max: need atoms >= 2 and v_min < v_max, got {self.atoms}, "
                              f"{self.v_min}, {self.v_max}")
        if self.attention and self.embed_dim % self.attention_heads:
            raise ConfigError(f"attention_heads: {self.attention_heads} does not divide embed_dim {self.embed_dim}")

    def check_training(self) -> None:
        """:class:`ConfigError` naming the field unless training can run with these settings. A
        config built for training was checked when made; one read from a checkpoint for inference
        (``training=False``) is checked here, where training starts (:func:`~solvers.dqn.train.train`:
        a fine-tune or ``--resume`` from that policy)."""
        DQNConfig.from_dict(self.to_dict())

    def _training_rules(self) -> None:
        """The rules between training-only settings (what a checkpoint read for inference skips)."""
        if not isinstance(self.learning_starts, int) or isinstance(self.learning_starts, bool) \
                or self.learning_starts < 0:
            raise ConfigError(f"learning_starts: must be >= 0, got {self.learning_starts!r}")
        # Training learns once the buffer holds max(learning_starts, batch_size) transitions: a
        # smaller buffer never gets there (a run wrote a policy that never learned, exit 0).
        need = max(self.learning_starts, self.batch_size)
        if self.buffer_size < need:
            which = "learning_starts" if self.learning_starts >= self.batch_size else "batch_size"
            raise ConfigError(f"buffer_size: {self.buffer_size} holds fewer transitions than the {need} "
                              f"({which}) needed before the first gradient step, so training would never learn; "
                              f"raise buffer_size or lower {which}")

    @property
    def num_actions(self) -> int:
        """Candidate slots plus the optional defer action (always the last index)."""
        return self.top_k + (1 if self.defer_action else 0)

    def architecture(self) -> dict[str, Any]:
        """The settings that shape the network (its weights, or what the same weights compute):
        a checkpoint's weights fit another config only where these agree."""
        names = ["defer_action", "embed_dim", "hidden_dim", "attention", "dueling", "noisy", "distributional"]
        if self.attention:
            names.append("attention_heads")  # same weight shapes for any head count, another function
        if self.distributional:
            names += ["atoms", "v_min", "v_max"]  # the support is saved with the weights
        return {name: getattr(self, name) for name in names}

    def architecture_differences(self, saved: Any) -> list[str]:
        """Each network setting where a saved config (a checkpoint's ``config`` mapping) and this
        one differ, as ``"name X there, Y here"``; empty: the saved weights mean the same here.

        A setting the saved config leaves out takes its default, as loading that policy does
        (:class:`~solvers.dqn.solver.DQNSolver`). :class:`ConfigError` when ``saved`` is not a
        readable config (an unknown or invalid setting, not a mapping).
        """
        try:
            theirs = DQNConfig.from_dict(dict(saved), training=False).architecture()
        except (TypeError, ValueError) as exc:  # ConfigError is a ValueError; dict() of a list: TypeError
            raise ConfigError(str(exc)) from exc
        ours = self.architecture()
        return [f"{name} {theirs.get(name)!r} there, {ours.get(name)!r} here"
                for name in sorted(set(theirs) | set(ours)) if theirs.get(name) != ours.get(name)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], training: bool = True) -> DQNConfig:
        """A config from a mapping; unknown keys are an error naming them. ``training=False``: a
        checkpoint's config read for inference, its training-only settings unchecked."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown DQN setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**data, training=training)

    def replace(self, **changes: Any) -> DQNConfig:
        return self.from_dict({**self.to_dict(), **changes})
