"""Library-API audit j14: ClusterState index checks, Problem refusals, evaluate of sequences,
placement card rules on write, read-only arrays after pickle / deepcopy."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest

from iro_fed import ClusterState, evaluate, placement_from_dict
from iro_fed.model import Domain, Node, Problem, Taint, Toleration, Workload, default_power
from iro_fed.placement import Placement


def _args(**changes: object) -> dict:
    doms = [Domain("edge1", "edge", carbon_intensity=300.0, price_per_hour={"cpu": 0.05, "gpu": 1.0}, pue=1.2),
            Domain("zoneA", "zone", carbon_intensity=100.0, price_per_hour={"cpu": 0.03, "gpu": 0.8})]
    nodes = [Node("e1", "edge1", taints=(Taint("edge", "true", "NoSchedule"),)), Node("e2", "edge1"),
             Node("z1", "zoneA", gpu_model="A100"), Node("z2", "zoneA")]
    wls = [Workload("w0", user_region="r1", tolerations=(Toleration("edge", "Equal", "true"),)),
           Workload("w1", user_region="r1"), Workload("w2", klass="batch"), Workload("w3")]
    cap = np.array([[4000, 8192], [4000, 8192], [16000, 65536], [8000, 16384]], dtype=float)
    gpu_count = np.array([0, 0, 2, 0])
    power = [default_power(c[0], g) for c, g in zip(cap, gpu_count, strict=True)]
    args = dict(resources=["cpu", "memory"], domains=doms, nodes=nodes, workloads=wls, regions=["r1"],
                latency_ms=np.array([[2.0, 30.0]]), capacity=cap, allocated=np.zeros_like(cap),
                demand=np.array([[500, 512], [1000, 1024], [2000, 4096], [1000, 2048]], dtype=float),
                gpu_free=np.array([[-1, -1], [-1, -1], [1000, 1000], [-1, -1]]), gpu_count=gpu_count,
                wl_gpu_count=np.array([0, 0, 1, 0]), wl_gpu_milli=np.array([0, 0, 500, 0]),
                power_idle_w=np.array([p[0] for p in power]), power_peak_w=np.array([p[1] for p in power]))
    args.update(changes)
    return args


@pytest.fixture
def problem() -> Problem:
    return Problem(**_args())


# --- 1. ClusterState.place / remove indices ---------------------------------------------------


@pytest.mark.parametrize(("w", "n", "exc", "name"), [
    (1, -1, IndexError, "n"), (1, 4, IndexError, "n"), (-1, 0, IndexError, "w"), (99, 0, IndexError, "w"),
    (1, 0.5, TypeError, "n"), ("w1", 0, TypeError, "w"), (True, 0, TypeError, "w"),
])
def test_place_refuses_bad_indices_without_changing_the_state(problem: Problem, w, n, exc, name) -> None:
    st = ClusterState(problem)
    before = (st.allocated.copy(), st.pods_on_node.copy(), st.on.copy(), st.assignment.copy())
    with pytest.raises(exc, match=rf"^{name}: "):
        st.place(w, n)
    after = (st.allocated, st.pods_on_node, st.on, st.assignment)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_place_range_message_names_the_valid_range(problem: Problem) -> None:
    with pytest.raises(IndexError, match=r"n: node index -1 is out of range 0\.\.3"):
        ClusterState(problem).place(1, -1)


def test_place_and_remove_take_numpy_ints(problem: Problem) -> None:
    st = ClusterState(problem)
    st.place(np.int64(1), np.int32(3))
    assert st.assignment.tolist() == [-1, 3, -1, -1] and st.pods_on_node.tolist() == [0, 0, 0, 1]
    st.remove(np.int64(1))
    assert st.assignment.tolist() == [-1, -1, -1, -1]


@pytest.mark.parametrize(("w", "exc"), [(-1, IndexError), (4, IndexError), ("w3", TypeError)])
def test_remove_refuses_bad_indices(problem: Problem, w, exc) -> None:
    st = ClusterState(problem)
    st.place(3, 1)  # the last workload: remove(-1) took it off
    with pytest.raises(exc, match=r"^w: "):
        st.remove(w)
    assert st.assignment.tolist() == [-1, -1, -1, 1]


# --- 2 / 3 / 5. Problem built directly refuses what the loaders refuse ------------------------


def _refused(match: str, **changes: object) -> None:
    with pytest.raises(ValueError, match=match):
        Problem(**_args(**changes))


def test_gpu_resource_refused() -> None:
    _refused(r"resources\[2\]: 'gpu' is not an additive resource", resources=["cpu", "memory", "gpu"],
             capacity=np.ones((4, 3)), allocated=np.zeros((4, 3)), demand=np.ones((4, 3)))


def test_duplicate_workload_names_refused(problem: Problem) -> None:
    wls = list(problem.workloads)
    wls[3] = Workload("w1")
    _refused(r"workloads\[3\]: duplicate workload name 'w1' \(also workloads\[1\]\)", workloads=wls)


def test_duplicate_regions_refused() -> None:
    _refused(r"regions\[1\]: duplicate user region 'r1' \(also regions\[0\]\)", regions=["r1", "r1"],
             latency_ms=np.ones((2, 2)))


def test_unknown_taint_effect_refused(problem: Problem) -> None:
    nodes = list(problem.nodes)
    nodes[1] = Node("e2", "edge1", taints=(Taint("k", "v", "Bogus"),))
    _refused(r"nodes\[1\]\.taints\[0\]\.effect \(node 'e2'\): must be one of .*'Bogus'", nodes=nodes)


def test_unknown_toleration_operator_and_effect_refused(problem: Problem) -> None:
    wls = list(problem.workloads)
    wls[1] = Workload("w1", tolerations=(Toleration("edge", "Equalz", "true"),))
    _refused(r"workload 'w1': tolerations\[0\]\.operator .*'Equalz'", workloads=wls)
    wls[1] = Workload("w1", tolerations=(Toleration("edge", "Equal", "true", "Sometimes"),))
    _refused(r"workload 'w1': tolerations\[0\]\.effect .*'Sometimes'", workloads=wls)


def test_fractional_gpu_numbers_refused() -> None:
    _refused(r"gpu_count\[2\]: must be a whole number, got 2\.5", gpu_count=np.array([0, 0, 2.5, 0]))
    _refused(r"wl_gpu_milli\[2\]: must be a whole number, got 500\.7", wl_gpu_milli=np.array([0, 0, 500.7, 0]))
    # Whole floats are the same numbers: still accepted.
    p = Problem(**_args(gpu_count=np.array([0.0, 0.0, 2.0, 0.0])))
    assert p.gpu_count.tolist() == [0, 0, 2, 0]


def test_array_errors_name_the_field() -> None:
    _refused(r"^demand: array has shape \(4, 3\), expected \(4, 2\)", demand=np.ones((4, 3)))
    _refused(r"^capacity: expected numbers", capacity="abc")
    _refused(r"^latency_ms: array has shape", latency_ms=np.ones((2, 2)))


# --- 4. evaluate of a list / tuple --------------------------------------------------------------


def test_evaluate_takes_sequences(problem: Problem) -> None:
    ref = evaluate(problem, np.array([0, 1, 2, -1]))
    assert evaluate(problem, [0, 1, 2, -1]) == ref
    assert evaluate(problem, (0, 1, 2, -1)) == ref


@pytest.mark.parametrize("bad", [None, 3, "0123"])
def test_evaluate_refuses_non_sequences(problem: Problem, bad: object) -> None:
    with pytest.raises(TypeError, match=r"^placement: "):
        evaluate(problem, bad)


# --- 6. GPU cards: what the reader refuses is not written / recorded ----------------------------


def test_place_refuses_cards_for_a_pod_without_gpus(problem: Problem) -> None:
    st = ClusterState(problem)
    with pytest.raises(ValueError, match="cards \\[0\\] given, but it asks for no GPU"):
        st.place(1, 2, [0])
    assert st.gpu_cards == {} and st.assignment[1] == -1 and st.gpu_free[2].tolist() == [1000, 1000]
    st.place(1, 2, [])  # no cards for a pod without GPUs: fine
    assert st.gpu_cards == {}


@pytest.mark.parametrize(("cards", "match"), [
    ({1: (0,)}, r"gpu_assignments\.w1\[0\]: 0 is not a card of node 'e2'"),
    ({2: (5,)}, r"gpu_assignments\.w2\[0\]: 5 is not a card of node 'z1' \(cards 0\.\.1\)"),
    ({3: (0,)}, r"gpu_assignments\.w3: the workload is not placed"),
])
def test_to_dict_refuses_cards_the_reader_refuses(problem: Problem, cards: dict, match: str) -> None:
    pl = Placement(assignment=np.array([0, 1, 2, -1]), gpu_cards={2: (0,)})
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(pl, gpu_cards=cards).to_dict(problem)


def test_to_dict_numpy_cards_round_trip(problem: Problem) -> None:
    pl = Placement(assignment=np.array([0, 1, 2, -1]), gpu_cards={2: (np.int64(1),)})
    doc = pl.to_dict(problem)
    assert doc["gpu_assignments"] == {"w2": [1]}
    assert placement_from_dict(problem, doc).gpu_cards == {2: (1,)}


# --- 7. read-only arrays after pickle / deepcopy ------------------------------------------------


@pytest.mark.parametrize("clone", [lambda p: pickle.loads(pickle.dumps(p)), copy.deepcopy])
def test_arrays_stay_read_only_after_pickle_and_deepcopy(problem: Problem, clone) -> None:
    assert not problem.util_capacity.flags.writeable  # a cached array too
    other = clone(problem)
    arrays = {k: v for k, v in vars(other).items() if isinstance(v, np.ndarray)}
    assert {"capacity", "demand", "gpu_free", "util_capacity"} <= set(arrays)
    assert not any(a.flags.writeable for a in arrays.values())
    with pytest.raises(ValueError):
        other.capacity[0, 0] = 1.0
    assert np.array_equal(other.capacity, problem.capacity)
    assert evaluate(other, [0, 1, 2, -1]) == evaluate(problem, [0, 1, 2, -1])
