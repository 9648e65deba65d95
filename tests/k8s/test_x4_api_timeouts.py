"""The Kubernetes daemons' timeouts as flags: ``--api-timeout-s`` (an API write's wait for its
answer, ``Kube.write_timeout_s``), ``--watch-timeout-s`` (a watch's ``timeoutSeconds``), the
extender's ``--http-timeout-s`` (kube-scheduler's ``httpTimeout``) and the webhook's
``--timeout-seconds`` (its configuration's ``timeoutSeconds``). They were library settings only:
an operator could not match them to the deployment. Bad values exit 2 naming the flag; given
values reach the clients and servers (over real HTTP on 127.0.0.1, the loopback API server);
the defaults are unchanged."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from iro_fed.cli import build_parser, main
from iro_fed.k8s import cli as k8s_cli
from iro_fed.k8s.client import ClusterCache, Kube, Reflector
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.test_server_hardening import Conn

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("argv", "message"), [
    (["scheduler", "--api-timeout-s", "0"], "--api-timeout-s: must be > 0 and finite, at most 3600, got 0"),
    (["scheduler", "--api-timeout-s", "nan"], "--api-timeout-s: must be > 0 and finite, at most 3600, got nan"),
    (["scheduler", "--api-timeout-s", "1e10"], "--api-timeout-s: must be > 0 and finite, at most 3600, got 1e+10"),
    (["scheduler", "--watch-timeout-s", "0"], "--watch-timeout-s: must be between 1 and 3600, got 0"),
    (["extender", "--port", "0", "--kubeconfig", __file__, "--watch-timeout-s", "3601"],
     "--watch-timeout-s: must be between 1 and 3600, got 3601"),
    (["extender", "--port", "0", "--api-timeout-s", "5"],
     "--api-timeout-s: needs --kubeconfig or --watch (without it no API server is called)"),
    (["extender", "--port", "0", "--watch-timeout-s", "5"], "--watch-timeout-s: needs --kubeconfig or --watch"),
    (["extender", "--port", "0", "--http-timeout-s", "0"], "--http-timeout-s: must be > 0 and finite, at most 3600, got 0"),
    (["extender", "--port", "0", "--http-timeout-s", "inf"], "--http-timeout-s: must be > 0 and finite"),
    (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--timeout-seconds", "31"],
     "--timeout-seconds: must be between 1 and 30, got 31"),
    (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--timeout-seconds", "2"],
     "--budget-s: must be below --timeout-seconds (2), got 2"),
    (["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--watch-timeout-s", "5"],
     "--watch-timeout-s: needs --mode affinity"),
])
def test_bad_timeouts_exit_2_naming_the_flag(argv: list[str], message: str, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"iro {argv[0]}: error: {message}" in err, err


@pytest.mark.parametrize("argv", [["scheduler", "--watch-timeout-s", "1.5"],
                                  ["webhook", "--port", "0", "--tls-cert", "c", "--tls-key", "k", "--timeout-seconds", "5.5"],
                                  ["extender", "--port", "0", "--api-timeout-s", "soon"]])
def test_a_timeout_that_is_no_number_of_the_right_kind_exits_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    flag = next(a for a in argv if "timeout" in a)
    assert f"argument {flag}: invalid" in capsys.readouterr().err


def test_help_documents_each_timeout_and_its_library_default() -> None:
    # The help states the defaults; they are the library's (which the flags leave alone when not given).
    from iro_fed.k8s import extender, webhook

    helps = {cmd: _help(cmd) for cmd in ("extender", "webhook", "scheduler")}
    default_watch = ClusterCache.__init__.__defaults__[1]  # type: ignore[index]
    assert default_watch == Reflector.__init__.__defaults__[2] == 60  # type: ignore[index]
    for cmd in ("extender", "scheduler"):
        assert "--api-timeout-s S seconds each API write" in " ".join(helps[cmd].split())
    assert f"(default {Kube.write_timeout_s:g}, at most 3600)" in " ".join(helps["scheduler"].split())
    # The extender's bind must end before kube-scheduler stops waiting for it (test_z2_hung_api.py).
    assert (f"(default {k8s_cli.EXTENDER_BIND_SHARE:g} x --http-timeout-s up to {Kube.write_timeout_s:g}, i.e. 4 with "
            f"kube's 5 s httpTimeout") in " ".join(helps["extender"].split())
    for cmd in ("extender", "webhook", "scheduler"):
        # no one default: without the flag each watch draws 60..119 s (client-go's jitter over the library's 60)
        assert "(1..3600)" in helps[cmd] and f"{default_watch}..{2 * default_watch - 1} s at random" in " ".join(helps[cmd].split())
    assert "--api-timeout-s" not in helps["webhook"]  # the webhook writes nothing to the API server
    assert f"(default {extender.HTTP_TIMEOUT_S:g}, kube's default" in " ".join(helps["extender"].split())
    assert f"(default {webhook.TIMEOUT_SECONDS:g}, as deploy/; 1..30)" in " ".join(helps["webhook"].split())


def _help(cmd: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "iro_fed.cli", cmd, "--help"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, check=True)
    return proc.stdout


def _watch_timeouts(api: FakeApiServer, path: str) -> set[str]:
    with api._lock:
        return {parse_qs(r["query"]).get("timeoutSeconds", [""])[0] for r in api.requests
                if r["method"] == "GET" and r["path"] == path and "watch=true" in r["query"]}


def test_scheduler_flags_reach_its_client_and_watches(api: FakeApiServer, kubeconfig: str) -> None:
    parse = build_parser().parse_args
    parts = k8s_cli.build_scheduler(parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect",
                                           "--api-timeout-s", "2.5", "--watch-timeout-s", "7"]))
    sched = parts.scheduler
    assert sched.kube.write_timeout_s == 2.5
    assert Kube.write_timeout_s == 30.0  # set on this client, not on every Kube
    assert {r.watch_timeout_s for r in (sched.cache.nodes, sched.cache.pods, sched.pending)} == {7}
    sched.start()
    try:  # the watches the API server sees ask for 7 s
        assert api.wait_for(lambda: _watch_timeouts(api, "/api/v1/nodes") == {"7"}
                            and _watch_timeouts(api, "/api/v1/pods") == {"7"}, timeout=30)
    finally:
        sched.stop()
    # Without the flags: the library's defaults, as before.
    default = k8s_cli.build_scheduler(parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect"])).scheduler
    assert default.kube.write_timeout_s == 30.0
    assert {r.watch_timeout_s for r in (default.cache.nodes, default.cache.pods, default.pending)} == {60}


@pytest.fixture
def stalled_binds(api: FakeApiServer) -> Iterator[list[str]]:
    """Bindings the loopback API server holds without an answer until the test ends (a hung API
    server); yields the names of the pods whose binding arrived."""
    release = threading.Event()
    arrived: list[str] = []

    def hold(ns: str, name: str, body: dict) -> None:
        arrived.append(name)
        release.wait(120)

    api.binding_hook = hold
    yield arrived
    release.set()


def _start_extender(argv: list[str], ready: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "extender", "--host", "127.0.0.1", "--port", "0",
                             *argv, "--ready-file", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()}")
        assert time.monotonic() < deadline, "the extender did not start"
        time.sleep(0.05)
    return proc


def bind_over_http(url: str, pod: dict[str, Any], node: str) -> tuple[int, Any]:
    """kube-scheduler's bind call to the extender at ``url``, on a raw connection that waits as
    long as the extender does: (status, the parsed answer)."""
    body = json.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                       "PodUID": pod["metadata"]["uid"], "Node": node}).encode()
    host, port = url.removeprefix("http://").split(":")
    conn = Conn(socket.create_connection((host, int(port)), timeout=120))
    conn.send(b"POST /bind HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    status, _, answer = conn.response()
    return status, answer


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


def test_extender_bind_gives_up_after_api_timeout_and_watches_ask_for_watch_timeout(
        api: FakeApiServer, kubeconfig: str, tmp_path: Path, stalled_binds: list[str]) -> None:
    api.add_node(make_node("n1"))
    pod = api.add_pod(make_pod("p"))
    proc = _start_extender(["--kubeconfig", kubeconfig, "--api-timeout-s", "1", "--watch-timeout-s", "7"],
                           tmp_path / "ready")
    try:
        url = (tmp_path / "ready").read_text().strip()
        assert api.wait_for(lambda: _watch_timeouts(api, "/api/v1/nodes") == {"7"}
                            and _watch_timeouts(api, "/api/v1/pods") == {"7"}, timeout=30)
        status, answer = bind_over_http(url, pod, "n1")
        # The API server never answered: the bind failed on the client's read timeout (1 s), not
        # the 30 s default (kube-scheduler would have given up on the extender long before).
        assert status == 200 and stalled_binds == ["p"]
        assert "failed (HTTP 0): ReadTimeoutError" in answer["Error"], answer
        waited = float(re.search(r"read timeout=([0-9.]+)", answer["Error"]).group(1))  # type: ignore[union-attr]
        assert 0 < waited <= 1.0, answer  # urllib3 reports what was left of the 1 s
    finally:
        out, _ = _stop(proc)
    assert "writes 1 s, watches 7 s" in out, out


def test_extender_http_timeout_is_its_callers_deadline(tmp_path: Path) -> None:
    proc = _start_extender(["--http-timeout-s", "0.5"], tmp_path / "ready")
    try:
        host, port = (tmp_path / "ready").read_text().strip().removeprefix("http://").split(":")
        conn = Conn(socket.create_connection((host, int(port)), timeout=120))
        conn.send(b"POST /filter HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"Pod\":")  # then nothing more: a stalled sender
        status, _, _ = conn.response()
        assert status == 408
    finally:
        out, _ = _stop(proc)
    assert "0.5 s (kube-scheduler's httpTimeout)" in out, out


def test_webhook_timeout_seconds_sets_its_deadlines(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from iro_fed.k8s.testing import self_signed_cert

    cert, key = self_signed_cert(tmp_path / "tls")
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "webhook", "--host", "127.0.0.1", "--port", "0",
                             "--tls-cert", str(cert), "--tls-key", str(key), "--timeout-seconds", "3",
                             "--ready-file", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the webhook did not start"
        time.sleep(0.05)
    out, _ = _stop(proc)
    assert "3 s (the webhook configuration's timeoutSeconds)" in out, out
