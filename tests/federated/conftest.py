"""Shared fixtures of the federated tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_round_request() -> Callable[..., str]:
    """``write(root, site, error=0.2)``: a round request written by the feedback loop's own action
    (as ``iro scheduler --round-request ROOT`` does on drift); returns its path."""
    from iro_fed.feedback import FederatedRoundRequest, FeedbackLoop, Trigger

    def write(root: Path, site: str, error: float = 0.2) -> str:
        trigger = Trigger(kind="fine-tune", at=0.0, observation=10, quantity="utilization", moving_error=error,
                          threshold=0.1, samples=8, factors_before={"batch": 1.0}, factors_after={"batch": 1.4},
                          error_after=0.03)
        return FederatedRoundRequest(root, site=site)(FeedbackLoop(threshold=0.1), trigger)

    return write
