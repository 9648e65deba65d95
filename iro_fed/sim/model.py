"""What a simulated scenario is made of: node pools, online services, pods, signals.

A scenario builder (``iro_fed.sim.scenarios``) returns a :class:`Scenario`; the engine
(:mod:`iro_fed.sim.engine`) expands services into replica pods and runs it. Times are in
simulator steps (``step_s`` seconds each, 60 by default) from the scenario's start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from iro_fed.model import Domain, Taint, Toleration, Weights


@dataclass(frozen=True)
class NodePool:
    """``count`` identical nodes in one domain.

    ``elastic`` pools are cloud autoscaling groups: their nodes start deprovisioned (except
    ``min_on``) and are provisioned on demand after ``boot_steps``; every pool's nodes power
    on after ``boot_steps`` when the engine wakes them from power-down.
    """

    name: str
    domain: str
    count: int
    cpu: float
    memory: float
    gpus: int = 0
    gpu_model: str = ""
    power_idle_w: float = 0.0
    power_peak_w: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    elastic: bool = False
    boot_steps: int = 3
    min_on: int = 0


@dataclass(frozen=True)
class Service:
    """An online service: request traffic from one user region served by replica pods.

    ``traffic[t]`` is requests per second at step t. A replica serves ``mu`` requests per second
    at ``service_ms`` per request when idle; the engine's horizontal autoscaler keeps
    ``ceil(traffic / (mu * target_rho))`` replicas within ``[min_replicas, max_replicas]``.
    Its replicas are the pods of one Deployment's ReplicaSet named after the service
    (:attr:`controller`), as kube-scheduler's system default spreading sees them. Each replica
    asks ``gpu_count`` cards (``gpu_milli`` of one card when ``gpu_count`` is 1 and it is below
    1000), of ``gpu_models`` when given, as a :class:`PodSpec` does: a GPU inference service.
    """

    name: str
    user_region: str
    cpu: float
    memory: float
    mu: float
    service_ms: float
    sla_ms: float
    traffic: np.ndarray
    min_replicas: int = 1
    max_replicas: int = 100
    target_rho: float = 0.6
    allowed_domains: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    priority: int = 100
    max_latency_ms: float | None = None
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()

    @property
    def controller(self) -> str:
        """The controller ownerReference of its replicas, ``KIND/NAME``."""
        return f"ReplicaSet/{self.name}"


@dataclass(frozen=True)
class PodSpec:
    """A pod that is not a service replica: a batch job (``duration`` steps of work, optional
    ``deadline`` step) or a long-running pod that leaves at ``departure`` (-1: never).

    ``controller`` is its controller ownerReference as ``KIND/NAME`` (``Job/nightly-007``,
    ``ReplicaSet/checkout``; "" for a bare pod): the pods of one ReplicaSet, StatefulSet or
    ReplicationController are spread by kube-scheduler's system default constraints (the
    simulator gives them to ``kube-default``), a Job's pods are not.
    """

    name: str
    klass: str
    cpu: float
    memory: float
    arrival: int
    departure: int = -1
    duration: int = -1
    deadline: int = -1
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    user_region: str = ""
    allowed_domains: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    max_latency_ms: float | None = None
    controller: str = ""


@dataclass
class Scenario:
    """Everything a run needs besides the solver and the engine settings.

    ``carbon[domain]`` holds the realized intensity (gCO2/kWh) for steps ``-history .. steps-1``
    (index ``history + t`` is step t), so forecasts can look back a day before the start.
    """

    name: str
    description: str
    domains: list[Domain]
    regions: list[str]
    latency_ms: np.ndarray  # [regions, domains]
    pools: list[NodePool]
    services: list[Service]
    pods: list[PodSpec]
    carbon: dict[str, np.ndarray]
    history: int
    steps: int
    step_s: float = 60.0
    start_time: float = 0.0  # epoch seconds of step 0 (for labels)
    weights: Weights = field(default_factory=Weights)
    peak_windows: list[tuple[int, int]] = field(default_factory=list)
    resources: tuple[str, ...] = ("cpu", "memory")
    params: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    #: Engine settings this scenario is meant to run with (``SimConfig`` fields); ``--set`` wins.
    engine_defaults: dict = field(default_factory=dict)

    def carbon_now(self, t: int) -> np.ndarray:
        """Intensity per domain (scenario order) at step t."""
        return np.array([self.carbon[d.name][self.history + t] for d in self.domains], dtype=np.float64)

    def in_peak(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t)
        out = np.zeros(t.shape, dtype=bool)
        for lo, hi in self.peak_windows:
            out |= (t >= lo) & (t < hi)
        return out
