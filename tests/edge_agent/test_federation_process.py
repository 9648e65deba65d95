"""The agent's federated participation with real processes: a real flower-superlink on 127.0.0.1,
`edge-agent run` with `federated.mode: start` (a real flower-supernode as its child), a real
`flwr run` round whose ClientApp trains on the agent's experience store, SIGKILL of the child
(the agent restarts it), SIGTERM of the agent (clean exit, no process left behind).

Like tests/federated/test_loopback.py this starts Flower's daemons, so it takes tens of seconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from edge_agent.federation import marked_processes  # noqa: E402
from edge_agent.store import read_policy_samples  # noqa: E402
from iro_fed.testing import wait_for as wait_for_value  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: SuperExec's task poll (default 1 s) adds to the round, as in iro_fed.federated.local (test speed only).
FAST = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
TINY = {"num-server-rounds": 1, "min-nodes": 1, "local-steps": 40, "hours": 0.25, "learning-starts": 16,
        "batch-size": 8, "track-emissions": False, "embed-dim": 16, "hidden-dim": 32, "eval-site": 1}  # the agent trains site 0: the held-out site must differ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    return wait_for_value(check, timeout=45.0, what=what, interval=0.2)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


class Superlink:
    """flower-superlink on 127.0.0.1 (insecure, in-memory state) with its own FLWR_HOME for `flwr`."""

    def __init__(self, work: Path) -> None:
        self.home = work / "link-home"
        self.home.mkdir(parents=True)
        self.port = free_port()
        self.log = work / "superlink.log"
        bindir = str(Path(sys.executable).parent)
        from iro_fed.federated.local import shared_data_dir

        # the ServerApp runs from a copy of the app under FLWR_HOME: point it at the simulator's data
        self.env = {**os.environ, **FAST, "FLWR_HOME": str(self.home), "FLWR_TELEMETRY_ENABLED": "0",
                    "IRO_DATA_DIR": str(shared_data_dir()), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen([str(Path(bindir) / "flower-superlink"), "--host", "127.0.0.1", "--port",
                                          str(self.port), "--insecure", "--disable-runtime-dependency-installation"],
                                         stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=str(work),
                                         start_new_session=True)

        def listening() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_for("the superlink to listen", listening)

    def popen_flwr(self, out: Path, *args: str) -> subprocess.Popen:
        with open(out, "wb") as fh:
            return subprocess.Popen([str(Path(sys.executable).parent / "flwr"), *args], env=self.env,
                                    cwd=str(self.home), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)  # its group: the SuperLink and the SuperExec it started
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue


class AgentProcess:
    """`python -m edge_agent run` with its JSON log lines collected by a thread."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                     env={**os.environ, **FAST})
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        started = wait_for("the agent to start", lambda: self.find("edge agent started") or self.proc.poll() is not None)
        assert self.proc.poll() is None, "\n".join(self.raw)
        self.url = f"http://127.0.0.1:{started['port']}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.raw.append(line)
            self.lines.append(json.loads(line))  # every line the agent writes is JSON, the SuperNode's too

    def find(self, msg: str) -> dict[str, Any] | None:
        return next((d for d in list(self.lines) if d["msg"] == msg), None)

    def all(self, msg: str) -> list[dict[str, Any]]:
        return [d for d in list(self.lines) if d["msg"] == msg]


