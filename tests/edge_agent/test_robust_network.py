"""The node's network series: a comma-separated interface list, a network read that fails on its
own, and one /proc/net/dev reading per round published as a whole.

The /proc and /sys trees are fakes under tmp_path laid out as the kernel does (see
test_network_counter.py); the psutil tests point psutil itself at such a tree (``PROCFS_PATH``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.cli import main
from edge_agent.config import ConfigError, load_config
from edge_agent.metrics import AgentMetrics, NetworkCounter
from iro_fed.metrics.local import LocalCollector, LocalSample
from tests.edge_agent.test_network_counter import HEADER, PCI, write_proc, write_sys

PCI2 = "pci0000:00/0000:00:04.0/virtio3"


def garble_proc(root: Path) -> None:
    """A /proc/net/dev that cannot be read as one (what a broken or foreign file gives)."""
    (root / "net" / "dev").write_text(HEADER + "  eth0: not numbers at all\n")


def sample(taken_at: float, cpu_used: float) -> LocalSample:
    return LocalSample(taken_at=taken_at, cpu_capacity_cores=4.0, cpu_used_cores=cpu_used, memory_capacity_bytes=8e9,
                       memory_used_bytes=cpu_used * 1e9, disk_read_ops_total=5.0, disk_write_ops_total=6.0,
                       net_rx_bytes_total=123_456_789.0, net_tx_bytes_total=98_765_432.0, disk_iops=0.0,
                       net_rx_bytes_per_s=0.0, net_tx_bytes_per_s=0.0)


def scrape(metrics: AgentMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of /metrics: name -> labels -> value."""
    body, _ = metrics.exposition()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def network(metrics: AgentMetrics) -> tuple[dict[str, float], list[str]]:
    seen = scrape(metrics)
    net = {dict(k)["direction"]: v for k, v in seen.get("iro_node_network_bytes_total", {}).items()}
    return net, sorted(dict(k)["interface"] for k in seen.get("iro_node_network_interface_info", {}))


def gauge(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return scrape(metrics).get(name, {}).get(tuple(sorted(labels.items())))


# --- 1. a comma-separated list of interfaces ------------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path, site_file: Path) -> Iterator[Path]:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"problem": str(site_file)}))
    yield path


@pytest.fixture
def fake_node(tmp_path: Path) -> tuple[Path, Path]:
    """eth0 and eth1 (NICs), ens5 (a NIC), lo and a pod's veth."""
    proc = write_proc(tmp_path / "proc", {"lo": (7, 7), "eth0": (1_000, 100), "eth1": (500, 50),
                                          "ens5": (20, 2), "veth9": (300, 30)})
    sys = write_sys(tmp_path / "sys", {"lo": "virtual", "eth0": PCI, "eth1": PCI2,
                                       "ens5": "pci0000:00/0000:00:05.0/virtio4", "veth9": "virtual"})
    return proc, sys


@pytest.mark.parametrize(
    ("env", "counted"),
    [
        ("eth0,eth1", ("eth0", "eth1")),  # what a DaemonSet's env: value carries
        ("eth0, lo", ("lo", "eth0")),  # spaces after the commas are fine
        ("eth1,en.*", ("eth1", "ens5")),  # a name and a regular expression
        ("eth[01]", ("eth0", "eth1")),  # one regular expression, as before
        ("e(th0|ns5)", ("eth0", "ens5")),
        ("eth{0,1}[0-9]", ("eth0", "eth1")),  # a comma inside braces is the expression's own
    ],
)
def test_the_env_var_takes_a_comma_separated_list(config_file, fake_node, env, counted) -> None:
    cfg = load_config(config_file, env={"IRO_AGENT_NETWORK_INTERFACES": env})
    proc, sys = fake_node
    rx, tx, names = NetworkCounter(cfg.collect.network_interfaces, proc_root=proc, sys_root=sys).read()
    assert set(names) == set(counted)
    totals = {"lo": (7, 7), "eth0": (1_000, 100), "eth1": (500, 50), "ens5": (20, 2)}
    assert (rx, tx) == (sum(totals[n][0] for n in counted), sum(totals[n][1] for n in counted))


def test_a_string_with_commas_in_the_file_is_a_list_too(config_file, fake_node) -> None:
    config_file.write_text(config_file.read_text() + "collect:\n  network_interfaces: eth0,eth1\n")
    cfg = load_config(config_file, env={})
    proc, sys = fake_node
    assert NetworkCounter(cfg.collect.network_interfaces, proc_root=proc, sys_root=sys).read()[2] == ("eth0", "eth1")


def test_a_yaml_list_takes_expressions_as_the_env_var_does(config_file, fake_node) -> None:
    config_file.write_text(config_file.read_text() + "collect:\n  network_interfaces: [eth0, 'en.*']\n")
    cfg = load_config(config_file, env={})
    proc, sys = fake_node
    assert NetworkCounter(cfg.collect.network_interfaces, proc_root=proc, sys_root=sys).read()[2] == ("eth0", "ens5")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("eth0,eth[", "item 2 'eth[': not a valid regular expression"),
        ("eth0,", "item 2 of the comma-separated list 'eth0,' is empty"),
        (",eth0", "item 1 of the comma-separated list ',eth0' is empty"),
        ("eth0,(?i)eth1", "do not combine into one regular expression"),
    ],
)
def test_a_bad_item_is_refused_naming_the_setting_and_the_item(config_file, env, message) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config_file, env={"IRO_AGENT_NETWORK_INTERFACES": env})
    key = "collect.network_interfaces (from IRO_AGENT_NETWORK_INTERFACES)"
    assert any(k == key and message in m for k, m in info.value.errors), info.value.errors


