"""`iro fed` argument handling (exit 2 on bad input), TLS-first server/node commands, certificates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--rounds", "0"], "--rounds"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--poll-s", "0"], "--poll-s"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--min-interval-s", "-1"],
     "--min-interval-s"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--timeout", "nan"], "--timeout"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", " "], "--federation"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--set", "resume=maybe"],
     "resume: expected bool"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--app", "/nonexistent/app"], "--app"),
    (["fed", "rounds", "--requests", __file__, "--federation", "p"], "--requests"),
])
def test_bad_input_exits_2_naming_the_argument(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not any(Path("/nonexistent").glob("*"))  # nothing written on bad input


def test_registry_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    f = tmp_path / "reg"
    f.write_text("x")
    assert main(["fed", "local", "--registry", str(f)]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["fed", "local", "--registry", str(f / "sub")]) == 2
    assert f"--registry: cannot make folder '{f / 'sub'}': '{f}' is a file" in capsys.readouterr().err


def test_certs_then_tls_server_and_node_commands(tmp_path, capsys) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

    out = tmp_path / "pki"
    assert main(["fed", "certs", "--out", str(out), "--host", "fl.example.org", "--host", "10.0.0.5",
                 "--node-keys", "2"]) == 0
    cert = x509.load_pem_x509_certificate((out / "server.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # The loopback names are always added: the SuperLink's SuperExec dials 127.0.0.1 and verifies
    # the certificate (before, --host replaced them and no ServerApp could start).
    assert san.get_values_for_type(x509.DNSName) == ["fl.example.org", "localhost"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.5", "127.0.0.1"]
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "fl.example.org"
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
    node_cmd, exec_cmd = capsys.readouterr().out.splitlines()
    assert "--root-certificates" in node_cmd and "--auth-supernode-private-key" in node_cmd and "site=3" in node_cmd
    assert "--insecure" not in node_cmd and "--isolation process" in node_cmd  # the warm executor serves it
    assert "iro_fed.federated.executor --runtime-api-address 127.0.0.1:9094" in exec_cmd
    assert main(["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--executor", "flower",
                 "--dry-run"]) == 0
    (node_cmd,) = capsys.readouterr().out.splitlines()
    assert "--insecure" in node_cmd and "--isolation" not in node_cmd


def test_fed_node_runs_the_supernode_with_a_warm_executor_and_stops_both(tmp_path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    psutil = pytest.importorskip("psutil")
    from iro_fed.federated.executor import READY_LINE
    from iro_fed.federated.local import flower_bin

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(tmp_path / "flwr")}
    link_port, runtime_port = free_port(), free_port()
    link = subprocess.Popen([flower_bin("flower-superlink"), "--host", "127.0.0.1", "--port", str(link_port),
                             "--insecure", "--disable-runtime-dependency-installation"], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = tmp_path / "node.log"
    with open(log, "wb") as out:
        node = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "fed", "node", "--superlink",
                                 f"127.0.0.1:{link_port}", "--site", "0", "--insecure", "--port", str(runtime_port)],
                                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180  # the executor imports torch and flwr before it says so
        while READY_LINE not in log.read_text(errors="replace") and node.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert READY_LINE in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]
        children = psutil.Process(node.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        assert "flower-supernode" in names and "--isolation process" in names and "iro_fed.federated.executor" in names
        node.send_signal(signal.SIGTERM)
        assert node.wait(timeout=60) is not None
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [" ".join(p.cmdline()) for p in alive]
    finally:
        for proc in (node, link):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL) if proc is link else proc.kill()
                proc.wait(timeout=10)


# --- hostile arguments: each was accepted before, and failed later or never ------------------


@pytest.mark.parametrize("argv, message", [
    (["fed", "local", "--nodes", "100000"], "--nodes: must be between 1 and 64, got 100000"),
    (["fed", "local", "--timeout", "nan"], "--timeout: must be > 0 and finite, got nan"),
    (["fed", "local", "--timeout", "0"], "--timeout: must be > 0 and finite, got 0"),
    (["fed", "local", "--json", f"{__file__}/out.json"], f"--json: cannot make folder '{__file__}'"),
    (["fed", "local", "--workdir", f"{__file__}/a/b"], f"'{__file__}' is a file"),
    (["fed", "local", "--registry", f"{__file__}/a/policies"], f"'{__file__}' is a file"),
    (["fed", "server", "--insecure", "--port", "0"], "--port: must be between 1 and 65535, got 0"),
    (["fed", "server", "--insecure", "--port", "70000"], "--port: must be between 1 and 65535, got 70000"),
    (["fed", "server", "--insecure", "--host", ""], "--host: expected an IP address or host name"),
    (["fed", "server", "--insecure", "--host", "no-such-host.invalid"], "--host: cannot resolve"),
    (["fed", "server", "--insecure", "--database", f"{__file__}/state.db"], "--database: cannot make folder"),
    (["fed", "node", "--superlink", "h:0", "--site", "0", "--insecure"], "--superlink: expected HOST:PORT"),
    (["fed", "node", "--superlink", "h:99999", "--site", "0", "--insecure"], "--superlink: expected HOST:PORT"),
    (["fed", "node", "--superlink", "https://h:8000", "--site", "0", "--insecure"], "--superlink: expected HOST:PORT"),
    (["fed", "node", "--superlink", "[]:8000", "--site", "0", "--insecure"], "--superlink: expected HOST:PORT"),
    (["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--port", "0"], "--port: must be between 1 and 65535, got 0"),
    (["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--node-config", "zone eu"],
     "--node-config: expected space-separated key=value pairs"),
    (["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--node-config", "zone=eu-west"],
     "--node-config: cannot read zone=eu-west"),
    (["fed", "node", "--superlink", "h:1", "--site", "0", "--insecure", "--node-config", "site=2"],
     "--node-config: site is set by --site"),
    (["fed", "rounds", "--requests", "/nonexistent/r", "--federation", "p", "--poll-s", "inf"], "--poll-s"),
    (["fed", "local", "--registry", "/nonexistent/p", "--rounds", "1000000000"], "--rounds: must be between 1 and 100000"),
    (["fed", "local", "--registry", "/nonexistent/p", "--local-steps", "1000000000"], "local-steps: expected 1..100,000,000"),
    (["fed", "local", "--registry", "/nonexistent/p", "--set", "hours=100000"], "hours: expected a finite number > 0"),
    (["fed", "certs", "--out", f"{__file__}/a/pki"], f"--out: cannot make folder '{__file__}/a/pki'"),
    (["fed", "certs", "--out", "/nonexistent/pki", "--days", "0"], "--days: must be between 1 and 3650, got 0"),
    (["fed", "certs", "--out", "/nonexistent/pki", "--days", "100000"], "--days: must be between 1 and 3650, got 100000"),
    (["fed", "certs", "--out", "/nonexistent/pki", "--node-keys", "1000000"], "--node-keys: must be between 0 and 1000, got 1000000"),
    (["fed", "certs", "--out", "/nonexistent/pki", "--host", "fl example"], "--host: 'fl example' is neither"),
    (["fed", "certs", "--out", "/nonexistent/pki", "--host", "fl.example\n"], "--host: 'fl.example\\n' is neither"),
])
def test_hostile_arguments_exit_2_naming_the_argument(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not Path("/nonexistent").exists()  # nothing written on bad input


def test_certs_refuse_to_replace_an_existing_ca_without_force(tmp_path, capsys) -> None:
    """A re-run must not silently make a new CA: the SuperLink's certificate and every site's ca.crt
    would stop matching, and node keys registered with the SuperLink would be replaced."""
    out = tmp_path / "pki"
    assert main(["fed", "certs", "--out", str(out), "--node-keys", "1"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["fed", "certs", "--out", str(out), "--node-keys", "1"]) == 2
    err = capsys.readouterr().err
    assert "already holds ca.crt, ca.key, server.crt, server.key, node0, node0.pub" in err and "--force" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched
    assert main(["fed", "certs", "--out", str(out), "--node-keys", "1", "--force"]) == 0
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after.keys() == before.keys() and after["ca.crt"] != before["ca.crt"] and after["node0"] != before["node0"]


@pytest.mark.parametrize("argv, message", [
    # a wait of a day at most: longer is a typo (a threading.Event raised OverflowError past ~9e9 s)
    (["--poll-s", "1e10"], "--poll-s: must be > 0 and finite, at most 86400, got 1e+10"),
    # waited only once requests come: until then the daemon ran, to fail on the first one
    (["--min-interval-s", "1e10"], "--min-interval-s: must be >= 0 and finite, at most 604800, got 1e+10"),
])
def test_rounds_waits_out_of_range_exit_2_from_the_command(tmp_path, argv, message) -> None:
    env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0")
    # A timeout only so that a regression fails instead of hanging; a passing run exits at once.
    proc = subprocess.run([str(Path(sys.executable).parent / "iro"), "fed", "rounds", "--requests", "req",
                           "--federation", "p", *argv], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # the requests folder is not made
