"""The power model reads the CPU column of the utilization usage: a ``feasibility_only`` resource
listed before ``cpu`` is not in that layout, and evaluate read memory over CPU capacity instead
(151.2 W for a node whose 4 cores are all requested, not its 300 W peak)."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed import problem_from_dict
from iro_fed.objective import evaluate


def _problem(first: str) -> dict:
    resources = ["example.com/fpga", "cpu", "memory"] if first == "fpga" else ["cpu", "memory", "example.com/fpga"]
    return {"resources": resources, "feasibility_only": ["example.com/fpga"],
            "domains": [{"name": "d", "kind": "zone", "carbon_intensity": 100.0}],
            "nodes": [{"name": "n", "domain": "d", "capacity": {"example.com/fpga": 4, "cpu": 4000, "memory": 8192},
                       "power_idle_w": 100, "power_peak_w": 300}],
            "workloads": [{"name": "w", "requests": {"cpu": 4000, "memory": 1024, "example.com/fpga": 1}}]}


@pytest.mark.parametrize("first", ["fpga", "cpu"])
def test_power_follows_cpu_wherever_a_feasibility_only_resource_is_listed(first):
    b = evaluate(problem_from_dict(_problem(first)), np.array([0]))
    assert b.power_w == pytest.approx(300.0)  # all 4 cores requested: peak
    assert b.carbon_g_per_hour == pytest.approx(300.0 * 100.0 / 1000.0)
