"""Fixtures: the loopback API server (iro_fed.k8s.testing) and the real kubernetes client on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.client import Kube  # noqa: E402
from iro_fed.k8s.scheduler import IroScheduler  # noqa: E402
from iro_fed.k8s.testing import FakeApiServer  # noqa: E402
from tests.k8s.helpers import Clock, make_scheduler  # noqa: E402


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """A started loopback API server."""
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> str:
    return str(api.write_kubeconfig(tmp_path / "kubeconfig.yaml"))


@pytest.fixture
def kube(kubeconfig: str) -> Kube:
    return Kube.from_kubeconfig(kubeconfig, user_agent="iro-test")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sched(cluster: FakeApiServer, kubeconfig: str, clock: Clock) -> Iterator[IroScheduler]:
    """A scheduler run by hand (:func:`~tests.k8s.helpers.make_scheduler`) on the test module's
    ``cluster``, stopped after the test."""
    s = make_scheduler(kubeconfig, clock)
    yield s
    s.stop()
