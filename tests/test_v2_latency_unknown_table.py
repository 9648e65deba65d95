"""``iro solve`` and ``iro compare`` show how many placed pods the mean latency leaves out."""

from __future__ import annotations

import json
from pathlib import Path

from iro_fed.cli import main

BANK = Path(__file__).resolve().parents[1] / "examples" / "problems" / "bank-three-zone.json"


def gap_problem(tmp_path: Path) -> Path:
    # One node, on edge-1; users-us has no latency to edge-1: a and b are unknown, c is 4 ms.
    doc = {
        "domains": [{"name": "edge-1"}, {"name": "zone-a"}],
        "latency_ms": {"users-us": {"zone-a": 3.0}, "users-eu": {"edge-1": 4.0, "zone-a": 8.0}},
        "nodes": [{"name": "e0", "domain": "edge-1", "capacity": {"cpu": 4000, "memory": 4096}}],
        "workloads": [
            {"name": "a", "requests": {"cpu": 100}, "user_region": "users-us"},
            {"name": "b", "requests": {"cpu": 100}, "user_region": "users-us"},
            {"name": "c", "requests": {"cpu": 100}, "user_region": "users-eu"},
        ],
    }
    path = tmp_path / "gap.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def only_unknown(tmp_path: Path) -> Path:
    doc = json.loads(gap_problem(tmp_path).read_text())
    doc["workloads"] = doc["workloads"][:2]
    path = tmp_path / "only_unknown.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_solve_shows_the_unknown_count(tmp_path: Path, capsys) -> None:
    assert main(["solve", str(gap_problem(tmp_path)), "--solver", "best-fit"]) == 0
    assert "4.0 (2 unknown)" in capsys.readouterr().out


def test_solve_with_no_known_latency_shows_the_count(tmp_path: Path, capsys) -> None:
    assert main(["solve", str(only_unknown(tmp_path)), "--solver", "best-fit"]) == 0
    assert "- (2 unknown)" in capsys.readouterr().out


def test_compare_shows_the_unknown_count_per_solver(tmp_path: Path, capsys) -> None:
    assert main(["compare", str(gap_problem(tmp_path)), "--solvers", "best-fit,first-fit"]) == 0
    out = capsys.readouterr().out
    assert out.count("4.0 (2 unknown)") == 2


def test_all_known_is_printed_as_before(capsys) -> None:
    assert main(["solve", str(BANK), "--solver", "best-fit"]) == 0
    out = capsys.readouterr().out
    assert "unknown" not in out and "latency ms" in out
