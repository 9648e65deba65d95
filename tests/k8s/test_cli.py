"""``iro extender`` / ``iro webhook`` / ``iro scheduler`` from the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.k8s.testing import make_node, make_pod


def test_help_lists_the_kubernetes_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("extender", "webhook", "scheduler"):
        assert cmd in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["extender", "--port", "0", "--solver", "nope"], "unknown solver 'nope'"),
        (["extender", "--port", "0", "--set", "bogus=1"], "--set bogus: unknown setting"),
        (["extender", "--port", "0", "--solver-weight", "2"], "--solver-weight"),
        (["extender", "--port", "0", "--kubeconfig", "/no/such/file"], "--kubeconfig: no such file"),
        (["extender", "--port", "0", "--cluster-config", "/no/such.yaml"], "--cluster-config: no such file"),
        (["webhook", "--port", "0", "--tls-cert", "/no/cert.pem", "--tls-key", "/no/key.pem"], "--tls-cert: no such file"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__], "holds no PEM certificate"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--selector", "novalue"], "--selector"),
        (["scheduler", "--solver", "nope", "--kubeconfig", __file__], "unknown solver 'nope'"),
        (["scheduler"], "--kubeconfig: required when not running inside a cluster"),
        (["extender", "--port", "0", "--watch"], "--kubeconfig: required when not running inside a cluster"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--mode", "affinity"], "--mode affinity: needs --kubeconfig"),
        (["scheduler", "--fallback", "nope", "--kubeconfig", __file__], "--fallback: unknown solver"),
        (["scheduler", "--kubeconfig", __file__, "--fine-tune-registry", "/tmp/x"], "need --feedback-threshold"),
        (["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", "--fine-tune-registry", "/tmp/x",
          "--fine-tune-scenario", "nope"], "--fine-tune-scenario: unknown scenario 'nope'"),
        (["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", "--fine-tune-registry", "/tmp/x",
          "--fine-tune-steps", "0"], "--fine-tune-steps: must be at least 66 (fewer decisions make no gradient update"),
        (["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", "--round-request", __file__],
         "exists and is not a folder"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, fragment, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_bad_cluster_config_names_the_field(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("domains:\n  edge-1: {kind: moon}\n")
    assert main(["extender", "--port", "0", "--cluster-config", str(cfg)]) == 2
    assert "domains[0].kind" in capsys.readouterr().err


def test_port_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["extender", "--port", "70000"])
    assert e.value.code == 2
    assert "port must be 0..65535" in capsys.readouterr().err


def _start(argv: list[str], ready: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", *argv, "--ready-file", str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()}")
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    return proc


def test_extender_command_serves_until_sigterm(tmp_path):
    ready = tmp_path / "ready"
    proc = _start(["extender", "--host", "127.0.0.1", "--port", "0", "--url-prefix", "/iro", "--solver", "best-fit"], ready)
    try:
        url = ready.read_text().strip()
        body = json.dumps({"Pod": make_pod("p", cpu="1"), "Nodes": {"items": [make_node("n1"), make_node("n2", cpu="500m")]}}).encode()
        req = urllib.request.Request(url + "/filter", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            res = json.loads(resp.read())
        assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["n1"]
        assert res["FailedNodes"] == {"n2": "Insufficient cpu"}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "iro extender" in out and "nodeCacheCapable: false" in out


def test_webhook_command_serves_https(tmp_path):
    pytest.importorskip("cryptography")
    import base64
    import ssl

    from iro_fed.k8s.testing import self_signed_cert

    cert, key = self_signed_cert(tmp_path / "tls")
    ready = tmp_path / "ready"
    proc = _start(["webhook", "--host", "127.0.0.1", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key),
                   "--namespaces", "apps"], ready)
    try:
        port = int(ready.read_text().strip().rsplit(":", 1)[1])
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "apps",
                              "object": make_pod("p", namespace="apps")}}
        req = urllib.request.Request(f"https://localhost:{port}/mutate", data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10, context=ssl.create_default_context(cafile=str(cert))) as resp:
            out = json.loads(resp.read())["response"]
        assert out["uid"] == "u-1" and out["allowed"] is True
        assert json.loads(base64.b64decode(out["patch"])) == [{"op": "add", "path": "/spec/schedulerName", "value": "iro"}]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_scheduler_command_binds_against_the_api(tmp_path, api, kubeconfig):
    api.add_node(make_node("n1", cpu="4"))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "scheduler", "--name", "iro", "--kubeconfig", kubeconfig,
                             "--window-s", "0.1", "--solver", "best-fit", "--no-leader-elect"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert api.wait_for(lambda: api.get("pods", "default/web")["spec"].get("nodeName") == "n1", 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "iro scheduler" in out
    assert [e["reason"] for e in api.list("events")] == ["Scheduled"]


def test_scheduler_fine_tune_options_build_the_loop_actions(tmp_path):
    import argparse

    from iro_fed.feedback import DQNFineTune, FederatedRoundRequest
    from iro_fed.k8s.cli import _fine_tune_actions

    args = argparse.Namespace(name="iro-edge", fine_tune_registry=str(tmp_path / "reg"), fine_tune_scenario="bank",
                              fine_tune_steps=128, round_request=str(tmp_path / "reg"))
    req, tune = _fine_tune_actions(args)
    assert isinstance(req, FederatedRoundRequest) and req.site == "iro-edge" and req.root == tmp_path / "reg"
    assert isinstance(tune, DQNFineTune) and tune.scenario == "bank" and tune.steps == 128
    assert tune.registry == tmp_path / "reg"


# --- hostile arguments: each was accepted (or crashed) before the checks ---------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["extender", "--port", "0", "--solver-weight", "nan"], "--solver-weight: must be >= 0 and finite, at most 1, got nan"),
        (["extender", "--port", "0", "--host", "no-such-host.invalid"], "--host: cannot resolve 'no-such-host.invalid'"),
        (["extender", "--port", "0", "--host", ""], "--host: expected an IP address or host name"),
        (["extender", "--port", "0", "--url-prefix", "/a b"], "--url-prefix: expected a URL path"),
        (["extender", "--port", "0", "--ready-file", f"{__file__}/ready"], f"--ready-file: cannot make folder '{__file__}'"),
        (["extender", "--port", "0", "--cluster-config", "/"], "--cluster-config: '/' is a folder"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--budget-s", "nan"],
         "--budget-s: must be > 0 and finite, at most 30, got nan"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--budget-s", "60"],
         "--budget-s: must be > 0 and finite, at most 30, got 60"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--top-k", "100000"],
         "--top-k: must be between 1 and 1000, got 100000"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--scheduler-name", ""],
         "--scheduler-name: must not be empty"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--namespaces", "Apps,b"],
         "--namespaces: 'Apps' is not a valid Kubernetes name"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--host", "bad host"], "--host"),
        (["scheduler", "--time-limit-s", "nan"], "--time-limit-s: must be > 0 and finite, got nan"),
        (["scheduler", "--time-limit-s", "0"], "--time-limit-s: must be > 0"),
        (["scheduler", "--window-s", "inf"], "--window-s: must be >= 0 and finite, at most 3600, got inf"),
        (["scheduler", "--metrics-poll-s", "-1"], "--metrics-poll-s: must be > 0"),
        (["scheduler", "--feedback-threshold", "nan"], "--feedback-threshold: must be > 0 and finite, got nan"),
        (["scheduler", "--max-batch", "0"], "--max-batch: must be >= 1"),
        (["scheduler", "--name", ""], "--name: must not be empty"),
        (["scheduler", "--name", "My_Scheduler"], "--name: 'My_Scheduler' is not a valid Kubernetes name"),
        (["scheduler", "--lease-namespace", ""], "--lease-namespace: must not be empty"),
        # `$` matched before a trailing newline: each of these was accepted as a Kubernetes name
        (["scheduler", "--name", "iro\n"], "--name: 'iro\\n' is not a valid Kubernetes name"),
        (["scheduler", "--lease-namespace", "kube-system\n"], "--lease-namespace: 'kube-system\\n' is not a valid Kubernetes name"),
        (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--scheduler-name", "iro\n"],
         "--scheduler-name: 'iro\\n' is not a valid Kubernetes name"),
        (["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", "--fine-tune-registry",
          f"{__file__}/reg"], f"--fine-tune-registry: cannot make folder '{__file__}/reg': '{__file__}' is a file"),
        (["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", "--round-request",
          f"{__file__}/req"], f"--round-request: cannot make folder '{__file__}/req': '{__file__}' is a file"),
    ],
)
def test_hostile_arguments_exit_2_naming_the_flag(argv, fragment, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err
    assert not Path("/no/such/tree").exists()  # nothing made on bad input


def test_metrics_port_0_is_refused(capsys):
    """Port 0 would serve the metrics on a port nobody is told about."""
    with pytest.raises(SystemExit) as e:
        main(["scheduler", "--metrics-port", "0"])
    assert e.value.code == 2
    assert "--metrics-port: port must be 1..65535" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("latin1.yaml", b"domains:\n  caf\xe9: {kind: edge}\n", "not UTF-8 text: byte 0xe9 at offset 14 (line 2)"),
        ("broken.json", b'{"domains": [', "not valid JSON"),
        ("list.json", b"[1, 2]", "the document must be an object, got list"),
        ("weights.yaml", b"weights: 5\n", "weights: expected a map, got int"),
        ("latency.yaml", b"latency_ms: {eu: 5}\n", "latency_ms.eu: expected a map"),
        ("resources.yaml", b"resources: cpu\n", "resources: expected a list"),
    ],
)
def test_bad_cluster_config_files_name_the_flag_and_file(tmp_path, capsys, name, content, fragment):
    cfg = tmp_path / name
    cfg.write_bytes(content)
    for argv in (["extender", "--port", "0"], ["scheduler"]):  # the scheduler reads it before it needs the cluster
        assert main([*argv, "--cluster-config", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert "--cluster-config" in err and name in err and fragment in err, err


@pytest.mark.parametrize("name", ["bom.json", "bom.yaml"])
def test_a_cluster_config_with_a_byte_order_mark_loads(tmp_path, capsys, monkeypatch, name):
    """Read by the one document loader, as every other file: a leading BOM (some editors write
    one) is fine. json.loads refused it ('Unexpected UTF-8 BOM'), so --cluster-config did."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    body = '{"domains": {"edge-1": {"kind": "edge"}}}' if name.endswith(".json") else "domains:\n  edge-1: {kind: edge}\n"
    cfg = tmp_path / name
    cfg.write_bytes(b"\xef\xbb\xbf" + body.encode())
    # The scheduler reads the config first, then needs a cluster: the config was accepted.
    assert main(["scheduler", "--cluster-config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "--cluster-config" not in err and "--kubeconfig: required" in err, err


# --- waits without an upper bound: the scheduler's thread waits on a threading.Event, which
# raises OverflowError beyond ~9e9 s (the thread died, no pod was ever scheduled) -------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window-s", "1e10"], "--window-s: must be >= 0 and finite, at most 3600, got 1e+10"),
        (["--metrics-poll-s", "1e10"], "--metrics-poll-s: must be > 0 and finite, at most 86400, got 1e+10"),
        (["--fine-tune-steps", "1000000000000"], "--fine-tune-steps: must be between 66 and 100000000"),
    ],
)
def test_scheduler_waits_and_counts_out_of_range_exit_2_from_the_command(tmp_path, argv, message):
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.run([str(Path(sys.executable).parent / "iro"), "scheduler", "--kubeconfig", __file__, *argv],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_webhook_tls_errors_name_the_file_at_fault(tmp_path, capsys, monkeypatch):
    """OpenSSL's own "[SSL] PEM lib (_ssl.c:...)" names neither file nor what is wrong with it."""
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from iro_fed.k8s.testing import self_signed_cert

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cert, key = self_signed_cert(tmp_path / "a")
    _, other_key = self_signed_cert(tmp_path / "b")
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    cases = [
        (key, key, f"--tls-cert: {key} holds no PEM certificate"),
        (cert, cert, f"--tls-key: {cert} holds no PEM private key"),
        (cert, other_key, f"--tls-key: {other_key} is not the private key of the certificate in --tls-cert {cert}"),
        (cert, encrypted, f"--tls-key: {encrypted} is an encrypted private key"),
    ]
    for cert_file, key_file, message in cases:
        assert main(["webhook", "--host", "127.0.0.1", "--port", "0", "--tls-cert", str(cert_file), "--tls-key", str(key_file)]) == 2
        assert message in capsys.readouterr().err


def test_an_encrypted_key_never_asks_for_a_pass_phrase_on_the_terminal(tmp_path):
    """OpenSSL asks for an encrypted key's pass phrase on the controlling terminal: a webhook
    started from a shell (or reloading a renewed certificate) hung there instead of exiting 2."""
    pytest.importorskip("cryptography")
    import fcntl
    import pty  # noqa: F401  (POSIX only, as the servers)
    import subprocess
    import sys
    import termios

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from iro_fed.k8s.testing import self_signed_cert

    cert, _ = self_signed_cert(tmp_path / "a")
    key = tmp_path / "traditional.pem"  # "Proc-Type: 4,ENCRYPTED" inside an RSA PRIVATE KEY block
    key.write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"pw")))
    code = ("import sys; from iro_fed.k8s.webhook import _tls_context\n"
            "try:\n    _tls_context(sys.argv[1], sys.argv[2])\nexcept OSError as exc:\n    print('refused', exc)\n")
    controller, terminal = os.openpty()

    def take_terminal() -> None:  # the child's controlling terminal: where OpenSSL would prompt
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-c", code, str(cert), str(key)], stdin=terminal, stdout=subprocess.PIPE,
                            stderr=terminal, preexec_fn=take_terminal, text=True)
    os.close(terminal)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("the key load waited for a pass phrase on the terminal")
    finally:
        os.close(controller)
    assert out.startswith("refused"), out
