"""The agent's Prometheus metrics, in a registry of its own (several agents may share a process)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from iro_fed.metrics.local import LocalCollector, LocalSample

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
HANDLERS = ("recommend", "outcome", "healthz", "readyz", "metrics", "snapshot", "federation", "other")


#: What the agent says without its extra (edge-agent run and check exit 2 with it, as the other
#: commands do for a missing extra, not with a traceback).
PROMETHEUS_HINT = "edge-agent needs prometheus-client: pip install 'iro-fed[agent]'"


def _prometheus_classes() -> tuple[Any, Any, Any, Any]:
    """prometheus_client's CollectorRegistry, Counter, Gauge and Histogram, or a UsageError with
    the install hint when it is not installed (a broken install still raises its own error)."""
    try:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "prometheus_client":
            raise
        from iro_fed.cli import UsageError

        raise UsageError(PROMETHEUS_HINT) from exc
    return CollectorRegistry, Counter, Gauge, Histogram


class AgentMetrics:
    """Counters, histograms and gauges of one agent (see docs/edge_agent.md for the list)."""

    def __init__(self, node: str, site: str, network: NetworkCounter | None = None) -> None:
        """``network`` reads iro_node_network_bytes (default: the uplink interfaces of this process's
        network namespace, see :class:`NetworkCounter`)."""
        CollectorRegistry, Counter, Gauge, Histogram = _prometheus_classes()

        self.node, self.site = node, site
        self.network = NetworkCounter() if network is None else network
        # The last collection round, replaced as a whole: a scrape sees one round's totals and interfaces.
        self._published: _Published | None = None
        self.network_error: str | None = None  # why the last round has no network reading
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("iro_agent_requests", "HTTP requests served, by handler and status code.",
                                ["handler", "code"], registry=r)
        self.request_duration = Histogram("iro_agent_request_duration_seconds", "HTTP request handling time.",
                                          ["handler"], buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("iro_agent_decisions", "Recommendations made, by ranking source and outcome.",
                                 ["source", "outcome"], registry=r)
        self.decision_latency = Histogram("iro_agent_decision_latency_seconds",
                                          "Time to rank the site's nodes for one pod.", ["source"],
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.dependency_up = Gauge("iro_agent_dependency_up",
                                   "1 when a dependency answered on the last try, 0 when it failed.",
                                   ["dependency"], registry=r)
        self.dependency_failures = Counter("iro_agent_dependency_failures", "Failed tries per dependency.",
                                           ["dependency"], registry=r)
        self.load_aware = Gauge("iro_agent_load_aware_active",
                                "1 when scoring uses observed usage from Prometheus, 0 when it uses requests.",
                                registry=r)
        self.policy_info = Gauge("iro_agent_policy_info", "The ranking in use (value 1).",
                                 ["source", "version"], registry=r)
        self.experience_rows = Gauge("iro_agent_experience_written", "Records committed to the experience store.",
                                     registry=r)
        self.experience_pending = Gauge("iro_agent_experience_pending",
                                        "Records held in memory while the experience store's file fails.", registry=r)
        self.experience_failed = Gauge("iro_agent_experience_failed",
                                       "Records the experience store could not write (dropped).", registry=r)
        self.node_cpu_used = Gauge("iro_node_cpu_used_cores", "CPU in use on the node (cores, psutil).",
                                   ["node", "site"], registry=r)
        self.node_cpu_capacity = Gauge("iro_node_cpu_capacity_cores", "Logical CPUs of the node.",
                                       ["node", "site"], registry=r)
        self.node_mem_used = Gauge("iro_node_memory_used_bytes", "Memory in use (total - available).",
                                   ["node", "site"], registry=r)
        self.node_mem_capacity = Gauge("iro_node_memory_capacity_bytes", "Memory of the node.",
                                       ["node", "site"], registry=r)
        r.register(_LocalCounters(self))
        # Series that exist from the first scrape, so rates and ratios see them start at 0.
        for code in ("200", "400"):
            self.requests.labels("recommend", code)
        self.request_duration.labels("recommend")
        for source in ("policy", "solver", "heuristic"):
            self.decision_latency.labels(source)
            for outcome in ("ranked", "no_fit"):
                self.decisions.labels(source, outcome)

    def add_federated(self) -> None:
        """The SuperNode's series (only with ``federated.enabled``)."""
        from prometheus_client import Counter, Gauge

        r = self.registry
        self.supernode_up = Gauge("iro_agent_supernode_up",
                                  "1 when the site's Flower SuperNode runs and its ClientAppIo port answers.", registry=r)
        self.supernode_connected = Gauge("iro_agent_supernode_connected",
                                         "1 when the running SuperNode registered with the SuperLink.", registry=r)
        self.supernode_restarts = Counter("iro_agent_supernode_restarts",
                                          "Times the agent restarted its SuperNode after it exited.", registry=r)
        self.federated_rounds = Counter("iro_agent_federated_client_rounds",
                                        "Federated training rounds the site's ClientApp finished.", registry=r)
        self.federated_experience_samples = Gauge(
            "iro_agent_federated_experience_samples",
            "Decisions of the experience store the ClientApp trained on in its last round.", registry=r)

    @property
    def _local(self) -> LocalSample | None:
        """The last published reading (what /metrics shows)."""
        published = self._published
        return None if published is None else published.sample

    def collect(self, collector: LocalCollector) -> LocalSample:
        """One collection round: /proc/net/dev read once, by :attr:`network` (psutil reads it only
        where the counter has none: not Linux; a second read would be one more way for the round to
        fail), psutil for the rest; published as :meth:`set_local`."""
        net, error = self._read_network()
        return self._publish(collector.collect(with_network=net is None and error is None), net, error)

    def set_local(self, sample: LocalSample) -> LocalSample:
        """Record a psutil reading; its network bytes are replaced by :attr:`network`'s (psutil sums
        every interface: lo, veth pairs, bridges and tunnels count the same traffic again).

        A network reading that fails (/proc/net/dev unreadable or garbled) costs only the network
        series: CPU and memory are updated, the network totals and interfaces stay at the last good
        reading (a counter never goes back), ``iro_agent_dependency_up{dependency="network"}`` is 0
        and :attr:`network_error` says why. Returns the published reading."""
        net, error = self._read_network()
        return self._publish(sample, net, error)

    def _read_network(self) -> tuple[tuple[float, float, tuple[str, ...]] | None, Exception | None]:
        try:
            return self.network.read(), None
        except Exception as exc:  # OSError, a garbled file (ValueError): only the network part fails
            return None, exc

    def _publish(self, sample: LocalSample, net: tuple[float, float, tuple[str, ...]] | None,
                 error: Exception | None) -> LocalSample:
        prev = self._published
        interfaces: tuple[str, ...] | None = None  # None: psutil's sum (no /proc/net/dev)
        has_network = True
        network_at = sample.taken_at
        if error is not None:
            if prev is not None and prev.network:
                interfaces = prev.interfaces
                network_at = prev.network_at  # the totals shown are that reading's
                sample = dataclasses.replace(sample, net_rx_bytes_total=prev.sample.net_rx_bytes_total,
                                             net_tx_bytes_total=prev.sample.net_tx_bytes_total,
                                             net_rx_bytes_per_s=0.0, net_tx_bytes_per_s=0.0)
            else:  # no good reading yet: no network series rather than psutil's sum of everything
                has_network = False
                sample = dataclasses.replace(sample, net_rx_bytes_total=0.0, net_tx_bytes_total=0.0,
                                             net_rx_bytes_per_s=0.0, net_tx_bytes_per_s=0.0)
        elif net is not None:
            rx, tx, interfaces = net
            rx_rate = tx_rate = 0.0
            # Since the last good reading, not the last round: after a failed round the gain is
            # over both rounds' time (dividing by the last only doubled the rate).
            if prev is not None and prev.network and sample.taken_at > prev.network_at:
                dt = sample.taken_at - prev.network_at  # totals never decrease
                rx_rate = (rx - prev.sample.net_rx_bytes_total) / dt
                tx_rate = (tx - prev.sample.net_tx_bytes_total) / dt
            sample = dataclasses.replace(sample, net_rx_bytes_total=rx, net_tx_bytes_total=tx,
                                         net_rx_bytes_per_s=rx_rate, net_tx_bytes_per_s=tx_rate)
        labels = (self.node, self.site)
        self.node_cpu_used.labels(*labels).set(sample.cpu_used_cores)
        self.node_cpu_capacity.labels(*labels).set(sample.cpu_capacity_cores)
        self.node_mem_used.labels(*labels).set(sample.memory_used_bytes)
        self.node_mem_capacity.labels(*labels).set(sample.memory_capacity_bytes)
        self._published = _Published(sample, interfaces, has_network, network_at)  # one assignment: one round
        if error is not None:
            self.network_error = f"{type(error).__name__}: {error}"
            self.dependency_up.labels("network").set(0)
            self.dependency_failures.labels("network").inc()
        else:
            self.network_error = None
            if net is not None:
                self.dependency_up.labels("network").set(1)
        return sample

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


