"""Comma lists keep every entry: an empty one (``best-fit,``, ``a=1,,b=2``) is refused naming the
option and its position, where it was silently dropped (a name lost in an edit went unnoticed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_agent.cli import main as edge_agent_main
from iro_fed.cli import main as iro_main
from iro_fed.k8s.webhook import parse_selector


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})


# --- iro webhook --selector (iro_fed.k8s.webhook.parse_selector) -----------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # kubectl: "found '', expected: identifier after ','"; before the fix: {"app": "x"}
        ("app=x,", "empty term at position 2 of 2 in 'app=x,'"),
        # kubectl: "found ',', expected: identifier after ','"; before: {"a": "1", "b": "2"}
        ("a=1,,b=2", "empty term at position 2 of 3 in 'a=1,,b=2'"),
        ("a=1, ,b=2", "empty term at position 2 of 3"),
        # kubectl: "found ',', expected: !, identifier, or 'end of string'"; before: {"a": "1"}
        (",a=1", "empty term at position 1 of 2 in ',a=1'"),
        (",", "empty term at position 1 of 2 in ','"),  # before: {} - every pod selected
    ],
)
def test_selector_with_an_empty_term_is_refused_naming_its_position(text, fragment):
    with pytest.raises(ValueError) as err:
        parse_selector(text)
    assert fragment in str(err.value)


@pytest.mark.parametrize("text", [None, "", "  "])
def test_an_empty_or_blank_selector_is_still_no_selector(text):
    assert parse_selector(text) == {}  # kubectl's "" is Everything too


def test_iro_webhook_selector_with_a_stray_comma_exits_2(capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--selector", "app=x,"]
    assert iro_main(argv) == 2
    assert "--selector: empty term at position 2 of 2 in 'app=x,'" in capsys.readouterr().err


def test_iro_webhook_selector_with_a_stray_comma_exits_2_as_a_process(tmp_path):
    done = _run("-m", "iro_fed.cli", "webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__,
                "--selector", "a=1,,b=2", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--selector: empty term at position 2 of 3 in 'a=1,,b=2'" in done.stderr
    assert "Traceback" not in done.stderr


# --- edge-agent bench --solvers --------------------------------------------------------------


@pytest.mark.parametrize(
    ("solvers", "message"),
    [
        # before the fix each was benched as the names left, exit 0 after minutes of benching
        ("best-fit,", "--solvers: empty solver name at position 2 of 2 in 'best-fit,'"),
        ("best-fit,,kube-default", "--solvers: empty solver name at position 2 of 3 in 'best-fit,,kube-default'"),
        (",best-fit", "--solvers: empty solver name at position 1 of 2 in ',best-fit'"),
        ("best-fit, ,kube-default", "--solvers: empty solver name at position 2 of 3"),
        ("best-fit,best-fit", "--solvers: solver 'best-fit' given twice"),  # before: benched twice
        ("", "--solvers: give at least one solver name, got ''"),
        (",,", "--solvers: give at least one solver name, got ',,'"),
        ("nope,,also-nope", "--solvers: unknown solver(s) nope, also-nope"),  # every unknown one named at once
    ],
)
def test_bench_refuses_a_solver_list_with_an_empty_or_repeated_name(solvers, message, capsys, tmp_path):
    out = tmp_path / "bench.json"
    assert edge_agent_main(["bench", "--solvers", solvers, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # refused before the bench, nothing written


def test_bench_with_a_stray_comma_exits_2_as_a_process(tmp_path):
    done = _run("-m", "edge_agent", "bench", "--nodes", "10", "--requests", "10", "--solvers", "best-fit,",
                "--out", str(tmp_path / "bench.json"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "edge-agent bench: error: --solvers: empty solver name at position 2 of 2 in 'best-fit,'" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "bench.json").exists()
