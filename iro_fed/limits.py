"""Upper bounds shared by the command lines and the settings files, in one place.

A bound that two entry points check (``iro train --steps`` and the federated ``local-steps``,
``iro simulate --hours`` and a federated site's ``hours``) is defined here once, so that they
cannot drift apart. This module imports nothing: every layer may import it.
"""

from __future__ import annotations

#: Simulated hours of one run or episode: the carbon data covers about a year.
MAX_HOURS = 24 * 366
#: DQN training steps (``iro train --steps``, fine-tune steps, federated ``local-steps``): 10^8 is
#: days of training; a typo of more would never finish.
MAX_TRAIN_STEPS = 100_000_000
#: Evaluation episodes (``iro train --eval-episodes``, federated ``eval-episodes``): each is run one by one.
MAX_EVAL_EPISODES = 1000
#: Candidate nodes per decision or reply (a policy's top-k, a webhook's or a /recommend reply's k).
MAX_TOP_K = 1000
