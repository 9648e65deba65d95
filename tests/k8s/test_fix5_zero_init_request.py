"""An explicit zero request on an init container (with no app container asking for it) is read as
zero, as kube's PodRequests reads it (it crashed the shared pod reader: int 0 kept by max())."""

from __future__ import annotations

import pytest

from iro_fed.k8s.snapshot import pod_demand


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_an_init_containers_zero_request_is_zero(resource: str) -> None:
    pod = {"metadata": {"name": "x"},
           "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "c0", "resources": {"requests": {resource: "0"}}}]}}
    demand = pod_demand(pod, ["cpu", "memory"])
    assert demand.requests == {"cpu": 0.0, "memory": 0.0}
