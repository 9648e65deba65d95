"""`iro fed` argument handling (exit 2 on bad input), TLS-first server/node commands, certificates."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from iro_fed.cli import main  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["fed", "local", "--nodes", "0"], "--nodes"),
    (["fed", "local", "--rounds", "0"], "--rounds"),
    (["fed", "local", "--strategy", "avg"], "strategy: unknown 'avg'"),
    (["fed", "local", "--set", "local-steps=abc"], "local-steps: expected int"),
    (["fed", "local", "--set", "no-such-key=1"], "unknown federated setting"),
    (["fed", "local", "--set", "novalue"], "--set: expected KEY=VALUE"),
    (["fed", "local", "--supernode-auth"], "--supernode-auth needs --tls"),
    (["fed", "server"], "TLS needs --ssl-ca-certfile"),
    (["fed", "server", "--insecure", "--enable-supernode-auth"], "--enable-supernode-auth needs TLS"),
    (["fed", "server", "--ssl-certfile", "x.crt"], "go together"),
    (["fed", "node", "--superlink", "host:1", "--site", "0"], "TLS needs --root-certificates"),
    (["fed", "node", "--superlink", "host", "--site", "0", "--insecure"], "--superlink: expected HOST:PORT"),
    (["fed", "node", "--superlink", "h:1", "--site", "-1", "--insecure"], "--site"),
    (["fed", "node", "--superlink", "h:1", "--site", "0", "--root-certificates", "/nonexistent/ca.crt"],
     "no such file"),
])
def test_bad_input_exits_2_naming_the_argument(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_registry_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    f = tmp_path / "reg"
    f.write_text("x")
    assert main(["fed", "local", "--registry", str(f)]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["fed", "local", "--registry", str(f / "sub")]) == 2
    assert "--registry: cannot create" in capsys.readouterr().err


def test_certs_then_tls_server_and_node_commands(tmp_path, capsys) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

    out = tmp_path / "pki"
    assert main(["fed", "certs", "--out", str(out), "--host", "fl.example.org", "--host", "10.0.0.5",
                 "--node-keys", "2"]) == 0
    cert = x509.load_pem_x509_certificate((out / "server.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["fl.example.org"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert (out / "server.key").stat().st_mode & 0o077 == 0  # private keys are not readable by others
    load_ssh_private_key((out / "node0").read_bytes(), password=None)
    load_ssh_public_key((out / "node1.pub").read_bytes())
    capsys.readouterr()

    assert main(["fed", "server", "--ssl-ca-certfile", str(out / "ca.crt"), "--ssl-certfile", str(out / "server.crt"),
                 "--ssl-keyfile", str(out / "server.key"), "--enable-supernode-auth", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    assert "--ssl-certfile" in cmd and "--enable-supernode-auth" in cmd and "--insecure" not in cmd
    assert main(["fed", "node", "--superlink", "fl.example.org:8000", "--site", "3", "--root-certificates",
                 str(out / "ca.crt"), "--auth-key", str(out / "node0"), "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    assert "--root-certificates" in cmd and "--auth-supernode-private-key" in cmd and "site=3" in cmd
    assert "--insecure" not in cmd
    assert main(["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--dry-run"]) == 0
    assert "--insecure" in capsys.readouterr().out
