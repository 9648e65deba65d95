"""Backoff delays, and the small commands: check and bench."""

from __future__ import annotations

import json

import pytest

from edge_agent.backoff import Backoff
from edge_agent.cli import main


def test_backoff_doubles_caps_and_resets():
    b = Backoff(initial_s=0.5, max_s=4.0, jitter=0.0)
    assert [b.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.failures == 6
    b.reset()
    assert b.next_delay() == 0.5
    j = Backoff(initial_s=1.0, max_s=10.0, jitter=0.2, seed=1)
    delays = [j.next_delay() for _ in range(5)]
    for d, base in zip(delays, [1, 2, 4, 8, 10], strict=True):
        assert base * 0.8 <= d <= min(base * 1.2, 10.0)
    with pytest.raises(ValueError):
        Backoff(initial_s=2, max_s=1)


def test_check_command(write_config, capsys, tmp_path):
    assert main(["check", "--config", str(write_config())]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings_ok"] and out["site_nodes"] == 4 and out["node"] == "e2"
    assert out["store"] == str(tmp_path / "exp.db") and not (tmp_path / "exp.db").exists()  # a check writes nothing
    assert main(["check", "--config", str(write_config(site="mars"))]) == 2
    assert "site: 'mars' is not a domain" in capsys.readouterr().err


def test_bench_command(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--nodes", "50", "--requests", "20", "--solvers", "best-fit", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    [r] = doc["results"]
    assert r["solver"] == "best-fit" and r["nodes"] == 50 and r["requests"] == 20
    assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert main(["bench", "--solvers", "nope"]) == 2
    assert "unknown solver(s) nope" in capsys.readouterr().err


def test_bad_config_files_exit_2_without_a_traceback(tmp_path, write_config, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"site: \"caf\xe9\"\n")
    assert main(["check", "--config", str(bad)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    # A store file that looks like SQLite but is damaged: found only when the store opens at start-up.
    store = tmp_path / "exp.db"
    store.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    assert main(["run", "--config", str(write_config())]) == 2
    err = capsys.readouterr().err
    assert f"store.path: cannot open the experience store '{store}'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "1000000000"], "--nodes: must be between 1 and 100000, got 1000000000"),
        (["--clients", "100000"], "--clients: must be between 1 and 256, got 100000"),
        (["--k", "5000"], "--k: must be between 1 and 1000, got 5000"),
        (["--requests", "5"], "--requests: must be between 10 and 1000000, got 5"),
        (["--solvers", "cpsat"], "'cpsat' is a batch solver"),
        (["--out", "{tmp}/afile/bench.json"], "--out: cannot make folder '{tmp}/afile': '{tmp}/afile' is a file"),
    ],
)
def test_bench_refuses_bad_arguments_before_it_runs(argv, message, capsys, tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    assert main(["bench", *(a.format(tmp=tmp_path) for a in argv)]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