@dataclasses.dataclass(frozen=True)
class _Published:
    """One collection round as /metrics shows it."""

    sample: LocalSample
    interfaces: tuple[str, ...] | None  # summed in the network totals; None: psutil's sum
    network: bool  # False: no good network reading yet (the series are left out)
    network_at: float  # taken_at of the network totals shown (an earlier round's after a failed read)


class _LocalCounters:
    """psutil's cumulative disk and network counters as Prometheus counters."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.m = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        published = self.m._published  # read once: every family below is of the same round
        if published is None:
            return
        s = published.sample
        disk = CounterMetricFamily("iro_node_disk_io_operations", "Disk read/write operations since boot.",
                                   labels=["node", "site", "direction"])
        disk.add_metric([self.m.node, self.m.site, "read"], s.disk_read_ops_total)
        disk.add_metric([self.m.node, self.m.site, "write"], s.disk_write_ops_total)
        yield disk
        if not published.network:
            return
        net = CounterMetricFamily("iro_node_network_bytes",
                                  "Network bytes of the node's uplink interfaces (physical NICs, or "
                                  "collect.network_interfaces), since each came up.",
                                  labels=["node", "site", "direction"])
        net.add_metric([self.m.node, self.m.site, "rx"], s.net_rx_bytes_total)
        net.add_metric([self.m.node, self.m.site, "tx"], s.net_tx_bytes_total)
        yield net
        counted = published.interfaces
        if counted is not None:
            # Which interfaces the counter sums: an empty family says the selection matches nothing.
            info = GaugeMetricFamily("iro_node_network_interface_info",
                                     "Interfaces summed in iro_node_network_bytes (value 1).",
                                     labels=["node", "site", "interface"])
            for name in counted:
                info.add_metric([self.m.node, self.m.site, printable_name(name)], 1)
            yield info


#: Names of virtual interfaces, used when /sys cannot tell (not mounted or not readable): loopback,
#: the pods' veth pairs, container and VM bridges, overlay tunnels, VPNs and kube-proxy's IPVS dummy.
VIRTUAL_INTERFACE_NAMES = ("lo",)
VIRTUAL_INTERFACE_PREFIXES = ("veth", "cni", "docker", "br-", "flannel", "cali", "cilium", "vxlan", "tunl", "tun",
                              "tap", "wg", "kube-ipvs", "virbr", "lxc", "kube-bridge", "weave", "genev_sys",
                              "ovs-system", "nodelocaldns", "dummy",
                              # the fallback device of each tunnel module, made in every namespace
                              # (a pod's too) once the module is loaded: sit0, gre0, ip6tnl0, ...
                              "sit", "gre", "erspan", "ip6tnl", "ip6gre", "ip_vti", "ip6_vti",
                              "ifb")  # ifb: traffic redirected from another interface (tc ingress shaping)


def read_net_dev(proc_root: str | os.PathLike[str] = "/proc") -> dict[str, tuple[int, int]]:
    """(received, sent) bytes per interface from ``<proc_root>/net/dev``, which lists the interfaces
    of the reading process's network namespace (the node's only with hostNetwork)."""
    path = Path(proc_root) / "net" / "dev"
    counters: dict[str, tuple[int, int]] = {}
    # A name is any bytes but '/', ':' and whitespace, printed as they are: decoded as the OS decodes
    # file names, so that one that is not UTF-8 still names its /sys entry (see printable_name).
    text = os.fsdecode(path.read_bytes())
    for number, line in enumerate(text.splitlines(), 1):
        name, colon, rest = line.partition(":")  # Linux interface names cannot contain ':'
        if not colon or number <= 2:  # the two header lines
            continue
        fields = rest.split()
        try:
            counters[name.strip()] = (int(fields[0]), int(fields[8]))
        except (IndexError, ValueError):
            raise ValueError(f"{path}: line {number} is not an interface's counters: {line.strip()[:120]!r}") from None
    return counters


def interface_is_virtual(name: str, sys_root: str | os.PathLike[str] = "/sys") -> bool | None:
    """True when ``/sys/class/net/<name>`` resolves under ``/sys/devices/virtual/`` (the kernel puts a
    network device without a parent bus there: lo, veth, bridges, tunnels, bonds, VLANs); False for
    a device on a bus (PCI, virtio, USB: a NIC); None when /sys does not list it."""
    entry = Path(sys_root) / "class" / "net" / name
    if not os.path.lexists(entry):
        return None
    virtual = os.path.realpath(Path(sys_root) / "devices" / "virtual")
    return os.path.realpath(entry).startswith(virtual + os.sep)


def interface_index(name: str, sys_root: str | os.PathLike[str] = "/sys") -> int | None:
    """The device's ifindex (``/sys/class/net/<name>/ifindex``): it stays with the device when it is
    renamed, and a device made again under the same name gets another; None when /sys cannot tell."""
    try:
        return int((Path(sys_root) / "class" / "net" / name / "ifindex").read_text())
    except (OSError, ValueError):
        return None


def printable_name(name: str) -> str:
    """``name`` for a label: bytes that are not UTF-8 (kept by os.fsdecode) as ``\\xff`` escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def virtual_by_name(name: str) -> bool:
    """The fallback of :func:`interface_is_virtual`: the name says virtual (see VIRTUAL_INTERFACE_PREFIXES)."""
    return name in VIRTUAL_INTERFACE_NAMES or name.startswith(VIRTUAL_INTERFACE_PREFIXES)


