"""Every HTTP server listens on IPv6 as on IPv4 (f19).

The extender, the webhook and the edge agent kept ``ThreadingHTTPServer``'s AF_INET socket
whatever the address: ``::1`` failed with "Address family for hostname not supported" although
the settings checks accepted it. ``::`` takes IPv4 clients too (dual stack). ``iro scheduler``
gains ``--metrics-host``. Each test skips where the kernel has no IPv6.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.httpjson import host_port, listen_address, listen_error_is_host


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 on this machine (cannot bind ::1)")


def _get(host: str, port: int, path: str = "/healthz", tls: bool = False) -> tuple[int, dict]:
    """GET over a connection to ``host`` (an IPv4 or IPv6 literal); the peer address is checked."""
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False  # a self-signed certificate for "localhost": only the transport is tested
        ctx.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=10, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        family = conn.sock.family
        body = json.loads(resp.read())
    finally:
        conn.close()
    assert family == (socket.AF_INET6 if ":" in host else socket.AF_INET)
    return resp.status, body


def test_listen_address_picks_the_family_of_the_address() -> None:
    assert listen_address("127.0.0.1", 80) == (socket.AF_INET, ("127.0.0.1", 80))
    assert listen_address("0.0.0.0", 0)[0] == socket.AF_INET
    assert listen_address("::1", 8443)[0] == socket.AF_INET6
    assert listen_address("::1", 8443)[1][:2] == ("::1", 8443)
    assert listen_address("::", 0)[0] == socket.AF_INET6
    assert listen_address("", 5) == (socket.AF_INET, ("", 5))  # socketserver's INADDR_ANY, as before
    with pytest.raises(socket.gaierror):
        listen_address("no-such-host.invalid", 80)


def test_addresses_are_shown_with_brackets_for_ipv6() -> None:
    assert host_port("::1", 8443) == "[::1]:8443"
    assert host_port("::", 47321) == "[::]:47321"
    assert host_port("0.0.0.0", 10) == "0.0.0.0:10"
    assert host_port("agent.example", 10) == "agent.example:10"


def test_a_bind_error_is_told_host_from_port() -> None:
    import errno

    assert listen_error_is_host(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert listen_error_is_host(OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"))
    assert listen_error_is_host(OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol"))
    assert not listen_error_is_host(OSError(errno.EADDRINUSE, "Address already in use"))
    assert not listen_error_is_host(OSError(errno.EACCES, "Permission denied"))


def _extender(host: str) -> ExtenderServer:
    srv = ExtenderServer(Extender(), host, 0, "/iro")
    srv.serve_in_thread()
    return srv


def _stop(srv) -> None:
    srv.shutdown()
    srv.server_close()


@needs_ipv6
def test_extender_serves_on_ipv6_loopback() -> None:
    srv = _extender("::1")
    try:
        port = srv.server_address[1]
        assert srv.url == f"http://[::1]:{port}/iro"
        status, body = _get("::1", port)
        assert status == 200 and body["ok"] is True
    finally:
        _stop(srv)


@needs_ipv6
def test_extender_on_every_ipv6_address_takes_ipv4_clients_too() -> None:
    srv = _extender("::")
    try:
        port = srv.server_address[1]
        assert srv.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert _get("::1", port)[0] == 200
        assert _get("127.0.0.1", port)[0] == 200  # as a v4-mapped address
    finally:
        _stop(srv)


def test_extender_on_ipv4_and_on_a_name_stays_ipv4() -> None:
    for host in ("127.0.0.1", "localhost"):
        srv = _extender(host)
        try:
            assert srv.address_family == socket.AF_INET
            assert srv.url == f"http://127.0.0.1:{srv.server_address[1]}/iro"
            assert _get("127.0.0.1", srv.server_address[1])[0] == 200
        finally:
            _stop(srv)


@needs_ipv6
@pytest.mark.parametrize("host", ["::1", "::"])
def test_webhook_serves_https_on_ipv6(host: str, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from iro_fed.k8s.testing import self_signed_cert
    from iro_fed.k8s.webhook import Webhook, WebhookServer

    cert, key = self_signed_cert(tmp_path, ("localhost",))
    srv = WebhookServer(Webhook(), str(cert), str(key), host, 0)
    srv.serve_in_thread()
    try:
        port = srv.server_address[1]
        assert srv.url == f"https://[{host}]:{port}"
        clients = ["::1", "127.0.0.1"] if host == "::" else ["::1"]
        for client in clients:
            status, body = _get(client, port, tls=True)
            assert status == 200 and body["ok"] is True, (client, body)
    finally:
        _stop(srv)


def _site_file(tmp_path: Path) -> Path:
    doc = {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "edge-1", "kind": "edge"}, {"name": "az-1", "kind": "zone"}],
        "nodes": [
            {"name": "e1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}},
            {"name": "z1", "domain": "az-1", "capacity": {"cpu": 8000, "memory": 16384}},
        ],
        "workloads": [],
    }
    path = tmp_path / "site.json"
    path.write_text(json.dumps(doc))
    return path


def _agent_config(tmp_path: Path, **overrides) -> Path:
    doc = {
        "problem": str(_site_file(tmp_path)),
        "site": "edge-1",
        "node_name": "e1",
        "listen": {"port": 0},
        "recommend": {"solver": "kube-default"},
        "log_level": "warning",
        **overrides,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@needs_ipv6
@pytest.mark.parametrize("host", ["::1", "::"])
def test_edge_agent_listens_on_ipv6(host: str, tmp_path: Path) -> None:
    from edge_agent.agent import Agent
    from edge_agent.config import load_config

    cfg = load_config(_agent_config(tmp_path), env={"IRO_AGENT_HOST": host})  # as `IRO_AGENT_HOST=:: edge-agent run`
    agent = Agent(cfg)
    agent.start()
    try:
        clients = ["::1", "127.0.0.1"] if host == "::" else ["::1"]
        for client in clients:
            status, body = _get(client, agent.port)
            assert status == 200 and body["status"] == "ok", (client, body)
    finally:
        agent.stop()


@needs_ipv6
def test_scheduler_metrics_are_served_on_metrics_host(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    pytest.importorskip("prometheus_client")
    from iro_fed.k8s.testing import FakeApiServer

    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    api = FakeApiServer().start()
    try:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig.yaml"))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "iro_fed.cli",
                "scheduler",
                "--name",
                "iro",
                "--kubeconfig",
                kubeconfig,
                "--no-leader-elect",
                "--metrics-port",
                str(port),
                "--metrics-host",
                "::1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        text = ""
        try:
            deadline = time.monotonic() + 60
            while "iro_scheduler_unschedulable_pods" not in text and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                try:
                    conn = http.client.HTTPConnection("::1", port, timeout=5)
                    conn.request("GET", "/metrics")
                    text = conn.getresponse().read().decode()
                    conn.close()
                except OSError:
                    time.sleep(0.1)  # not listening yet
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
    finally:
        api.stop()
    assert "iro_scheduler_unschedulable_pods" in text, err
    assert f"[::1]:{port}/metrics" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--metrics-host", "::1"], "--metrics-host: needs --metrics-port"),
        (["--metrics-port", "9100", "--metrics-host", "no-such-host.invalid"], "--metrics-host: cannot resolve"),
        (["--metrics-port", "9100", "--metrics-host", ""], "--metrics-host: expected an IP address or host name"),
    ],
)
def test_bad_metrics_host_exits_2_naming_the_flag(argv, message, capsys, monkeypatch) -> None:
    pytest.importorskip("kubernetes")
    from iro_fed.cli import main

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["scheduler", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "--kubeconfig" not in err, err


def test_metrics_bind_errors_name_the_flag_at_fault(tmp_path: Path, capsys, monkeypatch) -> None:
    pytest.importorskip("kubernetes")
    pytest.importorskip("prometheus_client")
    from iro_fed.cli import main
    from iro_fed.k8s.testing import FakeApiServer

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api = FakeApiServer().start()
    try:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig.yaml"))
        base = ["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect"]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            assert main([*base, "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]) == 2
            assert f"--metrics-port: cannot listen on 127.0.0.1:{port}: " in capsys.readouterr().err
        # An address that is not this machine's (TEST-NET-1): the host is at fault, not the port.
        assert main([*base, "--metrics-port", str(port), "--metrics-host", "192.0.2.1"]) == 2
        assert f"--metrics-host: cannot listen on 192.0.2.1:{port}: " in capsys.readouterr().err
    finally:
        api.stop()
