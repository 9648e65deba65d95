"""``iro extender`` / ``webhook`` / ``scheduler`` stopped by a real signal, as Kubernetes stops a pod.

The stop convention (iro_fed.cli): exit 0 after SIGTERM once stopped cleanly, 130 after Ctrl-C
(was 0 for both). The signal is sent as soon as the command says it is ready: its handlers must be
in place by then (the ready file was written before them, so an early SIGTERM ended the process
with 143 and no clean stop). ``--ready-file`` is renamed into place whole, never rewritten in place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod  # noqa: E402

STATUS = {signal.SIGTERM: 0, signal.SIGINT: 130}


def _popen(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "iro_fed.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait(proc: subprocess.Popen, ready: Callable[[], bool], what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"{what}: exited {proc.returncode} first: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{what}: not within {deadline_s:.0f} s: {proc.communicate()[1][-3000:]}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen, sig: int) -> str:
    """Send ``sig``, wait for the exit, return stderr."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


def _has_url(ready: Path) -> bool:
    try:
        return ready.read_text().startswith("http")
    except FileNotFoundError:
        return False


def _server_argv(command: str, tmp_path: Path) -> list[str]:
    argv = [command, "--host", "127.0.0.1", "--port", "0"]
    if command == "webhook":
        pytest.importorskip("cryptography")
        from iro_fed.k8s.testing import self_signed_cert

        cert, key = self_signed_cert(tmp_path / "tls")
        argv += ["--tls-cert", str(cert), "--tls-key", str(key)]
    return argv


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", ["extender", "webhook"])
def test_server_stopped_by_a_signal_as_soon_as_it_is_ready_exits_by_the_convention(tmp_path, command, sig):
    ready = tmp_path / "ready"
    proc = _popen([*_server_argv(command, tmp_path), "--ready-file", str(ready)])
    _wait(proc, lambda: _has_url(ready), f"iro {command} --ready-file")
    err = _stop(proc, sig)
    assert proc.returncode == STATUS[sig], err[-3000:]
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_scheduler_stopped_by_a_signal_exits_by_the_convention(tmp_path, sig):
    api = FakeApiServer().start()
    try:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        api.add_node(make_node("n1", cpu="4"))
        api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
        proc = _popen(["scheduler", "--name", "iro", "--kubeconfig", str(kubeconfig), "--window-s", "0.1",
                       "--solver", "best-fit", "--no-leader-elect"])
        # A bound pod: the scheduler runs, so its stop handlers are in place.
        _wait(proc, lambda: api.get("pods", "default/web")["spec"].get("nodeName") == "n1", "iro scheduler binds")
        err = _stop(proc, sig)
    finally:
        api.stop()
    assert proc.returncode == STATUS[sig], err[-3000:]
    assert "Traceback" not in err, err[-3000:]


def test_ready_file_is_renamed_into_place_never_rewritten_in_place(tmp_path):
    # A reader polling the ready file could see it empty: Path.write_text truncates the file, then
    # writes. A hard link to the earlier file shows which: rewritten in place, the link shows the
    # new URL too; renamed into place, the link keeps the old inode's text.
    ready = tmp_path / "ready"
    ready.write_text("http://127.0.0.1:1\n")  # a stale file of an earlier run
    os.link(ready, tmp_path / "old-inode")
    proc = _popen([*_server_argv("extender", tmp_path), "--ready-file", str(ready)])
    _wait(proc, lambda: _has_url(ready) and ready.read_text() != "http://127.0.0.1:1\n", "iro extender --ready-file")
    try:
        url = ready.read_text()
        assert url.startswith("http://127.0.0.1:") and url.endswith("\n") and url != "http://127.0.0.1:1\n"
        assert (tmp_path / "old-inode").read_text() == "http://127.0.0.1:1\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["old-inode", "ready"]  # no temporary file left
    finally:
        err = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.parametrize(("argv", "message"), [
    (["extender", "--port", "0", "--solver", "nope"], "iro extender: error: --solver: unknown solver 'nope'"),
    (["scheduler", "--kubeconfig", "/no/such/kubeconfig"], "iro scheduler: error: --kubeconfig: no such file"),
])
def test_bad_input_through_python_m_exits_2_without_a_traceback(argv, message):
    # `python -m iro_fed.cli` (as the tests above start the servers) ran the module as __main__, a
    # second copy whose main did not catch the iro_fed.cli.UsageError the subcommands raise: a
    # traceback and exit 1.
    done = subprocess.run([sys.executable, "-m", "iro_fed.cli", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_scheduler_stopped_during_a_cpsat_solve_binds_that_batch_and_exits_by_the_convention(tmp_path, sig):
    # cpsat without a hint takes about 6 s on 120 pods x 24 nodes here; the signal comes 3 s after
    # the scheduler listed the pods. The batch under way is finished and bound (its pods are not
    # dropped, nor bound after the stop released anything), then the process exits as any stop does.
    pytest.importorskip("ortools")
    api = FakeApiServer().start()
    try:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        for i in range(24):
            api.add_node(make_node(f"n{i}", cpu=str(4 + i % 5), memory=f"{8 + 4 * (i % 3)}Gi"))
        for i in range(120):
            api.add_pod(make_pod(f"p{i}", cpu=f"{250 * (1 + i % 7)}m", memory=f"{256 * (1 + i % 5)}Mi", scheduler="iro"))
        proc = _popen(["scheduler", "--name", "iro", "--kubeconfig", str(kubeconfig), "--window-s", "0.1",
                       "--solver", "cpsat", "--set", "hint=none", "--time-limit-s", "60", "--no-leader-elect"])
        _wait(proc, lambda: bool(api.requests_to("GET", r"/api/v1/pods")), "iro scheduler lists the pods")
        time.sleep(3.0)
        assert proc.poll() is None
        err = _stop(proc, sig)
        bound = [api.get("pods", f"default/p{i}")["spec"].get("nodeName") for i in range(120)]
    finally:
        api.stop()
    assert proc.returncode == STATUS[sig], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert all(bound), f"{bound.count(None)} of the batch's pods left unbound"
    assert "120 bound" in err and "solved by cpsat" in err, err[-3000:]
