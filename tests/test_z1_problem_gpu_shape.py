"""``Problem`` built directly refuses the GPU shapes the loaders refuse: count 1 outside 1..1000
milli (0 was a share to the filters and a whole card to cpsat/qubo) and count k > 1 with other
than 1000 milli, with a ValueError naming ``wl_gpu_milli`` and the workload."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed import problem_from_dict
from iro_fed.problem_io import ProblemValidationError
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import PodSpec
from tests.sim.helpers import tiny_scenario


def doc(count: int = 1, milli: int = 500) -> dict:
    return {
        "resources": ["cpu"], "domains": [{"name": "d"}],
        "nodes": [{"name": "g", "domain": "d", "capacity": {"cpu": 10}, "gpus": 4}],
        "workloads": [{"name": "cpu-only", "requests": {"cpu": 1}},
                      {"name": "trainer", "requests": {"cpu": 1}, "gpu": {"count": count, "milli": milli}}],
    }


BASE = problem_from_dict(doc())


def direct(count: int, milli: int):
    return BASE.replace(wl_gpu_count=np.array([0, count], dtype=np.int32), wl_gpu_milli=np.array([0, milli], dtype=np.int32))


@pytest.mark.parametrize(("count", "milli", "rule"), [
    (1, 0, "a GPU share must be in 1..1000 milli of one card, got 0"),
    (1, -5, "a GPU share must be in 1..1000 milli of one card, got -5"),
    (1, 1001, "a GPU share must be in 1..1000 milli of one card, got 1001"),
    (2, 500, "a pod asking for 2 GPUs takes whole cards: it must be 1000, got 500"),
    (3, 0, "a pod asking for 3 GPUs takes whole cards: it must be 1000, got 0"),
])
def test_a_directly_built_problem_refuses_what_the_loader_refuses(count, milli, rule):
    with pytest.raises(ValueError) as err:
        direct(count, milli)
    assert str(err.value) == f"wl_gpu_milli[1] (workload 'trainer', wl_gpu_count {count}): {rule}"


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("milli", [-1, 0, 1, 500, 999, 1000, 1001])
def test_direct_and_loaded_problems_accept_the_same_shapes(count, milli):
    try:
        loaded = problem_from_dict(doc(count, milli))
    except ProblemValidationError:
        loaded = None
    try:
        built = direct(count, milli)
    except ValueError:
        built = None
    assert (loaded is None) == (built is None)
    if loaded is not None:
        assert loaded.wl_gpu_milli.tolist() == built.wl_gpu_milli.tolist()


def test_the_shapes_the_loader_writes_are_accepted():
    for count, milli in ((1, 1), (1, 250), (1, 1000), (2, 1000), (4, 1000)):
        p = direct(count, milli)
        assert p.wl_gpu_count.tolist() == [0, count] and p.wl_gpu_milli.tolist() == [0, milli]


def test_a_simulated_pod_of_one_card_and_no_milli_is_refused_up_front():
    # PodSpec's gpu_milli defaults to 0: gpu_count=1 alone used to run as a share of nothing.
    sc = tiny_scenario(steps=2, pods=[PodSpec("share", "online", 100, 128, 0, gpu_count=1)])
    with pytest.raises(ValueError, match=r"wl_gpu_milli\[0\] \(workload 'share', wl_gpu_count 1\)"):
        Simulator(sc, None, SimConfig())
