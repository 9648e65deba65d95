"""Real Flower processes on 127.0.0.1: `iro fed local` (TLS, SuperNode auth) with 2 SuperNodes and 2 rounds.

These start flower-superlink, flower-supernode and `flwr run` (and the ServerApp / ClientApp
processes Flower spawns), so they take tens of seconds; local training is kept tiny.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")
pytest.importorskip("cryptography")

from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.task import FedConfig, build_agent, get_weights  # noqa: E402

TINY = {"local-steps": 80, "hours": 1.0, "learning-starts": 32, "batch-size": 16, "track-emissions": False,
        "embed-dim": 16, "hidden-dim": 32}


def processes_using(flwr_home: Path) -> list[int]:
    """Live processes whose environment names this FLWR_HOME (everything a federation started)."""
    needle = f"FLWR_HOME={flwr_home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if needle in env.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def test_fed_local_two_rounds_over_tls_with_supernode_auth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`iro fed local`: real SuperLink (TLS, SuperNode auth) + 2 SuperNodes, 2 rounds, registry, clean exit."""
    from iro_fed.cli import main

    reg, work, out = tmp_path / "policies", tmp_path / "work", tmp_path / "rounds.json"
    argv = ["fed", "local", "--nodes", "2", "--rounds", "2", "--registry", str(reg), "--workdir", str(work),
            "--json", str(out), "--timeout", "900", "--tls", "--supernode-auth"]
    for k, v in TINY.items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "v0002" in printed and "held-out R" in printed

    # the global policy of round 2 is in the registry, differs from the initial one, and was evaluated
    registry = PolicyRegistry(reg)
    assert registry.versions() == [1, 2]
    assert (reg / "latest").read_text().strip() == "v0002/policy.pt"
    meta = registry.metadata(2)
    assert meta["version"] == 2 and meta["round"] == 2 and meta["strategy"] == "fedavg"
    assert len(meta["nodes"]) == 2 and sorted(meta["sites"]) == [0, 1]
    assert np.isfinite(meta["evaluation"]["eval-reward"]) and np.isfinite(meta["evaluation"]["eval-score"])
    cfg = FedConfig.from_run_config(TINY)
    initial = get_weights(build_agent(cfg).online)
    state, _ = registry.load(2)
    assert max(float(np.abs(state[k].numpy() - v).max()) for k, v in initial.items()) > 1e-4
    summary = json.loads(out.read_text())
    assert [r["version"] for r in summary["rounds"]] == [1, 2]

    # it ran over TLS with registered SuperNode keys
    connection = (work / "flwr-home" / "config.toml").read_text()
    assert "root-certificates" in connection and "insecure" not in connection
    for i in range(2):
        assert "insecure" not in (work / f"supernode-{i}.log").read_text().lower()
    link_log = (work / "superlink.log").read_text()
    assert link_log.count("[ControlServicer.RegisterNode] Created node_id") == 2  # keys registered by flwr
    assert link_log.count("[Fleet.ActivateNode] Activated node_id") == 2  # and the signed-in nodes joined

    # the ClientApps ran in the warm executors beside SuperNodes in Flower's `process` isolation mode
    from iro_fed.federated.executor import WARM_TASK
    from iro_fed.federated.local import READY_LINE

    for i in range(2):
        log = (work / f"executor-{i}.log").read_text()
        assert READY_LINE in log
        assert log.count("iro-fed warm executor: task ") == 2  # one forked ClientApp per round
        assert WARM_TASK in log  # the FAB holds this checkout's sources: the warm app modules were used
    assert summary["rounds"][1]["dispatch_s"] >= 0 and summary["rounds"][1]["client_train_s"] > 0
    # each site's replay buffer came back in round 2 through its SuperNode's context state (keep-replay)
    assert [r["replay_kept"] for r in summary["rounds"]] == [0, 2]

    # every process it started (SuperLink, SuperNodes, executors and their forked ClientApps,
    # the SuperLink's SuperExec, the ServerApp, flwr run) is gone
    assert processes_using(work / "flwr-home") == []


@pytest.mark.parametrize("executor, names", [
    ("warm", ["superlink", "supernode-0", "supernode-1", "executor-0", "executor-1"]),
    ("flower", ["superlink", "supernode-0", "supernode-1"]),  # Flower's SuperExec, started by each SuperNode
])
def test_processes_are_stopped_when_the_caller_fails(tmp_path: Path, executor: str, names: list[str]) -> None:
    from iro_fed.federated.local import LocalFederation

    fed = LocalFederation(2, workdir=tmp_path / "work", executor=executor)
    with pytest.raises(RuntimeError, match="caller failed"), fed:
        assert [n for n, _ in fed.procs] == names and all(p.poll() is None for _, p in fed.procs)
        raise RuntimeError("caller failed")
    assert fed.procs == [] and processes_using(tmp_path / "work" / "flwr-home") == []
