"""`iro fed rounds` against real Flower processes: the feedback loop's round requests become
federated runs that fine-tune the registry's latest global policy.

A SuperLink and 2 SuperNodes on 127.0.0.1 (``LocalFederation``, loopback without TLS), the
operator's FLWR_HOME naming that SuperLink ``local``; local training is kept tiny.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from tests.federated.test_round_requests import start_consumer  # noqa: E402

TINY = {"local-steps": 48, "hours": 1.0, "learning-starts": 16, "batch-size": 16, "track-emissions": False,
        "embed-dim": 16, "hidden-dim": 32, "min-nodes": 2}


def rounds_argv(reg: Path, *extra: str) -> list[str]:
    argv = ["fed", "rounds", "--requests", str(reg), "--federation", "local", "--registry", str(reg),
            "--rounds", "1", "--once", "--timeout", "600", *extra]
    for k, v in TINY.items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    return argv


def flwr_runs(fed) -> list[dict]:
    from iro_fed.federated.local import flower_bin

    listed = subprocess.run([flower_bin("flwr"), "ls", "local", "--format", "json"], capture_output=True, text=True,
                            env=fed.env(), timeout=60)
    return json.loads(listed.stdout)["runs"]


def descendant_cmdlines(pid: int) -> list[str]:
    """Command lines of the live descendants of ``pid``."""
    from iro_fed.federated.local import _descendants

    found = []
    for child in _descendants([pid]):
        try:
            found.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile
            continue
    return found


def start_daemon(argv: list[str]) -> subprocess.Popen:
    """``iro fed rounds`` as its own process (as systemd runs it), output merged and uncoloured."""
    return subprocess.Popen([sys.executable, "-m", "iro_fed.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "NO_COLOR": "1"})


def test_requests_start_runs_that_continue_from_the_latest_policy(tmp_path, monkeypatch, capsys,
                                                                  write_round_request) -> None:
    from iro_fed.cli import main
    from iro_fed.federated.local import LocalFederation

    reg = tmp_path / "policies"
    with LocalFederation(2, workdir=tmp_path / "work") as fed:
        monkeypatch.setenv("FLWR_HOME", str(fed.flwr_home))  # the operator's connection file names "local"
        monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")

        assert main(rounds_argv(reg)) == 0  # nothing waiting: nothing runs
        assert PolicyRegistry(reg).versions() == []

        # two sites drifted: one run for both; the registry is empty, so it starts from a fresh policy
        write_round_request(reg, "edge-madrid")
        write_round_request(reg, "edge-oslo")
        assert main(rounds_argv(reg)) == 0
        registry = PolicyRegistry(reg)
        assert registry.versions() == [1] and registry.metadata(1)["resumed_from"] is None
        (record,) = sorted((reg / "rounds" / "done").glob("*-run.json"))
        doc = json.loads(record.read_text())
        assert doc["ok"] is True and doc["sites"] == ["edge-madrid", "edge-oslo"] and len(doc["requests"]) == 2
        assert [r["version"] for r in doc["rounds"]] == [1] and doc["federation"] == "local"
        assert isinstance(doc["run_id"], int) and np.isfinite(doc["rounds"][0]["eval-reward"])
        assert list((reg / "requests").iterdir()) == [] and list((reg / "rounds" / "running").iterdir()) == []

        # a later drift fine-tunes version 1; a file that is no request is set aside, not lost
        write_round_request(reg, "edge-madrid", error=0.3)
        (reg / "requests" / "notes.json").write_text('{"hello": 1}')
        assert main(rounds_argv(reg)) == 0
        assert registry.versions() == [1, 2]
        meta = registry.metadata(2)
        assert meta["resumed_from"] == 1
        assert meta["initial_evaluation"] == registry.metadata(1)["evaluation"]  # it started from version 1
        assert (reg / "rounds" / "rejected" / "notes.json").is_file()
        assert "format" in json.loads((reg / "rounds" / "rejected" / "notes.error").read_text())["error"]

        # a federation that the connection file does not name: bad input (exit 2) before any request
        # is claimed (it used to run, fail and file the request under rounds/failed)
        oslo = Path(write_round_request(reg, "edge-oslo"))
        argv = rounds_argv(reg)
        argv[argv.index("local")] = "nowhere"
        assert main(argv) == 2
        captured = capsys.readouterr()  # its .out keeps the runs' "done:" lines, checked at the end
        assert "--federation: no SuperLink connection 'nowhere'" in captured.err
        assert oslo.is_file() and list((reg / "rounds" / "failed").iterdir()) == []
        assert registry.versions() == [1, 2]
        oslo.unlink()  # the daemon below is to find only its own request

        # the daemon, stopped mid-run (SIGTERM): the request goes back to wait, exit 0
        argv = [a for a in rounds_argv(reg) if a != "--once"] + ["--poll-s", "0.2", "--set", "local-steps=20000"]
        daemon = start_daemon(argv)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in daemon.stdout], daemon=True).start()
        said = ""
        try:
            path = Path(write_round_request(reg, "edge-lisbon"))
            deadline = time.monotonic() + 120
            while "started on the SuperLink" not in said and time.monotonic() < deadline:
                try:
                    said += lines.get(timeout=1.0)
                except queue.Empty:
                    assert daemon.poll() is None, said
            assert (reg / "rounds" / "running" / path.name).exists(), said
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=120) == 0, said
        finally:
            if daemon.poll() is None:
                daemon.kill()
        time.sleep(0.5)  # the reader thread drains the rest
        while not lines.empty():
            said += lines.get()
        assert "stopped on the SuperLink" in said, said
        # the run itself was stopped, not only the `flwr run` that streamed it
        runs = flwr_runs(fed)
        # two runs done, the stopped one ("nowhere" never reached the SuperLink)
        assert len(runs) == 3 and all(r["status"].startswith("finished") for r in runs), runs
        assert sum("stopped" in r["status"] for r in runs) == 1, runs
        assert [p.name for p in (reg / "requests").iterdir()] == [path.name]
        assert list((reg / "rounds" / "running").iterdir()) == [] and registry.versions() == [1, 2]

        # stopped before `flwr run` named its run: the consumer waits for the id and stops that run
        # too, instead of leaving it on the SuperLink with nothing to stop it
        daemon = start_daemon(argv)
        try:
            deadline = time.monotonic() + 120
            while not any("flwr" in c and " run " in c for c in descendant_cmdlines(daemon.pid)):
                assert daemon.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            daemon.send_signal(signal.SIGTERM)
            said, _ = daemon.communicate(timeout=120)
            assert daemon.returncode == 0, said
        finally:
            if daemon.poll() is None:
                daemon.kill()
        assert "started on the SuperLink" in said and "stopped on the SuperLink" in said, said
        runs = flwr_runs(fed)
        assert len(runs) == 4 and all(r["status"].startswith("finished") for r in runs), runs
        assert sum("stopped" in r["status"] for r in runs) == 2, runs
        assert [p.name for p in (reg / "requests").iterdir()] == [path.name] and registry.versions() == [1, 2]
    out = captured.out + capsys.readouterr().out
    assert "done: 2 request(s), 1 round(s), versions v0001" in out and "versions v0002" in out


def test_a_second_consumer_of_one_request_folder_exits_2_naming_the_folder_and_the_holder(
        tmp_path, monkeypatch, capsys, write_round_request) -> None:
    # Review finding: its start-up recovery put the live consumer's running claim back to wait,
    # so the request ran twice. Now it is refused before it touches the folder.
    from iro_fed.cli import main

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    reg = tmp_path / "policies"
    write_round_request(reg, "edge-madrid")
    holder = start_consumer(reg)  # claims the request and holds it until a line on stdin ("\n": not filed)
    try:
        (name,) = json.loads(holder.stdout.readline())
        assert main(rounds_argv(reg)) == 2
        err = capsys.readouterr().err
        assert f"--requests: {str(reg)!r} is consumed by another `iro fed rounds` (pid {holder.pid} on" in err, err
        assert "only one consumer may run per request folder" in err
        assert [p.name for p in (reg / "rounds" / "running").iterdir()] == [name]  # left to its consumer
        assert list((reg / "requests").iterdir()) == []
        holder.communicate("\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 0
    # its consumer is gone without filing it: the next one takes the folder and puts it back
    from iro_fed.federated.round_requests import RoundRequestQueue

    assert [p.name for p in RoundRequestQueue(reg).recover()] == [name]
