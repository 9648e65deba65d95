"""iro_node_network_bytes: the node's uplink interfaces, not every interface of /proc/net/dev.

The /proc and /sys trees are fakes under tmp_path laid out as the kernel does: /proc/net/dev's two
header lines and one line per interface, /sys/class/net/<if> a relative link to the device under
/sys/devices (virtual/net/<if> for lo, veth, bridges, tunnels; a PCI path for a NIC).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.config import ConfigError, load_config
from edge_agent.metrics import AgentMetrics, NetworkCounter
from iro_fed.metrics.local import LocalSample

HEADER = ("Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
          "carrier compressed\n")
PCI = "pci0000:00/0000:00:03.0/virtio2"


def write_proc(root: Path, counters: dict[str, tuple[int, int]]) -> Path:
    """``root/net/dev`` with (rx bytes, tx bytes) per interface; the other columns 0."""
    (root / "net").mkdir(parents=True, exist_ok=True)
    lines = [f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0\n" for name, (rx, tx) in counters.items()]
    (root / "net" / "dev").write_text(HEADER + "".join(lines))
    return root


def write_sys(root: Path, devices: dict[str, str]) -> Path:
    """``root/class/net/<if>`` linked to ``root/devices/<parent>/net/<if>`` (parent "virtual" or a bus path)."""
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    for name, parent in devices.items():
        device = root / "devices" / parent / "net" / name
        device.mkdir(parents=True)
        (root / "class" / "net" / name).symlink_to(Path("..", "..", "devices", parent, "net", name))
    return root


def sample(taken_at: float, counters: dict[str, tuple[int, int]]) -> LocalSample:
    """A psutil reading: psutil.net_io_counters() is the sum over every interface of /proc/net/dev."""
    rx, tx = sum(c[0] for c in counters.values()), sum(c[1] for c in counters.values())
    return LocalSample(taken_at=taken_at, cpu_capacity_cores=4.0, cpu_used_cores=1.0, memory_capacity_bytes=8e9,
                       memory_used_bytes=2e9, disk_read_ops_total=5.0, disk_write_ops_total=6.0,
                       net_rx_bytes_total=float(rx), net_tx_bytes_total=float(tx), disk_iops=0.0,
                       net_rx_bytes_per_s=0.0, net_tx_bytes_per_s=0.0)


def exposed(metrics: AgentMetrics) -> tuple[dict[str, float], list[str]]:
    """iro_node_network_bytes_total by direction, and the interfaces iro_node_network_interface_info lists."""
    body, _ = metrics.exposition()
    net: dict[str, float] = {}
    interfaces: list[str] = []
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "iro_node_network_bytes_total":
                net[s.labels["direction"]] = s.value
            elif s.name == "iro_node_network_interface_info":
                interfaces.append(s.labels["interface"])
    return net, sorted(interfaces)


# The node's namespace, as a hostNetwork agent sees it: a pod's traffic to the outside crosses its
# veth, the cni0 bridge, flannel.1 and eth0, and lo carries node-local traffic.
NODE = {"lo": (7_000, 7_000), "eth0": (1_000_000, 400_000), "veth1a2b3c": (300_000, 90_000),
        "cni0": (300_000, 90_000), "flannel.1": (250_000, 80_000), "docker0": (0, 0)}
NODE_SYS = {"lo": "virtual", "eth0": PCI, "veth1a2b3c": "virtual", "cni0": "virtual", "flannel.1": "virtual",
            "docker0": "virtual"}


def test_hostnetwork_node_counts_only_the_physical_nic(tmp_path: Path) -> None:
    proc, sys = write_proc(tmp_path / "proc", NODE), write_sys(tmp_path / "sys", NODE_SYS)
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=sys))
    metrics.set_local(sample(100.0, NODE))
    # psutil's sum would be 1_857_000 received: the pod's 300 kB three times over, lo's 7 kB once.
    assert exposed(metrics) == ({"rx": 1_000_000.0, "tx": 400_000.0}, ["eth0"])
    # The other node series still come from the sample.
    assert b'iro_node_cpu_used_cores{node="n1",site="edge-1"} 1.0' in metrics.exposition()[0]

    # 10 s later: eth0 +50 kB in, +20 kB out; a pod went away (its veth with it), the bridge grew.
    later = {**NODE, "eth0": (1_050_000, 420_000), "cni0": (900_000, 300_000)}
    del later["veth1a2b3c"]
    write_proc(proc, later)
    metrics.set_local(sample(110.0, later))
    assert exposed(metrics) == ({"rx": 1_050_000.0, "tx": 420_000.0}, ["eth0"])
    assert (metrics._local.net_rx_bytes_per_s, metrics._local.net_tx_bytes_per_s) == (5_000.0, 2_000.0)


def test_bond_members_count_not_the_bond_or_its_vlan(tmp_path: Path) -> None:
    counters = {"lo": (5, 5), "eth0": (100, 10), "eth1": (200, 20), "bond0": (300, 30), "bond0.42": (300, 30)}
    proc = write_proc(tmp_path / "proc", counters)
    sys = write_sys(tmp_path / "sys", {"lo": "virtual", "eth0": "pci0000:00/0000:00:03.0", "eth1": "pci0000:00/0000:00:04.0",
                                      "bond0": "virtual", "bond0.42": "virtual"})
    assert NetworkCounter(proc_root=proc, sys_root=sys).read() == (300.0, 30.0, ("eth0", "eth1"))


def test_pod_namespace_counts_its_eth0(tmp_path: Path) -> None:
    # Without hostNetwork the agent's namespace has lo and eth0, the pod's end of a veth pair
    # (virtual to the kernel): there is no physical NIC, so the names decide and eth0 counts.
    counters = {"lo": (9_000, 9_000), "eth0": (64_000, 32_000)}
    proc = write_proc(tmp_path / "proc", counters)
    sys = write_sys(tmp_path / "sys", {"lo": "virtual", "eth0": "virtual"})
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter(proc_root=proc, sys_root=sys))
    metrics.set_local(sample(5.0, counters))
    assert exposed(metrics) == ({"rx": 64_000.0, "tx": 32_000.0}, ["eth0"])


def test_without_sys_the_names_of_virtual_interfaces_are_left_out(tmp_path: Path) -> None:
    names = ["lo", "eth0", "ens5", "veth9f", "cni0", "docker0", "br-1c2d", "flannel.1", "cali12ab", "cilium_host",
             "vxlan.calico", "tunl0", "tun0", "tap3", "wg0", "kube-ipvs0", "virbr0", "lxc8e7d"]
    counters = {name: (1_000 * (i + 1), 10 * (i + 1)) for i, name in enumerate(names)}
    proc = write_proc(tmp_path / "proc", counters)
    counter = NetworkCounter(proc_root=proc, sys_root=tmp_path / "no-sys")
    assert counter.read() == (2_000.0 + 3_000.0, 20.0 + 30.0, ("eth0", "ens5"))


def test_an_explicit_pattern_replaces_the_rules(tmp_path: Path) -> None:
    proc, sys = write_proc(tmp_path / "proc", NODE), write_sys(tmp_path / "sys", NODE_SYS)
    # Matched against whole names ("eth" alone would pick nothing); a virtual interface may be chosen.
    counter = NetworkCounter("eth0|flannel\\.1", proc_root=proc, sys_root=sys)
    assert counter.read() == (1_250_000.0, 480_000.0, ("eth0", "flannel.1"))
    assert NetworkCounter("eth", proc_root=proc, sys_root=sys).read() == (0.0, 0.0, ())
    with pytest.raises(ValueError, match="not a valid regular expression 'eth\\['"):
        NetworkCounter("eth[")


def test_totals_never_decrease(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", write_sys(tmp_path / "sys", {"lo": "virtual", "eth0": PCI, "eth1": PCI})
    counter = NetworkCounter(proc_root=write_proc(proc, {"lo": (1, 1), "eth0": (1_000, 100), "eth1": (500, 50)}),
                             sys_root=sys)
    assert counter.read()[:2] == (1_500.0, 150.0)
    # eth0's driver reloaded (its counters restart at 0, then +40), eth1 unplugged: nothing is lost.
    write_proc(proc, {"lo": (1, 1), "eth0": (40, 4)})
    assert counter.read() == (1_540.0, 154.0, ("eth0",))
    write_proc(proc, {"lo": (1, 1), "eth0": (140, 14)})
    assert counter.read()[:2] == (1_640.0, 164.0)


def test_a_malformed_proc_net_dev_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "dev").write_text(HEADER + "  eth0: 12 x\n")
    with pytest.raises(ValueError, match="line 3 is not an interface's counters: 'eth0: 12 x'"):
        NetworkCounter(proc_root=tmp_path / "proc", sys_root=tmp_path).read()


def test_setting_from_the_file_and_the_environment(tmp_path: Path, site_file: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"problem": str(site_file), "collect": {"network_interfaces": ["eth0", "ens5"]}}))
    assert load_config(path, env={}).collect.network_interfaces == "eth0|ens5"
    assert load_config(path, env={"IRO_AGENT_NETWORK_INTERFACES": "en.*"}).collect.network_interfaces == "en.*"
    path.write_text(yaml.safe_dump({"problem": str(site_file)}))
    assert load_config(path, env={}).collect.network_interfaces == ""  # default: the physical NICs


@pytest.mark.parametrize(
    ("value", "env", "key", "message"),
    [
        (None, "eth[", "collect.network_interfaces (from IRO_AGENT_NETWORK_INTERFACES)",
         "not a valid regular expression 'eth['"),
        ("(eth0", None, "collect.network_interfaces", "not a valid regular expression '(eth0'"),
        (5, None, "collect.network_interfaces", "expected a regular expression or a list of interface names, got int 5"),
        ([], None, "collect.network_interfaces", "an empty list counts no interface"),
        (["eth0", "eth 1"], None, "collect.network_interfaces", "expected interface names such as eth0, got 'eth 1'"),
    ],
)
def test_a_bad_setting_names_it(tmp_path: Path, site_file: Path, value, env, key, message) -> None:
    doc = {"problem": str(site_file)}
    if value is not None:
        doc["collect"] = {"network_interfaces": value}
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={} if env is None else {"IRO_AGENT_NETWORK_INTERFACES": env})
    assert any(k == key and m.startswith(message) for k, m in info.value.errors), info.value.errors


def test_the_setting_reaches_a_running_agent(start_agent, http, wait_for) -> None:
    """``collect.network_interfaces`` chooses what a started agent sums: with ``lo`` its
    /metrics names exactly lo (the automatic rule never counts lo)."""
    _, url = start_agent(collect={"interval_s": 0.2, "network_interfaces": "lo"})
    listed = wait_for(lambda: {s.labels["interface"] for f in text_string_to_metric_families(http("GET", url + "/metrics")[1])
                               if f.name == "iro_node_network_interface_info" for s in f.samples},
                      timeout=30, what="the interfaces on /metrics", interval=0.1)
    assert listed == {"lo"}


def set_ifindex(sys: Path, name: str, index: int) -> None:
    """``/sys/class/net/<name>/ifindex``, the kernel's number for the device (new for each device)."""
    (sys / "class" / "net" / name / "ifindex").write_text(f"{index}\n")


