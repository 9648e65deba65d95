"""`iro fed server` / `iro fed node` / the edge agent load their TLS files before anything starts.

Before, only the files' existence was checked: `iro fed node --root-certificates <an SSH public key>`
started a flower-supernode whose connecting thread died ("no start line") while its HTTP API thread
kept it alive (a node that never connected and never exited), and `iro fed server --ssl-keyfile
<not a key>` ended in uvicorn's traceback; `--dry-run` printed both commands.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from iro_fed.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from iro_fed.federated.certs import make_node_key, make_tls

    out = tmp_path_factory.mktemp("pki")
    paths = make_tls(out)
    other = make_tls(out / "other")  # another CA's pair: its key is not server.crt's
    node = make_node_key(out, "node0")
    empty = out / "empty.crt"
    empty.write_bytes(b"")
    der = out / "ca.der"
    der.write_bytes(b"\x30\x82\x01\x0a\xff\xfe" * 20)  # binary, as a DER file is
    return {**paths, "other_key": other["key"], "ssh_pub": node["public"], "ssh_key": node["private"],
            "empty": empty, "der": der}


def _server(pki: dict[str, Path], **files: str) -> list[str]:
    chosen = {"ca": "ca", "cert": "cert", "key": "key", **files}
    return ["fed", "server", "--host", "127.0.0.1", "--ssl-ca-certfile", str(pki[chosen["ca"]]),
            "--ssl-certfile", str(pki[chosen["cert"]]), "--ssl-keyfile", str(pki[chosen["key"]]), "--dry-run"]


def _node(pki: dict[str, Path], ca: str) -> list[str]:
    return ["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "0", "--root-certificates", str(pki[ca]),
            "--dry-run"]


@pytest.mark.parametrize("ca, message", [
    ("ssh_pub", "holds no loadable PEM CA certificate"),
    ("key", "holds no loadable PEM CA certificate"),
    ("empty", "holds no loadable PEM CA certificate"),
    ("der", "not ASCII text"),
])
def test_node_root_certificates_that_are_no_ca_exit_2(pki, ca, message, capsys) -> None:
    assert main(_node(pki, ca)) == 2
    err = capsys.readouterr().err
    assert f"iro fed node: error: --root-certificates: {str(pki[ca])!r} " in err and message in err, err


def test_node_with_a_pem_ca_prints_its_command(pki, capsys) -> None:
    assert main(_node(pki, "ca")) == 0
    assert f"--root-certificates {pki['ca']}" in capsys.readouterr().out


@pytest.mark.parametrize("files, flag, message", [
    ({"ca": "ssh_pub"}, "--ssl-ca-certfile", "holds no loadable PEM CA certificate"),
    ({"cert": "key"}, "--ssl-certfile", "holds no loadable PEM certificate"),
    ({"key": "ssh_pub"}, "--ssl-keyfile", "holds no loadable PEM private key"),
    ({"key": "ssh_key"}, "--ssl-keyfile", "holds no loadable PEM private key"),  # OpenSSH, not PEM PKCS#8
    ({"key": "other_key"}, "--ssl-keyfile", "is not the private key of the certificate"),
])
def test_server_tls_files_that_cannot_serve_exit_2(pki, files, flag, message, capsys) -> None:
    assert main(_server(pki, **files)) == 2
    err = capsys.readouterr().err
    assert f"iro fed server: error: {flag}: " in err and message in err, err


def test_server_refuses_an_encrypted_key(pki, tmp_path, capsys) -> None:
    # uvicorn gives OpenSSL no pass phrase: it would ask for one on the terminal of a service
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki["key"].read_bytes(), password=None)
    encrypted = tmp_path / "server.key"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"secret")))
    argv = _server(pki)
    argv[argv.index("--ssl-keyfile") + 1] = str(encrypted)
    assert main(argv) == 2
    assert "--ssl-keyfile: " in (err := capsys.readouterr().err) and "encrypted private key" in err, err


def test_server_with_its_pair_prints_its_command(pki, capsys) -> None:
    assert main(_server(pki)) == 0
    assert f"--ssl-keyfile {pki['key']}" in capsys.readouterr().out


def test_edge_agent_check_loads_root_certificates(pki) -> None:
    from edge_agent.config import FederatedConfig, _check_federated

    def errors(ca: Path) -> dict[str, str]:
        found: list[tuple[str, str]] = []
        _check_federated(FederatedConfig(enabled=True, superlink="127.0.0.1:9092", root_certificates=ca), found)
        return dict(found)

    bad = errors(pki["ssh_pub"])
    assert "holds no loadable PEM CA certificate" in bad.get("federated.root_certificates", ""), bad
    assert "federated.root_certificates" not in errors(pki["ca"])
