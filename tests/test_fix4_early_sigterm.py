"""A SIGTERM while a service starts, before its own stop handlers are in place.

Was: the default handler ended the process with 143 (Python's imports, the parser build and the
command's own checks take about a second), against the stop convention of iro_fed.cli (SIGTERM
is a stop asked for: exit 0 once nothing is left running). Now ``main`` notes a SIGTERM from its
first line and the service stops cleanly; a job still ends on it (143).

No timing: the command runs under a small wrapper that pauses it at a known point of its start-up
(it writes a file, then reads stdin); the test sends SIGTERM there, then closes stdin to let it go on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iro_fed.cli import EarlyStop, stop_signals, take_over_sigterm

REPO = Path(__file__).resolve().parents[1]

#: ``python - READY TARGET ENTRY ARGV...``: wraps the function TARGET (module.attr) so that it
#: first writes READY and waits for stdin to close, then runs ENTRY's main(ARGV).
PAUSE_AT = r"""
import importlib, sys
from pathlib import Path

ready, target, entry, *argv = sys.argv[1:]
module_name, _, attr = target.rpartition(".")
module = importlib.import_module(module_name)
original = getattr(module, attr)

def paused(*args, **kwargs):
    Path(ready).write_text("paused")
    sys.stdin.read()  # until the test has sent its SIGTERM
    return original(*args, **kwargs)

setattr(module, attr, paused)
sys.exit(importlib.import_module(entry).main(argv))
"""


def _sigterm_at(tmp_path: Path, target: str, entry: str, argv: list[str],
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``entry.main(argv)`` paused at ``target``, SIGTERM it there, let it go on; its result."""
    ready = tmp_path / "paused"
    script = tmp_path / "pause_at.py"
    script.write_text(PAUSE_AT)
    proc = subprocess.Popen([sys.executable, str(script), str(ready), target, entry, *argv], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                                 **(env or {})})
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None:
                raise AssertionError(f"exited {proc.returncode} before pausing: {proc.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, "did not pause within 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(input="", timeout=120)  # closes stdin: the paused start-up goes on
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _no_process_with(*words: str) -> list[str]:
    """Command lines of live processes that contain every one of ``words`` (should be none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(w in cmdline for w in words):
                found.append(cmdline)
    return found


def _free_port() -> int:
    from iro_fed.federated.procs import free_port

    return free_port()


# --- iro fed server / rounds --------------------------------------------------------------------


@pytest.mark.parametrize("target", ["iro_fed.cli.build_parser", "iro_fed.federated.cli._daemon_env"],
                         ids=["parser-build", "command-checks"])
def test_fed_server_sigterm_during_start_up_exits_0_and_starts_no_superlink(tmp_path, target):
    pytest.importorskip("flwr")
    port = str(_free_port())
    done = _sigterm_at(tmp_path, target, "iro_fed.cli",
                       ["fed", "server", "--insecure", "--host", "127.0.0.1", "--port", port],
                       env={"FLWR_HOME": str(tmp_path / "flwr-home")})
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # was -15: killed by the SIGTERM
    assert "Traceback" not in done.stderr
    assert _no_process_with("flower-superlink", port) == []


def test_fed_rounds_sigterm_before_its_handlers_exits_0_and_runs_nothing(tmp_path):
    pytest.importorskip("flwr")
    from iro_fed.feedback import FederatedRoundRequest, FeedbackLoop, Trigger

    reg = tmp_path / "policies"
    trigger = Trigger(kind="fine-tune", at=0.0, observation=10, quantity="utilization", moving_error=0.2,
                      threshold=0.1, samples=8, factors_before={"batch": 1.0}, factors_after={"batch": 1.4},
                      error_after=0.03)
    request = Path(FederatedRoundRequest(reg, site="site-a")(FeedbackLoop(threshold=0.1), trigger))
    done = _sigterm_at(tmp_path, "iro_fed.federated.cli._consume", "iro_fed.cli",
                       ["fed", "rounds", "--requests", str(reg), "--federation", "local", "--registry", str(reg)],
                       env={"FLWR_HOME": str(tmp_path / "flwr-home"), "NO_COLOR": "1"})
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    assert request.is_file()  # still waiting: no run was started for it
    assert not (reg / "rounds" / "running").exists() or list((reg / "rounds" / "running").iterdir()) == []


# --- iro extender / scheduler ---------------------------------------------------------------------


def test_extender_sigterm_before_it_serves_exits_0(tmp_path):
    port = str(_free_port())
    done = _sigterm_at(tmp_path, "iro_fed.k8s.cli._settings_table", "iro_fed.cli",
                       ["extender", "--host", "127.0.0.1", "--port", port, "--ready-file", str(tmp_path / "ready")])
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr


def test_scheduler_sigterm_during_start_up_exits_0(tmp_path):
    pytest.importorskip("kubernetes")
    from iro_fed.k8s.testing import FakeApiServer, make_node

    api = FakeApiServer().start()
    try:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        api.add_node(make_node("n1", cpu="4"))
        done = _sigterm_at(tmp_path, "iro_fed.k8s.cli._settings_table", "iro_fed.cli",
                           ["scheduler", "--kubeconfig", str(kubeconfig), "--solver", "best-fit",
                            "--lease-namespace", "default"])
        lease = api.get("leases", "default/iro-scheduler")
    finally:
        api.stop()
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    # started, then stopped as after any SIGTERM: a Lease it took is released (holder cleared)
    assert lease is None or not (lease.get("spec") or {}).get("holderIdentity"), lease


# --- edge-agent run -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["edge_agent.cli.build_parser", "edge_agent.config.load_config"],
                         ids=["parser-build", "settings"])
def test_edge_agent_run_sigterm_during_start_up_exits_0(tmp_path, target):
    db = tmp_path / "exp.db"
    done = _sigterm_at(tmp_path, target, "edge_agent.cli", ["run", "--config", str(REPO / "examples" / "agent.yaml")],
                       env={"IRO_AGENT_PORT": "0", "IRO_AGENT_STORE_PATH": str(db)})
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    if target == "edge_agent.cli.build_parser":
        assert not db.exists()  # stopped before anything was started (the store opens with the agent)
    else:  # the agent was built and started, then stopped as after any SIGTERM
        from edge_agent.store import integrity_check

        assert '"edge agent stopped"' in done.stderr and integrity_check(db) == "ok", done.stderr[-3000:]


# --- jobs keep their behaviour ----------------------------------------------------------------------


def test_a_job_is_still_ended_by_a_sigterm_during_start_up(tmp_path):
    done = _sigterm_at(tmp_path, "iro_fed.cli.build_parser", "iro_fed.cli",
                       ["validate", str(REPO / "examples" / "problems" / "bank-three-zone.json")])
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr[-3000:])
    assert "valid" not in done.stdout


# --- the hand-over itself -------------------------------------------------------------------------


def test_stop_signals_takes_over_an_early_sigterm_and_puts_the_first_handler_back():
    before = signal.getsignal(signal.SIGTERM)
    early = EarlyStop.catch()
    assert early is not None and signal.getsignal(signal.SIGTERM) is early
    try:
        signal.raise_signal(signal.SIGTERM)  # noted, not fatal
        assert early.got == [signal.SIGTERM]
        with stop_signals() as wait_for_stop:
            assert wait_for_stop() == signal.SIGTERM  # at once: it came before the handlers
            # the stop runs with the handler before main's (a second SIGTERM ends the process)
            assert signal.getsignal(signal.SIGTERM) == before
    finally:
        early.release()
    assert signal.getsignal(signal.SIGTERM) == before
    assert take_over_sigterm(before) == (None, before)
