"""`edge-agent check` refuses what `run` refuses: a damaged or truncated store, a store path that is
no regular file or cannot be created, a listen.host that does not resolve (run names listen.host
too); it opens the store read-only, creating and changing nothing; with clientappio_port 0 it
shows no fixed port in the SuperNode command (run picks a free one at each start)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from edge_agent.cli import main
from edge_agent.federation import find_flower_bin
from edge_agent.store import ExperienceStore, Transition


def _store(path: Path, rows: int = 200) -> None:
    store = ExperienceStore(path)
    for i in range(rows):
        store.record(
            Transition(
                workload=f"w{i}",
                source="solver",
                state=np.arange(64, dtype=np.float32),
                action=0,
                candidates=["e2"],
                reward=float(i),
            )
        )
    assert store.flush(timeout=60)
    store.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check(capsys, config: Path) -> tuple[int, str]:
    rc = main(["check", "--config", str(config)])
    return rc, capsys.readouterr().err


def test_a_truncated_store_is_refused_and_left_as_it_was(write_config, capsys, tmp_path) -> None:
    """Old code: check said settings_ok; run then refused the file (database disk image is malformed)."""
    path = tmp_path / "exp.db"
    _store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = _digest(path)
    rc, err = _check(capsys, write_config())
    assert rc == 2 and "store.path: cannot open the experience store" in err and "malformed" in err, err
    assert _digest(path) == before and sorted(p.name for p in tmp_path.iterdir() if "exp.db" in p.name) == ["exp.db"]


def test_a_damaged_store_with_the_sqlite_header_is_refused(write_config, capsys, tmp_path) -> None:
    path = tmp_path / "exp.db"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 32)
    rc, err = _check(capsys, write_config())
    assert rc == 2 and "store.path" in err and "not an sqlite database" in err, err


def test_a_good_store_passes_and_is_not_changed(write_config, capsys, tmp_path) -> None:
    path = tmp_path / "exp.db"
    _store(path, rows=5)
    before = _digest(path)
    assert main(["check", "--config", str(write_config())]) == 0
    assert json.loads(capsys.readouterr().out)["settings_ok"]
    assert _digest(path) == before and sorted(p.name for p in tmp_path.iterdir() if "exp.db" in p.name) == ["exp.db"]


def test_a_missing_store_in_missing_folders_passes_and_nothing_is_made(write_config, capsys, tmp_path) -> None:
    path = tmp_path / "a" / "b" / "exp.db"
    assert main(["check", "--config", str(write_config(store={"path": str(path)}))]) == 0
    assert not (tmp_path / "a").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".iro-agent")]


def test_a_device_is_no_store(write_config, capsys) -> None:
    """Old code: check passed; run failed with sqlite's 'disk I/O error'."""
    rc, err = _check(capsys, write_config(store={"path": "/dev/null"}))
    assert rc == 2 and "store.path: '/dev/null' is not a regular file" in err, err


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs sysfs (no files can be made there)")
def test_a_folder_that_takes_no_files_is_refused(write_config, capsys) -> None:
    """Old code: check passed /sys/x.db; run: 'unable to open database file'."""
    rc, err = _check(capsys, write_config(store={"path": "/sys/x.db"}))
    assert rc == 2 and "store.path" in err and "cannot create files in '/sys'" in err, err


def test_a_listen_host_that_does_not_resolve(write_config, capsys, monkeypatch) -> None:
    """Old code: check passed; run said 'listen no.such.host.invalid:0: Name or service not known'."""
    config = write_config(listen={"host": "no.such.host.invalid"})
    rc, err = _check(capsys, config)
    assert rc == 2 and "listen.host: cannot resolve 'no.such.host.invalid'" in err, err
    assert main(["run", "--config", str(config)]) == 2
    assert "edge-agent run: error: listen.host: cannot resolve" in capsys.readouterr().err
    monkeypatch.setenv("IRO_AGENT_HOST", "no.such.host.invalid")
    rc, err = _check(capsys, write_config())
    assert rc == 2 and "listen.host (from IRO_AGENT_HOST): cannot resolve" in err, err


@pytest.mark.skipif(find_flower_bin("flower-supernode") is None, reason="needs the fed extra")
def test_check_shows_no_fixed_port_for_clientappio_port_0(write_config, capsys) -> None:
    """Old code: the command showed --port 9094, a port run never uses (it picks a free one)."""
    config = write_config(
        federated={"enabled": True, "superlink": "127.0.0.1:9092", "insecure": True, "clientappio_port": 0}
    )
    assert main(["check", "--config", str(config)]) == 0
    doc = json.loads(capsys.readouterr().out)["federated"]
    command = doc["command"]
    assert doc["clientappio_port"] == 0
    assert command[command.index("--port") + 1] == "<free port at each start>", command


def test_run_names_listen_port_when_the_port_is_taken(write_config, capsys) -> None:
    """Old code: 'listen 127.0.0.1:P: Address already in use', naming no setting."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(listen={"port": port}, store={"path": None})
        assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"edge-agent run: error: listen.port: cannot listen on 127.0.0.1:{port}: Address already in use" in err, err


def test_a_site_set_by_the_variable_is_named_with_it(write_config, capsys, monkeypatch) -> None:
    """Old code: "site: 'mars' is not a domain ..." though IRO_AGENT_SITE set it."""
    monkeypatch.setenv("IRO_AGENT_SITE", "mars")
    rc, err = _check(capsys, write_config())
    assert rc == 2 and "error: site (from IRO_AGENT_SITE): 'mars' is not a domain" in err, err
    monkeypatch.delenv("IRO_AGENT_SITE")
    rc, err = _check(capsys, write_config(site="mars"))
    assert rc == 2 and "error: site: 'mars' is not a domain" in err, err