def test_edge_agent_check_exits_2_on_a_bad_list(config_file, capsys, monkeypatch) -> None:
    monkeypatch.setenv("IRO_AGENT_NETWORK_INTERFACES", "eth0,eth[")
    assert main(["check", "--config", str(config_file)]) == 2
    err = capsys.readouterr().err
    assert "IRO_AGENT_NETWORK_INTERFACES" in err and "item 2 'eth['" in err


# --- 2. a network read that fails costs only the network series -----------------------------------


def test_a_failed_network_read_leaves_cpu_and_memory_updating(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", {"eth0": (1_000, 100)})
    sys = write_sys(tmp_path / "sys", {"eth0": PCI})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=sys))
    metrics.set_local(sample(1.0, cpu_used=1.0))
    assert network(metrics) == ({"rx": 1_000.0, "tx": 100.0}, ["eth0"])

    garble_proc(proc)
    metrics.set_local(sample(2.0, cpu_used=3.0))  # raised before: the whole round was lost
    node = {"node": "n1", "site": "edge-1"}
    assert gauge(metrics, "iro_node_cpu_used_cores", **node) == 3.0
    assert gauge(metrics, "iro_node_memory_used_bytes", **node) == 3e9
    # The counter keeps its last good totals and interfaces (never psutil's sum of everything).
    assert network(metrics) == ({"rx": 1_000.0, "tx": 100.0}, ["eth0"])
    assert gauge(metrics, "iro_agent_dependency_up", dependency="network") == 0.0
    assert gauge(metrics, "iro_agent_dependency_failures_total", dependency="network") == 1.0
    assert "line 3 is not an interface's counters" in metrics.network_error

    write_proc(proc, {"eth0": (4_000, 400)})  # readable again: counting goes on
    metrics.set_local(sample(3.0, cpu_used=2.0))
    assert network(metrics) == ({"rx": 4_000.0, "tx": 400.0}, ["eth0"])
    assert gauge(metrics, "iro_agent_dependency_up", dependency="network") == 1.0
    assert metrics.network_error is None


def test_no_good_reading_yet_means_no_network_series(tmp_path: Path) -> None:
    (tmp_path / "proc" / "net" / "dev").mkdir(parents=True)  # not a file: IsADirectoryError
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=tmp_path / "proc", sys_root=tmp_path / "sys"))
    metrics.set_local(sample(1.0, cpu_used=1.5))
    assert gauge(metrics, "iro_node_cpu_used_cores", node="n1", site="edge-1") == 1.5
    assert network(metrics) == ({}, [])  # not psutil's 123456789 bytes of every interface
    assert "IsADirectoryError" in metrics.network_error


@pytest.fixture
def psutil_proc(tmp_path: Path) -> Iterator[Path]:
    """psutil reads a /proc of links to the real one, but with its own net/dev (a fake)."""
    root = tmp_path / "psutil-proc"
    root.mkdir()
    for entry in os.listdir("/proc"):
        if entry != "net" and not entry.isdigit():
            (root / entry).symlink_to(Path("/proc", entry))
    write_proc(root, {"eth0": (1, 1)})
    saved = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = str(root)
    # psutil remembers the last totals it returned and reads a smaller one as a wrap: forget them,
    # so the fake's numbers do not depend on which test read the real counters first.
    psutil.net_io_counters.cache_clear()
    try:
        yield root
    finally:
        psutil.PROCFS_PATH = saved
        psutil.net_io_counters.cache_clear()


