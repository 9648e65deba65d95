"""kube-default rounds a problem's fractional numbers up, as kube's ``resource.Quantity`` does.

Upstream a request is a Quantity, read with ``MilliValue`` (cpu) / ``Value`` (memory bytes),
both rounding *up* (``0.1005`` cpu is 101m, 1.5 bytes is 2), and ``NodeInfo`` adds each pod's
rounded request. Before, kube-default took a problem file's fractional numbers to the *nearest*
millicore / byte (100.5m -> 100m, 1.4 bytes -> 1), summed placed pods unrounded, and a pod of
0.4m (rounded to 0) was taken as *missing* a request and scored as 100m. Each expected score is
worked out next to it: LeastAllocated ``(alloc - req) * 100 // alloc`` per resource, then
their mean (int64).
"""

from __future__ import annotations

import numpy as np

from iro_fed import ClusterState
from iro_fed.k8s.snapshot import NONZERO_EXACT, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import NONZERO_DEFAULTS
from solvers.kube_default import kube_units
from tests.k8s.helpers import fit_and_balance
from tests.solvers.test_kube_default_faithful import cluster, scores_of

MIB = 2**20


def cpu_fit(problem, w: int = 0, state: ClusterState | None = None) -> list[int]:
    return scores_of(problem, w, state)["NodeResourcesFit"]


def test_a_fractional_millicore_rounds_up_and_float_noise_does_not():
    nodes = [{"name": "n", "capacity": {"cpu": 1000}}]
    wls = [{"name": "half", "requests": {"cpu": 100.5}}, {"name": "noise", "requests": {"cpu": 100.0000000001}}]
    problem = cluster(nodes, wls, ["cpu"])
    # 100.5m -> 101m: (1000 - 101) * 100 // 1000 = 89 (90 when taken to the nearest, 100m).
    assert cpu_fit(problem, 0) == [89]
    # 100.0000000001m is 100m with float noise: (1000 - 100) * 100 // 1000 = 90, not 89.
    assert cpu_fit(problem, 1) == [90]


def test_a_fractional_byte_of_memory_rounds_up():
    # Node 1000m / 4 bytes; the pod 500m / 1.4 bytes -> 2 bytes: cpu 50, memory (4 - 2) * 100 // 4
    # = 50 -> 50 (62 when 1.4 bytes was taken as 1: memory 75).
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000, "memory": 4 / MIB}}],
                      [{"name": "p", "requests": {"cpu": 500, "memory": 1.4 / MIB}}])
    assert fit_and_balance(problem)[0] == [50]


def test_a_nodes_fractional_allocatable_and_usage_round_up_once():
    # n1: allocatable 9.2m is 10m; the pod of 1m: (10 - 1) * 100 // 10 = 90 (nearest: 9m -> 88).
    # n2: allocatable 10m, usage 4.2m is 5m: (10 - 6) * 100 // 10 = 40 (nearest: 4m -> 50).
    problem = cluster([{"name": "n1", "capacity": {"cpu": 9.2}},
                       {"name": "n2", "capacity": {"cpu": 10}, "allocated": {"cpu": 4.2}}],
                      [{"name": "p", "requests": {"cpu": 1}}], ["cpu"])
    assert cpu_fit(problem) == [90, 40]


def test_placed_pods_add_each_their_own_rounded_request():
    # Two pods of 0.4m placed on the node hold 1m each (NodeInfo adds each pod's MilliValue):
    # the third pod of 99m sees 2m + 99m of 1000m -> (1000 - 101) * 100 // 1000 = 89. Rounding
    # their 0.8m sum once gives 1m -> 90; before, each 0.4m was 0m, taken as missing: 100m each
    # -> (1000 - 1 - 200 - 99) -> 70.
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000}}],
                      [{"name": f"small{i}", "requests": {"cpu": 0.4}} for i in range(2)]
                      + [{"name": "next", "requests": {"cpu": 99}}], ["cpu"])
    state = ClusterState(problem)
    state.place(0, 0)
    state.place(1, 0)
    assert cpu_fit(problem, 2, state) == [89]
    state.remove(1)  # a departure takes its 1m away again: 1m + 99m -> 90
    assert cpu_fit(problem, 2, state) == [90]