def kernel_counter_bits() -> int:
    """32 on a 32-bit kernel (``uname -m``: i686, armv7l, mips, ...), else 64."""
    machine = os.uname().machine.lower()
    return 64 if "64" in machine or machine in ("s390x", "alpha") else 32


def _gain(now: int, last: int, bits: int) -> int:
    """What a /proc/net/dev counter gained since ``last`` (see :class:`NetworkCounter`)."""
    if now >= last:
        return now - last
    if bits == 32 and last < 2**32:
        wrapped = now + 2**32 - last
        if wrapped < 2**31:
            return wrapped
    return now  # a restart: all it has is new


class NetworkCounter:
    """The node's network bytes: the sum over the uplink interfaces of /proc/net/dev.

    Summing every interface counts traffic that leaves a pod on its veth, again on the bridge and
    again on the NIC, and counts loopback traffic at all. By default only physical interfaces
    count (not under /sys/devices/virtual: bond and VLAN traffic is counted on their member NICs).
    Where there is none - a pod's own network namespace (its eth0 is a veth), a node that is
    itself a container, or /sys unreadable - every interface whose name is not a virtual one's
    (:data:`VIRTUAL_INTERFACE_PREFIXES`, and lo) counts. ``interfaces``, a regular expression
    matched against whole names (``collect.network_interfaces``), replaces both rules.

    The totals only grow, as a Prometheus counter must: each interface adds what it gained since
    the last read (all of it when it is new or its counter restarted), and an interface that goes
    away keeps what it added. An interface is followed by its ifindex where /sys gives one: renamed,
    it goes on from its last reading; made again under the same name (another ifindex), or gone
    from a reading and back, it is new. A decrease is taken as a restart, as Prometheus's rate()
    and psutil take it, except where it is a 32-bit wrap: on a 32-bit kernel a driver that keeps
    ``unsigned long`` statistics wraps at 2**32 in /proc/net/dev, every 4 GiB (34 s at 1 Gbit/s),
    and a restart would lose what the interface counted between the last reading and the wrap.
    There (``counter_bits`` 32: default on a 32-bit kernel, see :func:`kernel_counter_bits`) a
    decrease of a counter last read below 2**32 is a wrap when that gives a gain under 2**31 (half
    the range); otherwise, and on a 64-bit kernel (every counter 64 bits), it is a restart.
    """

    def __init__(self, interfaces: str = "", proc_root: str | os.PathLike[str] = "/proc",
                 sys_root: str | os.PathLike[str] = "/sys", counter_bits: int | None = None) -> None:
        try:
            self.pattern = re.compile(interfaces) if interfaces else None
        except re.error as exc:
            raise ValueError(f"network interfaces: not a valid regular expression {interfaces!r}: {exc}") from None
        if counter_bits is None:
            counter_bits = kernel_counter_bits()
        elif counter_bits not in (32, 64):
            raise ValueError(f"network counter_bits: must be 32 or 64, got {counter_bits!r}")
        self.counter_bits = counter_bits
        self.proc_root, self.sys_root = proc_root, sys_root
        # ifindex (or name without /sys) -> (name, rx, tx) at the last reading that counted it
        self._last: dict[int | str, tuple[str, int, int]] = {}
        self._rx = self._tx = 0

    def select(self, names: Iterable[str]) -> list[str]:
        """The interfaces that count, of ``names`` (see the class)."""
        names = list(names)
        if self.pattern is not None:
            return [n for n in names if self.pattern.fullmatch(n)]
        physical = [n for n in names if interface_is_virtual(n, self.sys_root) is False]
        return physical or [n for n in names if not virtual_by_name(n)]

    def read(self) -> tuple[float, float, tuple[str, ...]] | None:
        """(received, sent, interfaces counted); None without a /proc/net/dev (not Linux)."""
        try:
            counters = read_net_dev(self.proc_root)
        except FileNotFoundError:
            return None
        chosen = self.select(counters)
        last: dict[int | str, tuple[str, int, int]] = {}
        for name in chosen:
            rx, tx = counters[name]
            index = interface_index(name, self.sys_root)
            key: int | str = name if index is None else index
            _, last_rx, last_tx = self._last.get(key, (name, 0, 0))
            self._rx += _gain(rx, last_rx, self.counter_bits)
            self._tx += _gain(tx, last_tx, self.counter_bits)
            last[key] = (name, rx, tx)
        # One not chosen this time but still listed keeps its reading; one that went away is
        # forgotten: back again, its counters started over at 0, and all it has is new.
        for key, entry in self._last.items():
            if key not in last and entry[0] in counters:
                last[key] = entry
        self._last = last
        return float(self._rx), float(self._tx), tuple(chosen)