def test_an_interface_that_went_away_counts_from_zero_when_it_comes_back(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", write_sys(tmp_path / "sys", {"eth0": PCI, "eth1": "pci0000:00/0000:00:04.0"})
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (1_000, 100), "eth1": (500, 50)}), sys_root=sys)
    assert counter.read()[:2] == (1_500.0, 150.0)
    write_proc(proc, {"eth0": (1_000, 100)})  # eth1 unplugged
    assert counter.read() == (1_500.0, 150.0, ("eth0",))
    # Plugged in again: its counters started at 0 and passed the old reading before this one.
    write_proc(proc, {"eth0": (1_000, 100), "eth1": (600, 60)})
    assert counter.read() == (2_100.0, 210.0, ("eth0", "eth1"))


def test_an_interface_made_again_between_readings_counts_from_zero(tmp_path: Path) -> None:
    # The driver reloaded (or the USB NIC was replugged) between two readings: the name is back, the
    # device is new (another ifindex), and its counters grew past the old ones - no decrease to see.
    proc, sys = tmp_path / "proc", write_sys(tmp_path / "sys", {"eth0": PCI})
    set_ifindex(sys, "eth0", 2)
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (1_000, 100)}), sys_root=sys)
    assert counter.read()[:2] == (1_000.0, 100.0)
    set_ifindex(sys, "eth0", 7)
    write_proc(proc, {"eth0": (1_200, 120)})
    assert counter.read()[:2] == (2_200.0, 220.0)
    write_proc(proc, {"eth0": (1_300, 130)})  # the same device: only what it gained
    assert counter.read()[:2] == (2_300.0, 230.0)


