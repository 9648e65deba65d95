"""The network rate after a failed read: the gain since the last good reading over the time since
that reading (it was divided by the time since the failed round only: twice the rate)."""

from __future__ import annotations

from pathlib import Path

from edge_agent.metrics import AgentMetrics, NetworkCounter
from tests.edge_agent.test_network_counter import PCI, write_proc, write_sys
from tests.edge_agent.test_robust_network import garble_proc, sample


def test_rate_after_a_failed_round_is_over_the_time_since_the_last_good_reading(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", {"eth0": (1_000, 100)})
    sys = write_sys(tmp_path / "sys", {"eth0": PCI})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=sys))
    metrics.set_local(sample(10.0, cpu_used=1.0))
    garble_proc(proc)
    failed = metrics.set_local(sample(20.0, cpu_used=1.0))
    assert (failed.net_rx_bytes_per_s, failed.net_tx_bytes_per_s) == (0.0, 0.0)
    write_proc(proc, {"eth0": (21_000, 2_100)})  # 20,000 / 2,000 bytes more over 20 s since t=10
    good = metrics.set_local(sample(30.0, cpu_used=1.0))
    assert good.net_rx_bytes_total == 21_000.0
    assert (good.net_rx_bytes_per_s, good.net_tx_bytes_per_s) == (1_000.0, 100.0)  # was 2,000 / 200
    write_proc(proc, {"eth0": (31_000, 3_100)})  # and the next round is over its own 10 s again
    nxt = metrics.set_local(sample(40.0, cpu_used=1.0))
    assert (nxt.net_rx_bytes_per_s, nxt.net_tx_bytes_per_s) == (1_000.0, 100.0)
