"""A hand-made scenario small enough to reason about in tests."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.model import Domain
from iro_fed.sim.model import NodePool, PodSpec, Scenario, Service
from iro_fed.sim.signals import data_dir

#: The real scenarios read ../shared/data (carbon, latency, openb); skip where a checkout lacks it.
needs_data = pytest.mark.skipif(
    not ((data_dir() / "carbon").is_dir() and (data_dir() / "latency").is_dir()),
    reason=f"shared data not found under {data_dir()} (set IRO_DATA_DIR)",
)


def tiny_scenario(
    steps: int = 60,
    pods: list[PodSpec] | None = None,
    services: list[Service] | None = None,
    carbon: dict[str, np.ndarray] | None = None,
    own_nodes: int = 2,
    cloud_nodes: int = 2,
    boot_steps: int = 3,
    history: int = 0,
) -> Scenario:
    """One own zone (``own_nodes`` x 4 cores / 8 GiB) and one elastic cloud domain."""
    domains = [
        Domain("zone", "zone", "", 0.0, {"cpu": 0.02, "memory": 0.002}, 1.2),
        Domain("cloud", "cloud", "", 0.0, {"cpu": 0.04, "memory": 0.004}, 1.1),
    ]
    if carbon is None:
        carbon = {"zone": np.full(history + steps, 300.0), "cloud": np.full(history + steps, 100.0)}
    pools = [
        NodePool("own", "zone", own_nodes, 4000, 8192, power_idle_w=40, power_peak_w=100),
        NodePool("burst", "cloud", cloud_nodes, 4000, 8192, power_idle_w=30, power_peak_w=80, elastic=True,
                 boot_steps=boot_steps),
    ]
    return Scenario(
        name="tiny", description="test", domains=domains, regions=["users"], latency_ms=np.array([[5.0, 20.0]]),
        pools=pools, services=list(services or []), pods=list(pods or []), carbon=carbon, history=history, steps=steps,
        step_s=60.0, peak_windows=[(10, 20)],
    )


def random_pods(seed: int, steps: int, n: int, batch: bool = True) -> list[PodSpec]:
    """``n`` seeded pods arriving in the first ``steps - 5`` steps, 500 to 3000 m CPU and twice that
    MiB: each a batch job with a deadline or an online pod with a departure (a coin per pod), or
    with ``batch=False`` online pods only (no coin drawn: the same stream as without the coin)."""
    rng = np.random.default_rng(seed)
    pods = []
    for i in range(n):
        arrival = int(rng.integers(steps - 5))
        cpu = float(rng.choice([500, 1000, 2000, 3000]))
        if batch and rng.random() < 0.5:
            dur = int(rng.integers(1, 15))
            pods.append(PodSpec(f"b{i}", "batch", cpu, cpu * 2, arrival, duration=dur, deadline=arrival + dur + int(rng.integers(0, 60))))
        else:
            pods.append(PodSpec(f"o{i}", "online", cpu, cpu * 2, arrival, departure=arrival + int(rng.integers(1, 30))))
    return pods


def totals_table_rows(totals: dict) -> dict[str, str]:
    """The rows of ``iro simulate``'s totals table as printed: metric -> cell text."""
    from rich.console import Console

    from iro_fed.sim.cli import totals_table

    console = Console(width=200, record=True)
    console.print(totals_table(totals, "t"))
    rows = {}
    for line in console.export_text().splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows
