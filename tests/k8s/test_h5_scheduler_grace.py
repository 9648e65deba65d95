"""The scheduler's Deployment gives its clean stop the time the code's timeouts can take.

IroScheduler.stop waits for the Bindings under way (each at most the API write timeout,
``--api-timeout-s``, else ``Kube.write_timeout_s``: 30 s) and then releases the Lease (a get and an
update, each at most ``renew_deadline / 2``: iro_fed/k8s/leader.py). Before, deploy/ set no
terminationGracePeriodSeconds: the kubelet's default 30 s killed a stop that took 32.7 s with
Bindings in flight. Checked on what ``kubectl kustomize`` renders for the base and every overlay.
"""

from __future__ import annotations

import inspect

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import IroScheduler
from tests.k8s.test_deploy import ROOT, _render

TARGETS = ["deploy", "deploy/base", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "deploy/overlays").iterdir()
                                            if (p / "kustomization.yaml").exists())]
KUBE_DEFAULT_GRACE_S = 30


def _stop_bound_s(args: list[str]) -> float:
    """How long the scheduler's clean stop may take before its watches stop, for these arguments."""
    write = Kube.write_timeout_s
    for a in args:
        if a.startswith("--api-timeout-s="):
            write = float(a.split("=", 1)[1])
    renew = inspect.signature(IroScheduler.__init__).parameters["renew_deadline"].default
    return write + 2 * (renew / 2)  # Bindings in flight, then the Lease's get and update


@pytest.mark.parametrize("target", TARGETS)
def test_the_scheduler_is_given_time_to_finish_its_bindings_and_release_the_lease(target: str) -> None:
    docs = _render(target)
    deps = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "iro-scheduler"]
    assert len(deps) == 1, target
    pod = deps[0]["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "scheduler"]
    grace = pod.get("terminationGracePeriodSeconds", KUBE_DEFAULT_GRACE_S)
    assert grace > _stop_bound_s(container.get("args", [])), (target, grace)
