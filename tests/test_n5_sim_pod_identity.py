"""The simulator's pods carry a controller (a service's replicas one ReplicaSet, batch jobs their
Job) and the engine gives kube-default the system default spreading (``Problem.pod_scoring``) that
kube-scheduler applies to a ReplicaSet's pods; solvers that do not read pod scoring get none."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.engine import SimConfigError
from iro_fed.sim.model import NodePool, PodSpec, Service
from tests.sim.helpers import tiny_scenario

CFG = SimConfig(power_down=False, consolidate_every=0)


def four_replicas(cpu: float = 100, memory: float = 128, node_cpu: float = 64000, node_mem: float = 262144):
    """One service of 4 replicas on 2 identical empty nodes of one zone. The nodes are large, so
    that LeastAllocated and BalancedAllocation score both nodes alike at every replica (ties: kube
    picks at random): only the spreading tells them apart."""
    svc = Service("web", "users", cpu, memory, mu=100.0, service_ms=10.0, sla_ms=500.0, traffic=np.full(3, 1.0),
                  min_replicas=4, max_replicas=4)
    sc = tiny_scenario(steps=3, services=[svc], own_nodes=2, cloud_nodes=0)
    sc.pools = [NodePool("own", "zone", 2, node_cpu, node_mem)]
    return sc


def per_node(sim: Simulator) -> list[int]:
    where = sim.state.assignment[sim.state.assignment >= 0]
    return np.bincount(where, minlength=len(sim.nodes)).tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_kube_default_spreads_a_services_replicas(seed):
    # HEAD: no pod scoring in the simulator, every node ties, the seeded draw put 3 and 1 (seeds 0-3).
    sim = Simulator(four_replicas(), solvers.make("kube-default", seed=seed), CFG, seed=seed)
    sim.run()
    assert per_node(sim) == [2, 2]


def test_the_spreading_counts_the_replicas_already_running():
    # Two replicas run on own-000 from step 0 (a node selector keeps them there); the other two,
    # a step later, go to own-001 (HEAD: a tie, own-000 for this seed).
    sc = four_replicas()
    pinned = dataclasses.replace(sc.services[0], name="web", min_replicas=2, max_replicas=2,
                                 node_selector={"iro.example/pool": "own"})
    sc.services = [pinned]
    sc.pools = [NodePool("own", "zone", 1, 64000, 262144), NodePool("more", "zone", 1, 64000, 262144)]
    late = [PodSpec(f"web-late-{i}", "online", 100, 128, 1, controller="ReplicaSet/web") for i in range(2)]
    sc.pods = late
    sim = Simulator(sc, solvers.make("kube-default", seed=2), CFG, seed=2)
    sim.run()
    assert per_node(sim) == [2, 2]


def test_a_composite_with_kube_default_fallback_gets_pod_scoring_and_greedy_none():
    sc = four_replicas()
    assert Simulator(sc, solvers.make("fallback", primary="best-fit", fallback="kube-default"), CFG).spread_group is not None
    assert Simulator(sc, solvers.make("greedy-objective"), CFG).spread_group is None


class Spy:
    """Records the pod scoring of every problem the simulator hands its solver."""

    def __init__(self, inner):
        self.inner, self.name, self.seen = inner, inner.name, []

    def solve(self, problem):
        self.seen.append(problem.pod_scoring)
        return self.inner.solve(problem)


def test_greedy_objective_is_unaffected():
    # The controllers change nothing for a solver that does not read pod scoring: its problems
    # carry none, and the run is the one of the same pods without controllers.
    sc = four_replicas()
    spy = Spy(solvers.make("greedy-objective"))
    Simulator(sc, spy, CFG, seed=1).run()
    assert spy.seen and all(ps is None for ps in spy.seen)
    runs = []
    for controller in ("ReplicaSet/web", ""):
        pods = [PodSpec(f"web-{i}", "online", 100, 128, 0, controller=controller) for i in range(4)]
        sim = Simulator(dataclasses.replace(sc, services=[], pods=pods), solvers.make("greedy-objective"), CFG, seed=1)
        runs.append((sim.run().totals, sim.state.assignment.tolist()))
    assert runs[0] == runs[1]
    # kube-default on the same pods: spread by their ReplicaSet, not without one (a tie: 3 and 1).
    spread = []
    for controller in ("ReplicaSet/web", ""):
        pods = [PodSpec(f"web-{i}", "online", 100, 128, 0, controller=controller) for i in range(4)]
        sim = Simulator(dataclasses.replace(sc, services=[], pods=pods), solvers.make("kube-default", seed=0), CFG, seed=0)
        sim.run()
        spread.append(per_node(sim))
    assert spread[0] == [2, 2] and spread[1] != [2, 2]


def test_the_same_seed_gives_the_same_run_twice():
    runs = []
    for _ in range(2):
        sim = Simulator(four_replicas(cpu=500, memory=1024, node_cpu=4000, node_mem=8192),
                        solvers.make("kube-default", seed=7), CFG, seed=7)
        runs.append((sim.run().totals, sim.state.assignment.tolist()))
    assert runs[0] == runs[1]


def test_pod_scoring_of_a_snapshot_follows_the_snapshot_rules():
    # ReplicaSet pods: the system default terms (hostname maxSkew 3, zone maxSkew 5) of their
    # group; a Job's pod and a bare pod: none (kube's DefaultSelector spreads no Job).
    pods = [PodSpec("rs-a", "online", 100, 128, 0, controller="ReplicaSet/shop"),
            PodSpec("rs-b", "online", 100, 128, 0, controller="ReplicaSet/shop"),
            PodSpec("job", "batch", 100, 128, 0, duration=5, controller="Job/job"),
            PodSpec("bare", "online", 100, 128, 0)]
    sc = tiny_scenario(steps=2, pods=pods, own_nodes=2, cloud_nodes=0)
    sim = Simulator(sc, solvers.make("kube-default"), CFG)
    sim._reset_state()
    order = np.arange(sim.P)
    sub, avail = sim._snapshot(0, order)
    ps = sub.pod_scoring
    assert ps is not None and ps.topology_keys == ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    names = [sim.pod_rows[i]["name"] for i in order]
    terms = {n: [(t.kind, ps.topology_keys[t.topology], t.value) for t in ps.terms[i]] for i, n in enumerate(names)}
    want = [("default_spread", "kubernetes.io/hostname", 3), ("default_spread", "topology.kubernetes.io/zone", 5)]
    assert terms == {"rs-a": want, "rs-b": want, "job": [], "bare": []}
    assert ps.members.sum() == 2 and ps.group_counts.sum() == 0
    assert ps.topology[0].tolist() == [0, 1] and ps.topology[1].tolist() == [0, 0]


def test_a_malformed_controller_is_refused_naming_the_pod_and_field():
    sc = tiny_scenario(steps=2, pods=[PodSpec("x", "online", 100, 128, 0, controller="ReplicaSet")], cloud_nodes=0)
    with pytest.raises(SimConfigError, match=r"pod 'x': field 'controller' must be KIND/NAME"):
        Simulator(sc, solvers.make("first-fit"), CFG)


def test_scenario_builders_give_their_pods_a_controller():
    from tests.sim.helpers import needs_data

    if needs_data.args[0]:
        pytest.skip("shared data not found")
    from iro_fed.sim.scenarios import build_scenario

    bank = build_scenario("bank", seed=1, hours=24)
    assert bank.pods and all(p.controller == f"Job/{p.name}" for p in bank.pods)
    assert bank.services[0].controller == f"ReplicaSet/{bank.services[0].name}"
    promo = build_scenario("promo-surge", seed=1, hours=12)
    assert promo.pods and all(p.controller == "ReplicaSet/" + p.name.rsplit("-", 1)[0] for p in promo.pods)
