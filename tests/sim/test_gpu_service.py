"""A Service whose replicas ask for GPUs (an inference service) in the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.model import Domain
from iro_fed.sim.engine import SimConfig, Simulator
from iro_fed.sim.model import NodePool, Scenario, Service

STEPS = 30


def gpu_scenario(gpu_count: int = 1, gpu_milli: int = 500, gpu_models: tuple[str, ...] = ()) -> Scenario:
    """Two 4-card A10 nodes and three CPU nodes; an inference service whose traffic climbs to 14
    replicas (more than the CPU nodes could hold as well) and a CPU-only web service beside it."""
    traffic = np.concatenate([np.linspace(10.0, 140.0, STEPS // 2), np.full(STEPS - STEPS // 2, 140.0)])
    inference = Service("infer", "users", 2000, 4096, mu=10.0, service_ms=20.0, sla_ms=200.0, traffic=traffic,
                        min_replicas=1, max_replicas=20, target_rho=1.0, gpu_count=gpu_count, gpu_milli=gpu_milli,
                        gpu_models=gpu_models)
    web = Service("web", "users", 500, 512, mu=50.0, service_ms=10.0, sla_ms=100.0, traffic=np.full(STEPS, 100.0),
                  min_replicas=2, max_replicas=10)
    return Scenario(
        name="gpu-service", description="test",
        domains=[Domain("zone", "zone", "", 0.0, {"cpu": 0.02, "gpu": 1.0}, 1.2)], regions=["users"],
        latency_ms=np.array([[5.0]]),
        pools=[NodePool("gpu", "zone", 2, 32000, 131072, gpus=4, gpu_model="A10", power_idle_w=300, power_peak_w=1400),
               NodePool("cpu", "zone", 3, 32000, 131072, power_idle_w=80, power_peak_w=200)],
        services=[inference, web], pods=[], carbon={"zone": np.full(STEPS, 200.0)}, history=0, steps=STEPS,
    )


def run_and_watch(sc: Scenario, solver: str) -> tuple[Simulator, list[dict]]:
    """Runs ``sc``; per step each running replica's service, node pool and cards."""
    sim = Simulator(sc, solvers.make(solver), SimConfig(power_down=False))
    seen: list[dict] = []

    def watch(step: int, total: int) -> None:
        running = np.flatnonzero(sim.state.assignment >= 0)
        seen.append({int(p): (sc.services[sim.service[p]].name, sim.nodes[sim.state.assignment[p]].name,
                              tuple(sim.state.gpu_cards.get(int(p), ()))) for p in running})

    sim.run(progress=watch)
    return sim, seen


@pytest.mark.parametrize("solver", ["best-fit", "greedy-objective", "kube-default"])
def test_inference_replicas_take_gpu_shares_on_gpu_nodes_only(solver):
    sc = gpu_scenario()
    sim, seen = run_and_watch(sc, solver)
    most = 0
    for step in seen:
        replicas = [(node, cards) for svc, node, cards in step.values() if svc == "infer"]
        most = max(most, len(replicas))
        for node, cards in replicas:
            assert node.startswith("gpu") and len(cards) == 1, (node, cards)
        # Half a card each: no card carries more than two replicas.
        per_card: dict[tuple[str, int], int] = {}
        for node, cards in replicas:
            per_card[(node, cards[0])] = per_card.get((node, cards[0]), 0) + 1
        assert max(per_card.values(), default=0) <= 2
        assert all(not cards for svc, _, cards in step.values() if svc == "web")
    assert most >= 12  # the autoscaler's replicas were placed, sharing cards
    assert (sim.wl_gpu_milli[sim.service == 0] == 500).all() and (sim.wl_gpu_count[sim.service == 1] == 0).all()


def test_whole_card_replicas_are_bounded_by_the_cards():
    sc = gpu_scenario(gpu_count=2, gpu_milli=1000, gpu_models=("A10",))
    _, seen = run_and_watch(sc, "best-fit")
    for step in seen:
        cards = [c for svc, node, cs in step.values() if svc == "infer" for c in ((node, x) for x in cs)]
        assert len(cards) == len(set(cards)) <= 8  # 2 nodes x 4 cards, none shared
        assert all(len(cs) == 2 for svc, _, cs in step.values() if svc == "infer")
    assert max(sum(svc == "infer" for svc, _, _ in step.values()) for step in seen) == 4


def test_a_replica_without_a_valid_gpu_shape_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"infer-r0.*GPU share must be in 1\.\.1000"):
        Simulator(gpu_scenario(gpu_count=1, gpu_milli=0), solvers.make("best-fit"), SimConfig())