def test_a_renamed_interface_is_not_counted_again(tmp_path: Path) -> None:
    # ``ip link set eth1 name lan1``: the same device (same ifindex, counters go on) under a new name.
    proc, sys = tmp_path / "proc", write_sys(tmp_path / "sys", {"eth0": PCI, "eth1": "pci0000:00/0000:00:04.0"})
    set_ifindex(sys, "eth0", 2)
    set_ifindex(sys, "eth1", 3)
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (1_000, 100), "eth1": (500, 50)}), sys_root=sys)
    assert counter.read()[:2] == (1_500.0, 150.0)
    (sys / "class" / "net" / "eth1").rename(sys / "class" / "net" / "lan1")
    write_proc(proc, {"eth0": (1_000, 100), "lan1": (650, 65)})
    assert counter.read() == (1_650.0, 165.0, ("eth0", "lan1"))


def test_an_interface_name_that_is_not_utf8(tmp_path: Path) -> None:
    # Linux takes any bytes but '/', ':' and spaces in a name (``ip link add $'\xff0' type dummy``),
    # and /proc/net/dev prints them as they are: neither the reading nor /metrics may fail on one.
    (tmp_path / "proc" / "net").mkdir(parents=True)
    lines = [f"{name:>6}: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n".encode() for name, rx, tx in
             (("lo", 5, 5), ("eth0", 1_000, 100))]
    lines.append(b"\xff0: 40 1 0 0 0 0 0 0 4 1 0 0 0 0 0 0\n")
    (tmp_path / "proc" / "net" / "dev").write_bytes(HEADER.encode() + b"".join(lines))
    sys = write_sys(tmp_path / "sys", {"lo": "virtual", "eth0": PCI})
    assert NetworkCounter(proc_root=tmp_path / "proc", sys_root=sys).read() == (1_000.0, 100.0, ("eth0",))
    # Chosen (every interface but lo), its name is shown with the byte escaped.
    metrics = AgentMetrics("n1", "edge-1", NetworkCounter("(?!lo$).*", proc_root=tmp_path / "proc", sys_root=sys))
    metrics.set_local(sample(1.0, {}))
    assert exposed(metrics) == ({"rx": 1_040.0, "tx": 104.0}, ["\\xff0", "eth0"])


