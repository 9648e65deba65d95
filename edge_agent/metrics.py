"""The agent's Prometheus metrics, in a registry of its own (several agents may share a process)."""

from __future__ import annotations

from typing import Any

from iro_fed.metrics.local import LocalSample

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
HANDLERS = ("recommend", "outcome", "healthz", "readyz", "metrics", "snapshot", "federation", "other")


class AgentMetrics:
    """Counters, histograms and gauges of one agent (see docs/edge_agent.md for the list)."""

    def __init__(self, node: str, site: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.node, self.site = node, site
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
        self._local: LocalSample | None = None
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

    def set_local(self, sample: LocalSample) -> None:
        labels = (self.node, self.site)
        self.node_cpu_used.labels(*labels).set(sample.cpu_used_cores)
        self.node_cpu_capacity.labels(*labels).set(sample.cpu_capacity_cores)
        self.node_mem_used.labels(*labels).set(sample.memory_used_bytes)
        self.node_mem_capacity.labels(*labels).set(sample.memory_capacity_bytes)
        self._local = sample

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _LocalCounters:
    """psutil's cumulative disk and network counters as Prometheus counters."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.m = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        s = self.m._local
        if s is None:
            return
        disk = CounterMetricFamily("iro_node_disk_io_operations", "Disk read/write operations since boot.",
                                   labels=["node", "site", "direction"])
        disk.add_metric([self.m.node, self.m.site, "read"], s.disk_read_ops_total)
        disk.add_metric([self.m.node, self.m.site, "write"], s.disk_write_ops_total)
        yield disk
        net = CounterMetricFamily("iro_node_network_bytes", "Network bytes since boot.",
                                  labels=["node", "site", "direction"])
        net.add_metric([self.m.node, self.m.site, "rx"], s.net_rx_bytes_total)
        net.add_metric([self.m.node, self.m.site, "tx"], s.net_tx_bytes_total)
        yield net