def test_agent_runs_restarts_and_stops_its_supernode(tmp_path: Path, write_config, http) -> None:
    link = Superlink(tmp_path)
    agent_home = tmp_path / "agent-flwr-home"
    config = write_config(log_level="info", policy={"registry": str(tmp_path / "policies"), "poll_interval_s": 0.2},
                          federated={
        "enabled": True, "mode": "start", "superlink": f"127.0.0.1:{link.port}", "insecure": True, "site": 0,
        "clientappio_port": 0, "flwr_home": str(agent_home), "restart_initial_s": 0.2, "restart_max_s": 1.0,
        "check_interval_s": 0.2, "stop_timeout_s": 10})
    agent = run = None
    try:
        agent = AgentProcess(config)
        url = agent.url
        # decisions for the experience store, while the SuperNode comes up (the agent serves meanwhile)
        for i in range(24):
            status, reply = http("POST", f"{url}/recommend", {"name": f"w{i}", "requests": {"cpu": 100 + 40 * i,
                                                                                              "memory": 128}})
            assert status == 200 and reply["nodes"]
        first = wait_for("the supernode to register", lambda: (lambda d: d if d["connected"] else None)(
            http("GET", f"{url}/federation")[1]))
        assert first["state"] == "connected" and first["mode"] == "start" and first["restarts"] == 0
        assert first["experience_db"] == str(tmp_path / "exp.db")
        # the SuperNode's log lines come out as the agent's JSON lines
        assert any(d["logger"] == "edge_agent.supernode" and "Starting Flower SuperNode" in d["msg"] for d in agent.lines)
        from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

        samples = read_policy_samples(tmp_path / "exp.db", 8, len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES))
        assert len(samples.samples) == 24

        # a real federated round: the ClientApp under the agent's SuperNode trains on the agent's store,
        # and the agent keeps serving (with its last good ranking) while the round runs
        from iro_fed.federated.local import app_dir, run_config_arg

        run_log = tmp_path / "flwr-run.log"
        run = link.popen_flwr(run_log, "run", str(app_dir()), "local", "--stream", "--run-config",
                              run_config_arg({**TINY, "registry": str(tmp_path / "policies")}))
        served, deadline = 0, time.monotonic() + 300
        while run.poll() is None:
            assert time.monotonic() < deadline, "flwr run did not finish: " + run_log.read_text()[-3000:]
            status, reply = http("POST", f"{url}/recommend", {"name": "meanwhile", "requests": {"cpu": 200}})
            assert status == 200 and reply["nodes"] and reply["source"] in ("solver", "policy"), (
                reply, [d for d in agent.lines if d["level"] in ("warning", "error") and d["logger"] == "edge_agent"])
            served += 1
            time.sleep(0.5)
        out = run_log.read_text()
        assert run.returncode == 0, out[-3000:]
        assert "IRO-FED-ROUND" in out and served >= 3, out[-3000:]
        assert (tmp_path / "policies" / "latest").read_text().strip() == "v0001/policy.pt"
        meta = json.loads((tmp_path / "policies" / "v0001" / "metadata.json").read_text())
        assert [str(n) for n in meta["nodes"]] == [first["node_id"]]  # the round ran on the agent's SuperNode
        # the agent picks up the new global policy from the registry the round wrote
        ready = wait_for("the agent to load v0001", lambda: (lambda d: d if d["ranking"]["version"] == "v0001" else None)(
            http("GET", f"{url}/readyz")[1]))
        assert ready["ranking"]["source"] == "policy" and ready["ready"] is True
        assert http("POST", f"{url}/recommend", {"name": "after", "requests": {"cpu": 200}})[1]["source"] == "policy"
        client = wait_for("the clientapp's summary in the agent log", lambda: agent.find("clientapp round"))
        # the 24 decisions above and those made during the round before the ClientApp read the store
        assert 24 <= client["experience-samples"] <= 24 + served and client["experience-updates"] > 0, client
        assert client["experience-error"] == 0 and client["experience-db"] == str(tmp_path / "exp.db")
        metrics = http("GET", f"{url}/metrics")[1]
        assert "iro_agent_federated_client_rounds_total 1.0" in metrics
        assert f"iro_agent_federated_experience_samples {float(client['experience-samples'])}" in metrics

        # SIGKILL the SuperNode: the agent keeps serving, restarts it, and it registers again
        os.kill(first["pid"], signal.SIGKILL)
        status, reply = http("POST", f"{url}/recommend", {"name": "during", "requests": {"cpu": 100}})
        assert status == 200 and reply["nodes"]
        second = wait_for("the restarted supernode to register", lambda: (
            lambda d: d if d["restarts"] == 1 and d["connected"] and d["pid"] != first["pid"] else None)(
            http("GET", f"{url}/federation")[1]))
        assert second["node_id"] != first["node_id"] and second["last_exit"]["signal"] == signal.SIGKILL
        assert not alive(first["pid"])
        assert "iro_agent_supernode_restarts_total 1.0" in http("GET", f"{url}/metrics")[1]
        assert "iro_agent_supernode_up 1.0" in http("GET", f"{url}/metrics")[1]
        health = http("GET", f"{url}/healthz")[1]
        assert health["supernode"]["state"] == "connected" and health["supernode"]["pid"] == second["pid"]
        assert http("GET", f"{url}/readyz")[1]["ready"] is True
        running = marked_processes(str(agent_home))
        assert second["pid"] in running

        # SIGTERM the agent: exit 0, the SuperNode and everything it started are gone
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.proc.wait(30) == 0
        agent._reader.join(5)
        assert marked_processes(str(agent_home)) == []
        assert not any(alive(pid) for pid in running)
        msgs = [d["msg"] for d in agent.lines]
        assert msgs.index("supernode stopped") < msgs.index("edge agent stopped")
        assert len(agent.all("supernode registered with the superlink")) == 2
    finally:
        if run is not None and run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        if agent is not None and agent.proc.poll() is None:
            agent.proc.kill()
        for pid in marked_processes(str(agent_home)):
            os.kill(pid, signal.SIGKILL)
        link.stop()