def test_a_round_reads_proc_net_dev_once_and_psutil_does_not_read_it(tmp_path: Path, psutil_proc: Path) -> None:
    # A /proc/net/dev only psutil would read, and garbled: a round that reads it fails in psutil.
    garble_proc(psutil_proc)
    with pytest.raises(ValueError):
        LocalCollector().collect()  # what the agent's round did first, before its own reading
    proc = write_proc(tmp_path / "proc", {"eth0": (1_000, 100)})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=write_sys(tmp_path / "sys",
                                                                                               {"eth0": PCI})))
    published = metrics.collect(LocalCollector())
    assert (published.net_rx_bytes_total, published.net_tx_bytes_total) == (1_000.0, 100.0)
    assert published.cpu_capacity_cores == psutil.cpu_count(logical=True)
    assert network(metrics) == ({"rx": 1_000.0, "tx": 100.0}, ["eth0"])


def test_without_proc_net_dev_psutil_counts_the_network(tmp_path: Path, psutil_proc: Path) -> None:
    """Not Linux (no /proc/net/dev for the counter): psutil's reading is the one used."""
    write_proc(psutil_proc, {"eth0": (700, 70), "eth1": (300, 30)})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=tmp_path / "none", sys_root=tmp_path / "none"))
    published = metrics.collect(LocalCollector())
    assert (published.net_rx_bytes_total, published.net_tx_bytes_total) == (1_000.0, 100.0)
    assert network(metrics) == ({"rx": 1_000.0, "tx": 100.0}, [])


def test_a_running_agent_reports_a_failing_network_read_and_keeps_collecting(start_agent, http, wait_for,
                                                                             tmp_path: Path) -> None:
    agent, url = start_agent(collect={"interval_s": 0.05})
    proc = tmp_path / "broken-proc"
    (proc / "net" / "dev").mkdir(parents=True)
    agent.metrics.network = NetworkCounter(proc_root=proc, sys_root=tmp_path)  # the agent's own counter, broken
    wait_for(lambda: agent.metrics.network_error, what="the network failure", timeout=30, interval=0.02)
    # Rounds go on at their interval (no backoff for the network's failure): readings keep coming.
    first = agent.metrics._local.taken_at
    wait_for(lambda: agent.metrics._local.taken_at > first, what="another reading", timeout=30, interval=0.02)
    text = http("GET", f"{url}/metrics")[1]
    assert 'iro_agent_dependency_up{dependency="network"} 0.0' in text
    assert 'iro_agent_dependency_up{dependency="local_metrics"} 1.0' in text
    assert "iro_node_cpu_used_cores{" in text
    assert "IsADirectoryError" in http("GET", f"{url}/readyz")[1]["network_error"]


# --- 3. one round, published as a whole ------------------------------------------------------------


def test_a_scrape_during_a_round_sees_totals_and_interfaces_of_one_round(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", {"eth0": (1_000, 100)})
    sys = write_sys(tmp_path / "sys", {"eth0": PCI, "eth1": PCI2})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=sys))
    metrics.set_local(sample(1.0, cpu_used=1.0))
    # A scrape has begun (the registry yields family by family) when a round publishes: eth1 came up.
    families = metrics.registry.collect()
    for family in families:
        if family.name == "iro_node_disk_io_operations":
            break
    write_proc(proc, {"eth0": (2_000, 200), "eth1": (500, 50)})
    metrics.set_local(sample(2.0, cpu_used=1.0))
    rest = {f.name: f for f in families}
    totals = {s.labels["direction"]: s.value for s in rest["iro_node_network_bytes"].samples
              if s.name.endswith("_total")}
    listed = sorted(s.labels["interface"] for s in rest["iro_node_network_interface_info"].samples)
    assert (totals, listed) == ({"rx": 1_000.0, "tx": 100.0}, ["eth0"])  # the first round, whole
    assert network(metrics) == ({"rx": 2_500.0, "tx": 250.0}, ["eth0", "eth1"])  # the next scrape: the second
