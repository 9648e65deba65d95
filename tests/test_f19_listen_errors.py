"""A server that cannot listen names the flag or setting at fault, and shows IPv6 as [h]:p (f19;
goes with the patches of edge_agent/cli.py and iro_fed/k8s/cli.py)."""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

import pytest
import yaml

from tests.test_f19_ipv6_listen import needs_ipv6

NOT_MINE = "192.0.2.1"  # TEST-NET-1: an address of no machine here (EADDRNOTAVAIL)


def _busy_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_extender_bind_errors_name_host_or_port(capsys) -> None:
    from iro_fed.cli import main

    busy, port = _busy_port()
    with busy:
        assert main(["extender", "--host", "127.0.0.1", "--port", str(port)]) == 2
        assert f"--port: cannot listen on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert main(["extender", "--host", NOT_MINE, "--port", str(port)]) == 2
    assert f"--host: cannot listen on {NOT_MINE}:{port}: " in capsys.readouterr().err


def test_webhook_bind_errors_do_not_blame_the_tls_files(tmp_path: Path, capsys) -> None:
    pytest.importorskip("cryptography")
    from iro_fed.cli import main
    from iro_fed.k8s.testing import self_signed_cert

    cert, key = self_signed_cert(tmp_path)
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    busy, port = _busy_port()
    with busy:
        assert main(["webhook", "--host", "127.0.0.1", "--port", str(port), *tls]) == 2
        err = capsys.readouterr().err
        assert f"--port: cannot listen on 127.0.0.1:{port}: Address already in use" in err and "--tls" not in err, err
    assert main(["webhook", "--host", NOT_MINE, "--port", str(port), *tls]) == 2
    err = capsys.readouterr().err
    assert f"--host: cannot listen on {NOT_MINE}:{port}: " in err and "--tls" not in err, err


def _agent_config(tmp_path: Path, host: str, port: int = 0) -> Path:
    doc = {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "edge-1", "kind": "edge"}],
        "nodes": [{"name": "e1", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384}}],
        "workloads": [],
    }
    (tmp_path / "site.json").write_text(json.dumps(doc))
    path = tmp_path / "agent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "problem": str(tmp_path / "site.json"),
                "site": "edge-1",
                "node_name": "e1",
                "listen": {"host": host, "port": port},
                "log_level": "warning",
            }
        )
    )
    return path


@needs_ipv6
def test_edge_agent_check_and_run_show_ipv6_in_brackets(tmp_path: Path, capsys) -> None:
    from edge_agent.cli import main

    assert main(["check", "--config", str(_agent_config(tmp_path, "::1", 47321))]) == 0
    assert json.loads(capsys.readouterr().out)["listen"] == "[::1]:47321"
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["run", "--config", str(_agent_config(tmp_path, "::1", port))]) == 2
    err = capsys.readouterr().err
    assert f"listen.port: cannot listen on [::1]:{port}: Address already in use" in err, err


def test_edge_agent_names_listen_host_for_a_family_the_kernel_lacks() -> None:
    from edge_agent.cli import _listen_key

    assert _listen_key(OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")) == "listen.host"
    assert _listen_key(OSError(errno.EADDRINUSE, "Address already in use")) == "listen.port"