def test_pod_namespace_leaves_out_the_kernels_tunnel_devices(tmp_path: Path) -> None:
    # A pod's namespace also has the fallback device of each tunnel module the node loaded (sit0,
    # ip6tnl0, gre0, ...: "@NONE" in ``ip link``), virtual and not the pod's eth0.
    counters = {"lo": (9, 9), "tunl0": (0, 0), "sit0": (1, 1), "ip6tnl0": (2, 2), "gre0": (3, 3), "gretap0": (4, 4),
                "erspan0": (5, 5), "ip_vti0": (6, 6), "ip6_vti0": (7, 7), "ip6gre0": (8, 8), "eth0": (64_000, 32_000)}
    proc = write_proc(tmp_path / "proc", counters)
    sys = write_sys(tmp_path / "sys", {name: "virtual" for name in counters})
    assert NetworkCounter(proc_root=proc, sys_root=sys).read() == (64_000.0, 32_000.0, ("eth0",))


def test_without_sys_ifb_devices_are_left_out(tmp_path: Path) -> None:
    # ifb0/ifb1 (tc ingress shaping) carry the traffic redirected from another interface again.
    proc = write_proc(tmp_path / "proc", {"lo": (1, 1), "eth0": (1_000, 100), "ifb0": (900, 0), "ifb1": (0, 0)})
    assert NetworkCounter(proc_root=proc, sys_root=tmp_path / "no-sys").read() == (1_000.0, 100.0, ("eth0",))
