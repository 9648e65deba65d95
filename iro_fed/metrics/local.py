"""Local node metrics with psutil: CPU, memory, disk operations and network bytes.

psutil is imported when a :class:`LocalCollector` is built (the ``agent`` extra), not when
this module is imported. Counters (disk operations, network bytes) are cumulative since boot,
as Prometheus counters should be; :class:`LocalSample` also carries per-second rates over
the interval since the previous sample (IOPS, bytes/s) for a human reading the agent's state.
psutil's network bytes sum every interface; the edge agent replaces them with
``edge_agent.metrics.NetworkCounter`` (the physical NICs only, counted once).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LocalSample:
    """One reading of the local node."""

    taken_at: float
    cpu_capacity_cores: float
    cpu_used_cores: float
    memory_capacity_bytes: float
    memory_used_bytes: float
    disk_read_ops_total: float
    disk_write_ops_total: float
    net_rx_bytes_total: float
    net_tx_bytes_total: float
    disk_iops: float  # read + write operations per second since the previous sample
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


class LocalCollector:
    """Reads the node with psutil. The first CPU reading covers the time since construction."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._cores = float(psutil.cpu_count(logical=True) or 1)
        psutil.cpu_percent(interval=None)  # prime: the next call measures from now
        self._last: LocalSample | None = None

    def collect(self, with_network: bool = True) -> LocalSample:
        """A reading; without ``with_network`` psutil's network counters are not read (their bytes
        and rates are 0): the edge agent reads /proc/net/dev itself, once a round."""
        ps = self._psutil
        now = time.time()
        cpu_pct = float(ps.cpu_percent(interval=None))
        mem = ps.virtual_memory()
        disk = ps.disk_io_counters()
        net = ps.net_io_counters() if with_network else None
        reads = float(disk.read_count) if disk else 0.0
        writes = float(disk.write_count) if disk else 0.0
        rx = float(net.bytes_recv) if net else 0.0
        tx = float(net.bytes_sent) if net else 0.0
        iops = rx_rate = tx_rate = 0.0
        last = self._last
        if last is not None and now > last.taken_at:
            dt = now - last.taken_at
            iops = max(reads + writes - last.disk_read_ops_total - last.disk_write_ops_total, 0.0) / dt
            rx_rate = max(rx - last.net_rx_bytes_total, 0.0) / dt
            tx_rate = max(tx - last.net_tx_bytes_total, 0.0) / dt
        sample = LocalSample(
            taken_at=now,
            cpu_capacity_cores=self._cores,
            cpu_used_cores=self._cores * cpu_pct / 100.0,
            memory_capacity_bytes=float(mem.total),
            memory_used_bytes=float(mem.total - mem.available),
            disk_read_ops_total=reads,
            disk_write_ops_total=writes,
            net_rx_bytes_total=rx,
            net_tx_bytes_total=tx,
            disk_iops=iops,
            net_rx_bytes_per_s=rx_rate,
            net_tx_bytes_per_s=tx_rate,
        )
        self._last = sample
        return sample
