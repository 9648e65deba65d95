"""m2: `iro webhook --metrics-port` serves the webhook's counters (budget refusals included) to
Prometheus; --metrics-host without a port is a usage error."""

from __future__ import annotations

import signal
import socket
import urllib.request

import pytest

from iro_fed.cli import main

from .test_cli import _start


def test_metrics_host_without_port_is_refused(tmp_path, capsys):
    (tmp_path / "c").write_text("x")
    (tmp_path / "k").write_text("y")
    assert main(["webhook", "--port", "8443", "--tls-cert", str(tmp_path / "c"), "--tls-key", str(tmp_path / "k"),
                 "--metrics-host", "127.0.0.1"]) == 2
    assert "--metrics-host: needs --metrics-port" in capsys.readouterr().err


def test_webhook_serves_its_counters(tmp_path):
    pytest.importorskip("cryptography")
    pytest.importorskip("prometheus_client")
    from iro_fed.k8s.testing import self_signed_cert

    cert, key = self_signed_cert(tmp_path / "tls")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    proc = _start(["webhook", "--host", "127.0.0.1", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key),
                   "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"], tmp_path / "ready")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert "iro_webhook_budget_refused_total 0.0" in text
    assert f"127.0.0.1:{metrics_port}/metrics" in out
