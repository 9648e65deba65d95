"""Rainbow-style DQN placement policy (torch, imported lazily by the modules that need it).

* ``config``: :class:`DQNConfig`, one documented field per switch (numpy/torch free);
* ``network``: shared per-candidate encoder, attention, dueling and C51 heads, noisy layers;
* ``replay``: n-step accumulation, uniform and prioritized replay (numpy only);
* ``agent``: masked action selection and the Rainbow update (double Q, C51 projection);
* ``checkpoint``: ``state_dict`` + JSON metadata, atomic, ``torch.load(weights_only=True)``.

Code outside ``solvers`` uses what it needs of these through the package ``solvers`` (its
``__all__``: ``DQNConfig``, ``train_dqn``, ``save_checkpoint``, ...), never these modules.
"""

from solvers.dqn.config import ConfigError, DQNConfig

__all__ = ["ConfigError", "DQNConfig"]
