"""``iro`` prints names, paths, reasons and messages as they are: rich markup in user data
(``batch[/gpu]``, ``web[blue]``, a folder ``[/x]``) neither crashes a command nor changes the
text, and the install hints keep their ``[extra]``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from iro_fed.cli import main


def _bracket_problem() -> dict[str, Any]:
    """Two workloads too big for the one node: both unplaced, their names in the reasons list."""
    return {
        "domains": [{"name": "az", "price_per_hour": {"cpu": 0.03}}],
        "nodes": [{"name": "n0", "domain": "az", "capacity": {"cpu": 1000, "memory": 1024}}],
        "workloads": [
            {"name": "batch[/gpu]", "requests": {"cpu": 6000, "memory": 10}},
            {"name": "web[blue]", "requests": {"cpu": 6000, "memory": 10}},
        ],
    }


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _hide_module(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """find_spec answers None for ``missing``, as if its package were not installed."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None):
        if name == missing or name.startswith(missing + "."):
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_solve_prints_markup_names_literally_and_writes_the_placement(tmp_path, capsys):
    problem = _write(tmp_path / "brk.json", _bracket_problem())
    out = tmp_path / "placement.json"
    assert main(["solve", str(problem), "--solver", "best-fit", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "2 unplaced:" in stdout
    assert "  batch[/gpu]: " in stdout
    assert "  web[blue]: " in stdout  # was printed as "web" in blue
    assert json.loads(out.read_text())["unplaced"]


def test_solve_problem_and_out_paths_with_brackets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a" / "[" / "x]" / "[blue]" / "p.json", _bracket_problem())
    problem, out = "a/[/x]/[blue]/p.json", "a/[/x]/[blue]/placement.json"
    assert main(["solve", problem, "--solver", "best-fit", "--out", out]) == 0
    stdout = capsys.readouterr().out
    assert f"{problem}: 2 workloads on 1 nodes" in stdout  # the table title
    assert f"placement written to {out}" in stdout
    assert Path(out).is_file()


def test_compare_paths_with_close_tags(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a relative path holding "[/x]": the table title and the progress description
    _write(tmp_path / "a" / "[" / "x]" / "p.json", _bracket_problem())
    name = "a/[/x]/p.json"
    assert Path(name).is_file()
    out = "a/[/x]/r.json"
    assert main(["compare", name, "--solvers", "best-fit,first-fit", "--out", out]) == 0
    stdout = capsys.readouterr().out
    assert f"{name}: 2 workloads on 1 nodes" in stdout
    assert f"results written to {out}" in stdout
    assert len(json.loads(Path(out).read_text())["results"]) == 2


def test_validate_unknown_field_with_markup(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = _bracket_problem()
    doc["[/x]"] = 1  # an unknown field: a note, not an error
    _write(tmp_path / "a" / "[" / "x]" / "p.json", doc)
    assert main(["validate", "a/[/x]/p.json"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("a/[/x]/p.json: valid, Problem(")
    assert "note: a/[/x]/p.json: [/x]: unknown field, ignored" in captured.err


def test_solvers_table_install_hint_keeps_the_extra(capsys, monkeypatch):
    _hide_module(monkeypatch, "ortools")
    assert main(["solvers"]) == 0
    stdout = capsys.readouterr().out
    assert "pip install 'iro-fed[cpsat]'" in stdout  # was "pip install 'iro-fed'"


def test_compare_error_cell_keeps_the_install_hint(tmp_path, capsys, monkeypatch):
    _hide_module(monkeypatch, "ortools")
    problem = _write(tmp_path / "p.json", _bracket_problem())
    assert main(["compare", str(problem), "--solvers", "cpsat,best-fit"]) == 0
    stdout = capsys.readouterr().out
    assert "solver 'cpsat' needs ortools (pip install" in stdout  # the error cell, over two lines
    assert "'iro-fed[cpsat]')" in stdout  # was "'iro-fed')"
