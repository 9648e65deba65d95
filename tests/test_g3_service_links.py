"""The kubelet's service-link variables (enableServiceLinks, on by default) for a Service named
iro-agent[-*] are not agent settings and no error; a real typo of a setting still is; the
DaemonSet turns the links off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edge_agent.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "edge-cloud-gpu.yaml"


def _links(name: str, ip: str, ports: list[tuple[str, int, str]]) -> dict[str, str]:
    """What pkg/kubelet/envvars FromServices sets for one Service: ports as (name, port, protocol)."""
    prefix = name.upper().replace("-", "_")
    host = f"[{ip}]" if ":" in ip else ip
    env = {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(ports[0][1])}
    for port_name, port, _ in ports:
        if port_name:
            env[f"{prefix}_SERVICE_PORT_{port_name.upper().replace('-', '_')}"] = str(port)
    for i, (_, port, proto) in enumerate(ports):
        url = f"{proto.lower()}://{host}:{port}"
        if i == 0:
            env[f"{prefix}_PORT"] = url
        pp = f"{prefix}_PORT_{port}_{proto}"
        env |= {pp: url, f"{pp}_PROTO": proto.lower(), f"{pp}_PORT": str(port), f"{pp}_ADDR": ip}
    return env


SERVICES = [
    ("iro-agent", "10.96.0.12", [("", 9464, "TCP")]),
    ("iro-agent", "10.96.0.12", [("metrics", 9464, "TCP"), ("dns-udp", 53, "UDP"), ("s", 7, "SCTP")]),
    ("iro-agent-metrics", "fd00::12", [("http-metrics", 9464, "TCP")]),
    ("iro-agent--x", "10.0.0.1", [("a1", 65535, "TCP")]),
]


@pytest.mark.parametrize(("name", "ip", "ports"), SERVICES)
def test_service_links_are_no_error_and_set_nothing(name, ip, ports) -> None:
    """Old code: 'IRO_AGENT_SERVICE_HOST: unknown environment variable' (and IRO_AGENT_PORT
    tcp://10.96.0.12:9464 as listen.port: not an integer): the DaemonSet crash-looped."""
    links = _links(name, ip, ports)
    cfg = load_config(None, env={"IRO_AGENT_PROBLEM": str(PROBLEM)} | links)
    assert cfg.listen.port == load_config(None, env={"IRO_AGENT_PROBLEM": str(PROBLEM)}).listen.port
    from edge_agent.config import service_link_vars  # new with the fix

    assert service_link_vars(links) == {v for v in links if v.startswith("IRO_AGENT_")}


def test_the_issue_repro_passes_edge_agent_check() -> None:
    """The report's command: exit 2 on the old code."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"} | _links("iro-agent", "10.96.0.12", [("", 9464, "TCP")])
    code = "import sys; from edge_agent.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "check", "--config", str(ROOT / "examples" / "agent.yaml")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_port_set_in_the_pod_wins_over_the_link() -> None:
    """A container's own env overrides a link of the same name: IRO_AGENT_PORT=9000 is the setting."""
    env = _links("iro-agent", "10.96.0.12", [("", 9464, "TCP")]) | {"IRO_AGENT_PORT": "9000"}
    cfg = load_config(None, env={"IRO_AGENT_PROBLEM": str(PROBLEM)} | env)
    assert cfg.listen.port == 9000


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("IRO_AGENT_PROMETHEUS", "http://127.0.0.1:9090"),  # a typo, with links around
        ("IRO_AGENT_SERVICE_PORTS", "1"),  # no link shape
        ("IRO_AGENT_PORT_9464", "tcp://10.96.0.12:9464"),  # no protocol
        ("IRO_AGENT_PORT_9464_HTTP", "tcp://10.96.0.12:9464"),  # no such protocol
        ("IRO_AGENT_PORT_09464_TCP", "tcp://10.96.0.12:9464"),  # no leading zero in a port
        ("IRO_AGENT_PORT_9464_TCP_HOST", "10.96.0.12"),  # not PROTO, PORT or ADDR
        ("IRO_AGENT_METRICS_SERVICE_PORT", "9464"),  # no IRO_AGENT_METRICS_SERVICE_HOST
    ],
)
def test_other_agent_variables_are_still_errors(var, value) -> None:
    env = {"IRO_AGENT_PROBLEM": str(PROBLEM), var: value} | _links("iro-agent", "10.96.0.12", [("", 9464, "TCP")])
    with pytest.raises(ConfigError) as info:
        load_config(None, env=env)
    assert dict(info.value.errors)[var].startswith("unknown environment variable"), info.value.errors


def test_links_count_only_with_their_service_host() -> None:
    """The kubelet always sets <NAME>_SERVICE_HOST: without it, IRO_AGENT_SERVICE_PORT is a typo."""
    env = {"IRO_AGENT_PROBLEM": str(PROBLEM), "IRO_AGENT_SERVICE_PORT": "9464"}
    with pytest.raises(ConfigError) as info:
        load_config(None, env=env)
    assert "IRO_AGENT_SERVICE_PORT" in dict(info.value.errors)


@pytest.mark.parametrize("value", ["tcp://10.96.0.99:9464", "http://10.96.0.12:9464", "tcp://10.96.0.12:x"])
def test_a_port_setting_not_the_links_value_is_read_as_the_setting(value) -> None:
    """IRO_AGENT_PORT is skipped only as the kubelet writes it (its Service's IP): else its error stays."""
    env = _links("iro-agent", "10.96.0.12", [("", 9464, "TCP")]) | {"IRO_AGENT_PORT": value}
    with pytest.raises(ConfigError) as info:
        load_config(None, env={"IRO_AGENT_PROBLEM": str(PROBLEM)} | env)
    assert "listen.port (from IRO_AGENT_PORT)" in dict(info.value.errors), info.value.errors


def test_the_daemonset_turns_service_links_off() -> None:
    """Old manifest: no enableServiceLinks (default true)."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "edge-agent.yaml").read_text()))
    [ds] = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["enableServiceLinks"] is False
