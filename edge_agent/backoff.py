"""Exponential backoff with jitter for the agent's retries of what it depends on."""

from __future__ import annotations

import random


class Backoff:
    """Delays ``initial_s``, ``2 * initial_s``, ... capped at ``max_s``, each with +-``jitter`` spread.

    ``reset()`` after a success starts again at ``initial_s``; ``failures`` counts the
    consecutive failures since the last reset.
    """

    def __init__(self, initial_s: float = 1.0, max_s: float = 60.0, factor: float = 2.0, jitter: float = 0.1, seed: int | None = None) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(f"backoff: need 0 < initial_s <= max_s, got {initial_s}, {max_s}")
        if factor < 1 or not 0 <= jitter < 1:
            raise ValueError(f"backoff: need factor >= 1 and 0 <= jitter < 1, got {factor}, {jitter}")
        self.initial_s, self.max_s, self.factor, self.jitter = initial_s, max_s, factor, jitter
        self.failures = 0
        self._rng = random.Random(seed)

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before the next try."""
        try:
            base = min(self.initial_s * self.factor**self.failures, self.max_s)
        except OverflowError:  # factor**failures past the float range (about 1024 doublings): long capped
            base = self.max_s
        self.failures += 1
        spread = base * self.jitter
        return min(max(base + self._rng.uniform(-spread, spread), 0.0), self.max_s)

    def reset(self) -> None:
        self.failures = 0