def test_a_fraction_of_a_millicore_is_a_request_not_a_missing_one():
    # Without nonzero_requests a zero demand is taken as a missing request (100m / 200 MiB). A pod
    # of 0.4m / 1e-7 MiB (0.105 bytes) requests 1m / 1 byte: it is not best-effort. Before, both
    # rounded to 0 and the pod scored as best-effort: fit on 100m / 200 MiB, cpu 90, memory
    # (1024 - 200) * 100 // 1024 = 80 -> 85, and BalancedAllocation skipped (0).
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000, "memory": 1024}}],
                      [{"name": "p", "requests": {"cpu": 0.4, "memory": 1e-7}}])
    # Fit: cpu (1000 - 1) * 100 // 1000 = 99, memory (2**30 - 1) * 100 // 2**30 = 99 -> 99.
    # Balance: f_cpu 0.001, f_mem 9.3e-10 -> (1 - 0.0005) * 100 = 99.95 -> 99.
    assert fit_and_balance(problem) == ([99], [99])


def test_the_snapshot_and_the_same_numbers_in_a_problem_file_score_alike():
    # The snapshot reads quantities ("0.1005" cpu -> 101m, "1.4" bytes -> 2 bytes); a problem
    # file gives the same amounts as numbers (100.5 millicores, 1.4 bytes in MiB). Both score 50
    # on memory; cpu (1000 - 101) * 100 // 1000 = 89 -> (89 + 50) // 2 = 69. Before, the file's
    # numbers were taken to the nearest unit: cpu 90, memory 75 -> 82.
    snap = build_snapshot([make_node("n", cpu="1", memory="4")], [], [make_pod("p", cpu="0.1005", memory="1.4")]).problem
    assert snap.demand.tolist() == [[101.0, 2 / MIB]]
    problem = cluster([{"name": "n", "capacity": {"cpu": 1000, "memory": 4 / MIB}}],
                      [{"name": "p", "requests": {"cpu": 100.5, "memory": 1.4 / MIB}}])
    assert fit_and_balance(problem) == fit_and_balance(snap)
    assert fit_and_balance(problem)[0] == [69]


def test_kube_units_rounds_up_past_float_noise_only():
    assert kube_units(np.array([100.5, 100.0000000001, 0.1 + 0.2, 0.0, 1e6 + 1e-7]), 1).tolist() == [101, 100, 1, 0, 1000000]
    assert kube_units(1.5 / MIB, MIB).tolist() == 2
    # A difference rounds with the operands' noise: (0.1 + 0.2) - 0.3 is 5.6e-17, not 1m.
    assert kube_units((0.1 + 0.2) - 0.3, 1, magnitude=0.1 + 0.2).tolist() == 0
    # Large whole amounts stay whole: 1 TiB of memory is 2**40 bytes, not one byte less (the
    # relative tolerance alone spans more than a byte there).
    assert kube_units(np.array([1048576.0, 3 * 1048576.0]), MIB).tolist() == [2**40, 3 * 2**40]
    assert kube_units(1e12 + 0.5, 1).tolist() == 10**12 + 1


def test_one_copy_of_the_non_zero_defaults():
    # The snapshot fills a missing container request with model.NONZERO_DEFAULTS (exact: 100m,
    # 200 MiB in bytes), and kube-default's fallback for a zero demand uses the same numbers:
    # a best-effort pod from the cluster and the same pod in a problem file score alike.
    assert NONZERO_DEFAULTS == {"cpu": 100.0, "memory": 200.0}
    assert {r: int(v) for r, v in NONZERO_EXACT.items()} == {"cpu": 100, "memory": 200 * MIB}
    snap = build_snapshot([make_node("n", cpu="2", memory="4Gi")], [], [make_pod("p", cpu=None, memory=None)]).problem
    assert snap.nonzero_demand.tolist() == [[NONZERO_DEFAULTS["cpu"], NONZERO_DEFAULTS["memory"]]]
    problem = cluster([{"name": "n", "capacity": {"cpu": 2000, "memory": 4096}}], [{"name": "p", "requests": {}}])
    assert problem.nonzero_demand is None
    # cpu (2000 - 100) * 100 // 2000 = 95, memory (4096 - 200) * 100 // 4096 = 95; balance skipped.
    assert fit_and_balance(problem) == fit_and_balance(snap) == ([95], [0])
